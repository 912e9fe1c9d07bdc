// The plugin's allocation record: what it writes, the orchestrator reads back; bad lines are reported, not
// fatal, and concurrent appends never interleave.
#include "node/allocation_record.hpp"
#include "node/gpu_peaks.hpp"
#include "util/error.hpp"

#include <csignal>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace infrarsi;
using namespace infrarsi::node;

namespace {
AllocationRecord sample() {
    AllocationRecord r;
    r.job_id = 42;
    r.array_job_id = 40;
    r.array_task_id = 2;
    r.step_id = 0;
    r.node = "n1";
    r.time = "2024-05-01T12:00:00Z";
    r.mode = "record";
    r.plugin_version = "0.1.0";
    r.record_ms = 312.5;
    r.topology = topology_from_synthetic("pack:1 numa:1 l3:1(size=16MB) l2:4(size=1MB) core:1 pu:2");
    r.calibration.compute_gflops = summarize({1.0, 1.1, 0.9});
    r.calibration.memory_gbs = summarize({10.0, 11.0});
    r.calibration.timer_overshoot_us = summarize({50, 60});
    r.calibration.timer_resolution_ns = 20;
    r.calibration.elapsed_ms = 290;
    r.calibration.budget_ms = 300;
    return r;
}

std::filesystem::path temp_dir(const char* name) {
    auto d = std::filesystem::temp_directory_path() /
             (std::string("infrarsi-unit-") + name + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    return d;
}
} // namespace

TEST_CASE("a record round-trips through one JSON line") {
    auto r = sample();
    auto line = to_json_line(r);
    CHECK(line.back() == '\n');
    CHECK(line.find('\n') == line.size() - 1);
    CHECK(parse_record_line(line) == r);
    // With a GPU section, and without: a record of a node the plugin did not probe has none.
    CHECK_FALSE(nlohmann::json::parse(line).contains("gpu"));
    r.gpu = node::GpuCalibration{};
    r.gpu->status = GpuProbeStatus::no_library;
    r.gpu->detail = "libcudart (not found in the loader's path)";
    CHECK(parse_record_line(to_json_line(r)) == r);
}

TEST_CASE("record validation names what is wrong") {
    auto j = to_json(sample());
    auto check_bad = [&](const char* what, auto mutate) {
        auto bad = j;
        mutate(bad);
        CHECK_THROWS_WITH_AS(record_from_json(bad), doctest::Contains(what), Error);
    };
    check_bad("format", [](auto& b) { b["format"] = "other/9"; });
    check_bad("job_id", [](auto& b) { b["job_id"] = -1; });
    check_bad("job_id", [](auto& b) { b["job_id"] = 0; });
    check_bad("node", [](auto& b) { b["node"] = "n1\nn2"; });
    check_bad("node", [](auto& b) { b["node"] = ""; });
    check_bad("time", [](auto& b) { b["time"] = "yesterday"; });
    check_bad("mode", [](auto& b) { b["mode"] = "off"; });
    check_bad("record_ms", [](auto& b) { b["record_ms"] = -1.0; });
    check_bad("cores", [](auto& b) { b["topology"].erase("cores"); });
    check_bad("calibration", [](auto& b) { b.erase("calibration"); });
    CHECK_THROWS_WITH_AS(parse_record_line("{\"format\": "), doctest::Contains("not valid JSON"), Error);
    // A number beyond double's range (nlohmann's out_of_range): a bad line, reported like any other.
    CHECK_THROWS_WITH_AS(parse_record_line("{\"format\": 1e999}"), doctest::Contains("not valid JSON"),
                         Error);
    // Nested past the depth limit (another host's plugin wrote it): a bad line, refused while parsing.
    CHECK_THROWS_WITH_AS(parse_record_line(std::string(100000, '[') + std::string(100000, ']')),
                         doctest::Contains("nested more than 64 levels"), Error);
}

TEST_CASE("appended records read back, a corrupt line is reported with its line number and skipped") {
    auto dir = temp_dir("records");
    auto path = (dir / "allocations.jsonl").string();
    auto a = sample(), b = sample();
    b.node = "n2";
    append_record(path, a);
    { std::ofstream(path, std::ios::app) << "{not json\n"; }
    append_record(path, b);
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0644);
    auto res = read_records(path);
    REQUIRE(res.records.size() == 2);
    CHECK(res.records[0] == a);
    CHECK(res.records[1].node == "n2");
    REQUIRE(res.errors.size() == 1);
    CHECK(res.errors[0].find(":2:") != std::string::npos);
    std::filesystem::remove_all(dir);
}

TEST_CASE("concurrent appends from several processes never interleave") {
    auto dir = temp_dir("concurrent");
    auto path = (dir / "allocations.jsonl").string();
    std::vector<pid_t> kids;
    for (int p = 0; p < 4; ++p) {
        pid_t pid = ::fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            auto r = sample();
            r.node = "n" + std::to_string(p);
            for (int i = 0; i < 25; ++i)
                append_record(path, r);
            ::_exit(0);
        }
        kids.push_back(pid);
    }
    for (pid_t k : kids) {
        int st = 0;
        ::waitpid(k, &st, 0);
        CHECK(WIFEXITED(st));
    }
    auto res = read_records(path);
    CHECK(res.errors.empty());
    CHECK(res.records.size() == 100);
    std::filesystem::remove_all(dir);
}

TEST_CASE("appending refuses to follow a symlink") {
    auto dir = temp_dir("symlink");
    std::filesystem::create_symlink(dir / "elsewhere", dir / "allocations.jsonl");
    CHECK_THROWS_AS(append_record((dir / "allocations.jsonl").string(), sample()), Error);
    CHECK_FALSE(std::filesystem::exists(dir / "elsewhere"));
    std::filesystem::remove_all(dir);
}

namespace {
// Runs `fn` in a child that SIGALRM kills after 60 s: 0 when fn returned, 1 when it threw Error, -1 when it
// hung (a writer that blocks must fail the test, not hang the suite).
int in_child_with_deadline(const std::function<void()>& fn) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        ::alarm(60);
        try {
            fn();
        } catch (const Error&) {
            ::_exit(1);
        }
        ::_exit(0);
    }
    int st = 0;
    ::waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// A process that holds flock(kind) on `path` until killed: another user's process, as far as flock cares.
pid_t hold_lock(const std::string& path, int kind) {
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        int fd = ::open(path.c_str(), O_RDONLY | O_CREAT, 0644);
        if (fd < 0 || ::flock(fd, kind) != 0) ::_exit(1);
        (void)!::write(ready[1], "x", 1);
        for (;;)
            ::pause();
    }
    ::close(ready[1]);
    char c = 0;
    REQUIRE(::read(ready[0], &c, 1) == 1);
    ::close(ready[0]);
    return pid;
}

void stop(pid_t pid) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
}
} // namespace

TEST_CASE("a reader's shared lock on the records file does not stall a writer") {
    auto dir = temp_dir("shared-lock");
    auto path = (dir / "allocations.jsonl").string();
    pid_t holder = hold_lock(path, LOCK_SH);
    CHECK(in_child_with_deadline([&] { append_record(path, sample()); }) == 0);
    stop(holder);
    CHECK(read_records(path).records.size() == 1);
    std::filesystem::remove_all(dir);
}

TEST_CASE("a busy writers' lock makes the writer give up after its wait, not block") {
    auto dir = temp_dir("busy-lock");
    auto path = (dir / "allocations.jsonl").string();
    pid_t holder = hold_lock(path + ".lock", LOCK_EX);
    CHECK(in_child_with_deadline(
              [&] { append_record(path, sample(), 0644, std::chrono::milliseconds(50)); }) == 1);
    stop(holder);
    struct stat st {};
    REQUIRE(::stat((path + ".lock").c_str(), &st) == 0);
    append_record(path, sample());
    REQUIRE(::stat((path + ".lock").c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600); // only its owner can open it, hence lock it
    std::filesystem::remove_all(dir);
}

TEST_CASE("a FIFO planted as the records file is refused without blocking, with or without a reader") {
    auto dir = temp_dir("fifo");
    auto path = (dir / "allocations.jsonl").string();
    REQUIRE(::mkfifo(path.c_str(), 0666) == 0);
    CHECK(in_child_with_deadline([&] { append_record(path, sample()); }) == 1);
    int reader = ::open(path.c_str(), O_RDONLY | O_NONBLOCK);
    REQUIRE(reader >= 0);
    CHECK(in_child_with_deadline([&] { append_record(path, sample()); }) == 1);
    ::close(reader);
    std::filesystem::remove_all(dir);
}

TEST_CASE("a records file owned by another user or hard-linked elsewhere is refused") {
    auto dir = temp_dir("owner");
    auto path = (dir / "allocations.jsonl").string();
    std::ofstream(path) << "";
    REQUIRE(::link(path.c_str(), (dir / "elsewhere").c_str()) == 0);
    CHECK_THROWS_WITH_AS(append_record(path, sample()), doctest::Contains("hard links"), Error);
    std::filesystem::remove(dir / "elsewhere");
    if (::geteuid() == 0) {
        REQUIRE(::chown(path.c_str(), 65534, 65534) == 0);
        CHECK_THROWS_WITH_AS(append_record(path, sample()), doctest::Contains("owned by uid 65534"), Error);
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("reading a missing records file is an error naming it") {
    CHECK_THROWS_WITH_AS(read_records("/nonexistent/allocations.jsonl"), doctest::Contains("/nonexistent"),
                         Error);
}

TEST_CASE("a node's peak FLOP/s from its record: the fastest compute sample times its cores") {
    node::AllocationRecord r;
    CHECK_FALSE(node::calibration_peak_flops(r));
    r.calibration.compute_gflops = node::summarize({1.0, 2.5, 2.0});
    CHECK_FALSE(node::calibration_peak_flops(r)); // no cores known
    r.topology.cores = 4;
    REQUIRE(node::calibration_peak_flops(r));
    CHECK(*node::calibration_peak_flops(r) == doctest::Approx(2.5e9 * 4));
    // With the vector FMA probe (a current plugin's record): its fastest sample, the peak a GEMM can reach.
    r.calibration.vector_gflops = node::summarize({60.0, 64.0, 58.0});
    r.calibration.vector_isa = "avx2+fma";
    CHECK(*node::calibration_peak_flops(r) == doctest::Approx(64e9 * 4));
    const auto peak = node::node_peak_flops(r);
    REQUIRE(peak);
    CHECK(peak->source.find("avx2+fma") != std::string::npos);
}

TEST_CASE("a node's peak for MFU: its GPUs' dense bf16 peaks when its GPU probe ended ok, else the CPU's") {
    node::AllocationRecord r;
    r.calibration.compute_gflops = node::summarize({1.0, 2.5, 2.0});
    r.topology.cores = 4;
    auto cpu = node::node_peak_flops(r);
    REQUIRE(cpu);
    CHECK_FALSE(cpu->gpu);
    CHECK(cpu->flops == doctest::Approx(2.5e9 * 4));

    node::GpuCalibration g;
    g.status = node::GpuProbeStatus::ok;
    node::GpuDevice h200;
    h200.model = "NVIDIA H200";
    g.gpus = {h200, h200};
    g.gpus[1].index = 1;
    r.gpu = g;
    auto two = node::node_peak_flops(r);
    REQUIRE(two);
    CHECK(two->gpu);
    const auto one = node::gpu_peak_from_datasheet("NVIDIA H200", "bf16");
    REQUIRE(one);
    CHECK(two->flops == doctest::Approx(2 * one->tflops * 1e12));
    CHECK(two->source.find("2 GPU(s)") != std::string::npos);
    CHECK(two->source.find("datasheet") != std::string::npos);

    // A GPU neither the datasheet table nor a GEMM probe knows: no figure, rather than one that leaves it
    // out.
    r.gpu->gpus[1].model = "Some Future GPU";
    CHECK_FALSE(node::node_peak_flops(r));
    r.gpu->gpus[1].gemm_tflops = node::summarize({400, 410, 405});
    auto mixed = node::node_peak_flops(r);
    REQUIRE(mixed);
    CHECK(mixed->flops == doctest::Approx((one->tflops + 405) * 1e12));
    CHECK(mixed->source.find("measured") != std::string::npos);

    // A probe that did not end ok: the CPU's figure.
    r.gpu->status = node::GpuProbeStatus::timed_out;
    auto fallback = node::node_peak_flops(r);
    REQUIRE(fallback);
    CHECK_FALSE(fallback->gpu);
}
