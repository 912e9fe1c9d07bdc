// The GPU probes without a GPU (what every CI machine is): the libraries absent, the bounded child, the
// record's JSON, the slow-GPU rule and the MFU peaks. The probes' figures on a real GPU come from
// scripts/device-check; its record, captured on an NVIDIA H200, is read back here.
#include "node/allocation_record.hpp"
#include "node/gpu.hpp"
#include "node/gpu_peaks.hpp"
#include "util/bounded_child.hpp"
#include "util/error.hpp"

#include <chrono>
#include <doctest/doctest.h>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>
#include <unistd.h>

using namespace infrarsi;
using namespace std::chrono_literals;

TEST_CASE("a node without CUDA's libraries records no_library, naming what it looked for, at once") {
    const auto empty =
        std::filesystem::temp_directory_path() / ("infrarsi-nocuda-" + std::to_string(::getpid()));
    std::filesystem::create_directories(empty);
    node::GpuProbeOptions o;
    o.library_dirs = {empty.string()};
    o.loader_path = false;
    const auto t0 = std::chrono::steady_clock::now();
    const auto g = node::probe_gpus(o);
    CHECK(std::chrono::steady_clock::now() - t0 < 2s);
    CHECK(g.status == node::GpuProbeStatus::no_library);
    CHECK(g.detail.find("libcudart") != std::string::npos);
    CHECK(g.detail.find(empty.string()) != std::string::npos);
    CHECK(g.gpus.empty());
    // Through the plugin's bounded child, the same answer.
    const auto b = node::probe_gpus_bounded(o);
    CHECK(b.status == node::GpuProbeStatus::no_library);
    CHECK(b.detail == g.detail);
    std::filesystem::remove_all(empty);
}

TEST_CASE("on this machine the probe ends in a status, and a GPU's figures only where there is a GPU") {
    node::GpuProbeOptions o;
    o.budget = 3000ms;
    const auto g = node::probe_gpus_bounded(o);
    if (g.status == node::GpuProbeStatus::ok) {
        REQUIRE_FALSE(g.gpus.empty());
        for (const auto& d : g.gpus)
            CHECK(d.memory_bytes > 0);
    } else {
        CHECK(g.gpus.empty());
        CHECK_FALSE(g.detail.empty()); // why not: for the record's reader
    }
    CHECK(node::gpu_calibration_from_json(node::to_json(g)) == g);
}

TEST_CASE("a bounded child: its output when it finishes, timed_out past the budget, failed when it throws") {
    auto ok = run_in_child([] { return std::string("hello"); }, 5s, 1024);
    CHECK(ok.end == ChildEnd::finished);
    CHECK(ok.out == "hello");
    const auto t0 = std::chrono::steady_clock::now();
    auto late = run_in_child(
        [] {
            std::this_thread::sleep_for(30s);
            return std::string("late");
        },
        200ms, 1024);
    CHECK(late.end == ChildEnd::timed_out);
    CHECK(std::chrono::steady_clock::now() - t0 < 20s);
    auto bad =
        run_in_child([]() -> std::string { throw std::runtime_error("vendor library crashed"); }, 5s, 1024);
    CHECK(bad.end == ChildEnd::failed);
    auto big = run_in_child([] { return std::string(4096, 'x'); }, 5s, 1024);
    CHECK(big.end == ChildEnd::failed);
}

TEST_CASE("a GPU more than 1.5x slower than the median is named, an even set names none") {
    CHECK(node::slower_than_median({790, 785, 500, 792}) == std::vector<int>{2});
    CHECK(node::slower_than_median({790, 785, 600, 792}).empty()); // 1.31x: within the rule
    CHECK(node::slower_than_median({790}).empty());
    CHECK(node::slower_than_median({}).empty());
    CHECK(node::slower_than_median({100, 40, 30, 100, 100}) == std::vector<int>{1, 2});
}

TEST_CASE("MFU peaks: the datasheet's dense figure by model and dtype, else the measured probe") {
    auto h200 = node::gpu_peak_from_datasheet("NVIDIA H200", "bf16");
    REQUIRE(h200);
    CHECK(h200->tflops == doctest::Approx(989.4));
    CHECK(h200->source.find("H200") != std::string::npos);
    CHECK(node::gpu_peak_from_datasheet("NVIDIA H200 NVL", "bfloat16")->tflops == doctest::Approx(835.5));
    CHECK(node::gpu_peak_from_datasheet("NVIDIA GH200 480GB", "bf16")->source.find("GH200") !=
          std::string::npos);
    CHECK(node::gpu_peak_from_datasheet("NVIDIA H100 PCIe", "bf16")->tflops == doctest::Approx(756.5));
    CHECK(node::gpu_peak_from_datasheet("NVIDIA H100 80GB HBM3", "bf16")->tflops == doctest::Approx(989.4));
    CHECK(node::gpu_peak_from_datasheet("NVIDIA A100-SXM4-80GB", "bf16")->tflops == doctest::Approx(312));
    CHECK(node::gpu_peak_from_datasheet("NVIDIA A10", "bf16")->tflops == doctest::Approx(125));
    CHECK(node::gpu_peak_from_datasheet("NVIDIA L40S", "fp32")->tflops == doctest::Approx(91.6));
    CHECK(node::gpu_peak_from_datasheet("NVIDIA L4", "bf16")->tflops == doctest::Approx(121));
    CHECK_FALSE(node::gpu_peak_from_datasheet("Tesla V100-SXM2-32GB", "bf16")); // no bf16 tensor cores
    CHECK(node::gpu_peak_from_datasheet("Tesla V100-SXM2-32GB", "float16")->tflops == doctest::Approx(125));
    CHECK_FALSE(node::gpu_peak_from_datasheet("NVIDIA H200", "int4"));
    CHECK_FALSE(node::gpu_peak_from_datasheet("Some Future GPU", "bf16"));

    node::GpuDevice unknown;
    unknown.model = "Some Future GPU";
    CHECK_FALSE(node::gpu_peak(unknown, "bf16"));
    unknown.gemm_tflops = node::summarize({410, 420, 415});
    auto measured = node::gpu_peak(unknown, "bf16");
    REQUIRE(measured);
    CHECK(measured->tflops == doctest::Approx(415));
    CHECK(measured->source.find("measured") != std::string::npos);
    CHECK_FALSE(node::gpu_peak(unknown, "fp32")); // the probe is bf16 only
}

TEST_CASE("a GPU record is validated as it is read") {
    node::GpuCalibration c;
    c.status = node::GpuProbeStatus::ok;
    node::GpuDevice d;
    d.model = "NVIDIA H200";
    d.memory_bytes = 150754820096ull;
    d.gemm_tflops = node::summarize({780, 790});
    d.memory_gbs = node::summarize({4200, 4300});
    c.gpus = {d, d};
    c.gpus[1].index = 1;
    c.links = {{0, 1, "nvlink"}};
    auto j = node::to_json(c);
    CHECK(node::gpu_calibration_from_json(j) == c);
    auto bad = j;
    bad["slow"] = {7};
    CHECK_THROWS_AS(node::gpu_calibration_from_json(bad), Error);
    bad = j;
    bad["links"][0]["b"] = 2;
    CHECK_THROWS_AS(node::gpu_calibration_from_json(bad), Error);
    bad = j;
    bad["status"] = "fine";
    CHECK_THROWS_AS(node::gpu_calibration_from_json(bad), Error);
    bad = j;
    bad["gpus"][0]["gemm_tflops"]["samples"] = {-1.0};
    CHECK_THROWS_AS(node::gpu_calibration_from_json(bad), Error);
}

TEST_CASE(
    "a node whose GPUs are more than 1.5x slower than the allocation's median node is named, its latest "
    "record counts, and nodes without a GPU probe are not judged") {
    auto record = [](const std::string& node, const std::string& time, std::vector<double> gemm) {
        node::AllocationRecord r;
        r.node = node;
        r.time = time;
        r.gpu = node::GpuCalibration{};
        r.gpu->status = node::GpuProbeStatus::ok;
        for (double g : gemm) {
            node::GpuDevice d;
            d.gemm_tflops = node::summarize({g});
            r.gpu->gpus.push_back(d);
        }
        return r;
    };
    std::vector<node::AllocationRecord> rs = {
        record("n1", "2026-12-04T10:00:00Z", {780, 790}), record("n2", "2026-12-04T10:00:00Z", {785, 775}),
        record("n3", "2026-12-04T10:00:00Z", {300, 320}), record("n4", "2026-12-04T10:00:00Z", {770, 800})};
    CHECK(node::slow_gpu_nodes(rs) == std::vector<std::string>{"n3"});
    // n3 fixed since: its latest record is what counts.
    rs.push_back(record("n3", "2026-12-04T11:00:00Z", {790, 780}));
    CHECK(node::slow_gpu_nodes(rs).empty());
    // A node without GPUs, or whose probe failed, is not judged.
    node::AllocationRecord cpu_only;
    cpu_only.node = "c1";
    rs.push_back(cpu_only);
    auto failed = record("n5", "2026-12-04T10:00:00Z", {});
    failed.gpu->status = node::GpuProbeStatus::failed;
    rs.push_back(failed);
    CHECK(node::slow_gpu_nodes(rs).empty());
    CHECK(node::slow_gpu_nodes({record("n1", "2026-12-04T10:00:00Z", {100})}).empty()); // nothing to compare
}
