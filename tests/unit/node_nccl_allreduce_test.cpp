// The NCCL all-reduce probe without a GPU (what every CI machine is): the libraries absent, the bus bandwidth
// formula, the rendezvous file between ranks (and what a hostile or stale file there does), the Slurm task's
// rank, the record's JSON and its place in an allocation record. The figures on GPUs come from a GPU node
// (`infrarsi node --gpu --nccl-allreduce`, `srun infrarsi nccl-probe`).
#include "node/allocation_record.hpp"
#include "node/nccl_allreduce.hpp"
#include "util/error.hpp"

#include <chrono>
#include <cmath>
#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

using namespace infrarsi;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

struct TempDir {
    fs::path path = fs::temp_directory_path() / ("infrarsi-nccl-" + std::to_string(::getpid()));
    TempDir() { fs::create_directories(path); }
    ~TempDir() { fs::remove_all(path); }
};

node::cuda_abi::NcclUniqueId some_id() {
    node::cuda_abi::NcclUniqueId id{};
    for (size_t i = 0; i < sizeof id.internal; ++i)
        id.internal[i] = static_cast<char>(i * 37 + 11);
    return id;
}

bool same(const node::cuda_abi::NcclUniqueId& a, const node::cuda_abi::NcclUniqueId& b) {
    return std::equal(std::begin(a.internal), std::end(a.internal), std::begin(b.internal));
}

} // namespace

TEST_CASE("nccl-tests' bus bandwidth: algorithm bandwidth x 2 (n - 1) / n") {
    // 1 GB in 0.1 s is 10 GB/s of algorithm bandwidth.
    CHECK(node::allreduce_bus_gbs(1e9, 0.1, 2) == doctest::Approx(10.0));
    CHECK(node::allreduce_bus_gbs(1e9, 0.1, 8) == doctest::Approx(17.5));
    CHECK(node::allreduce_bus_gbs(1e9, 0.1, 1) == 0.0);
    CHECK(node::allreduce_bus_gbs(1e9, 0.0, 8) == 0.0);
}

TEST_CASE(
    "without CUDA's and NCCL's libraries both forms record no_library, naming what is missing, at once") {
    TempDir empty;
    node::NcclProbeOptions o;
    o.library_dirs = {empty.path.string()};
    o.loader_path = false;
    o.budget = 3000ms;
    const auto t0 = std::chrono::steady_clock::now();
    const auto n = node::probe_nccl_allreduce_node(o);
    CHECK(n.status == node::GpuProbeStatus::no_library);
    CHECK(n.detail.find("libnccl") != std::string::npos);
    CHECK(n.detail.find("libcudart") != std::string::npos);
    CHECK(n.bus_gbs.samples.empty());
    // A rank does not wait for a rendezvous it could never use.
    const auto r = node::probe_nccl_allreduce_rank(o, {1, 2, 0}, empty.path / "nccl-id.1.0");
    CHECK(r.status == node::GpuProbeStatus::no_library);
    CHECK(std::chrono::steady_clock::now() - t0 < 2500ms);
}

TEST_CASE("on this machine the node form ends in a status within its budget, figures only where it is ok") {
    node::NcclProbeOptions o;
    o.budget = 4000ms;
    const auto t0 = std::chrono::steady_clock::now();
    const auto n = node::probe_nccl_allreduce_node(o);
    CHECK(std::chrono::steady_clock::now() - t0 < 6s);
    if (n.status == node::GpuProbeStatus::ok) {
        CHECK(n.ranks >= 2);
        CHECK(n.bus_gbs.median > 0);
    } else {
        CHECK(n.bus_gbs.samples.empty());
        CHECK_FALSE(n.detail.empty());
    }
    CHECK(node::nccl_allreduce_from_json(node::to_json(n)) == n);
}

TEST_CASE("the unique id travels as 256 hex digits, anything else is not an id") {
    const auto id = some_id();
    const auto text = node::encode_unique_id(id);
    CHECK(text.size() == 257);
    const auto back = node::decode_unique_id(text);
    REQUIRE(back);
    CHECK(same(*back, id));
    CHECK_FALSE(node::decode_unique_id(text.substr(0, 128)));          // truncated
    CHECK_FALSE(node::decode_unique_id(text.substr(0, 256)));          // no newline
    CHECK_FALSE(node::decode_unique_id("zz" + text.substr(2)));        // not hex
    CHECK_FALSE(node::decode_unique_id(std::string(256, 'A') + "\n")); // upper case is not what we write
    CHECK_FALSE(node::decode_unique_id(""));
}

TEST_CASE("rendezvous: rank 0 publishes whole, once, the others read it, or give up at the deadline") {
    TempDir d;
    const auto file = d.path / "nccl-id.7.0";
    // A rank that starts first waits; the id appears while it waits.
    std::thread publisher([&] {
        std::this_thread::sleep_for(200ms);
        node::publish_unique_id(file, some_id());
    });
    const auto got = node::await_unique_id(file, std::chrono::steady_clock::now() + 5s);
    publisher.join();
    REQUIRE(got);
    CHECK(same(*got, some_id()));
    CHECK((fs::status(file).permissions() & fs::perms::others_read) == fs::perms::none);
    // No temporary left beside it.
    CHECK(std::distance(fs::directory_iterator(d.path), fs::directory_iterator{}) == 1);
    // A stale id is never overwritten: ranks may have read it.
    CHECK_THROWS_WITH_AS(node::publish_unique_id(file, some_id()), doctest::Contains("stale"), Error);
    CHECK(std::distance(fs::directory_iterator(d.path), fs::directory_iterator{}) == 1);
    // Nothing comes: nullopt at the deadline, not a hang.
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_FALSE(node::await_unique_id(d.path / "never", t0 + 300ms));
    CHECK(std::chrono::steady_clock::now() - t0 < 2s);
}

TEST_CASE(
    "rendezvous: a symlink, a FIFO or another file in the id's place is refused, not read or waited on") {
    TempDir d;
    const auto deadline = [] { return std::chrono::steady_clock::now() + 2s; };
    std::ofstream(d.path / "secret") << std::string(256, 'a') << "\n";
    fs::create_symlink(d.path / "secret", d.path / "link");
    CHECK_THROWS_AS(node::await_unique_id(d.path / "link", deadline()), Error);
    REQUIRE(::mkfifo((d.path / "fifo").c_str(), 0600) == 0);
    CHECK_THROWS_AS(node::await_unique_id(d.path / "fifo", deadline()), Error);
    std::ofstream(d.path / "short") << "abcd\n";
    CHECK_THROWS_WITH_AS(node::await_unique_id(d.path / "short", deadline()),
                         doctest::Contains("not an NCCL unique id"), Error);
    // Publishing through a planted symlink does not write where it points.
    fs::create_symlink(d.path / "elsewhere", d.path / "planted");
    CHECK_THROWS_AS(node::publish_unique_id(d.path / "planted", some_id()), Error);
    CHECK_FALSE(fs::exists(d.path / "elsewhere"));
}

TEST_CASE("a Slurm task's rank, device and rendezvous name, what is missing is named") {
    std::map<std::string, std::string> env = {{"SLURM_PROCID", "3"},
                                              {"SLURM_NTASKS", "8"},
                                              {"SLURM_LOCALID", "3"},
                                              {"SLURM_JOB_ID", "1234"},
                                              {"SLURM_STEP_ID", "0"}};
    auto lookup = [&](const char* name) -> const char* {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
    };
    auto r = node::slurm_rank(lookup);
    CHECK(r.place.rank == 3);
    CHECK(r.place.ranks == 8);
    CHECK(r.place.device == 3);
    CHECK(r.rendezvous_name == "nccl-id.1234.0");
    // --gpus-per-task=1: Slurm leaves each task one visible GPU, device 0.
    env["CUDA_VISIBLE_DEVICES"] = "5";
    CHECK(node::slurm_rank(lookup).place.device == 0);
    env["CUDA_VISIBLE_DEVICES"] = "0,1,2,3";
    CHECK(node::slurm_rank(lookup).place.device == 3);
    env["SLURM_PROCID"] = "8";
    CHECK_THROWS_WITH_AS(node::slurm_rank(lookup), doctest::Contains("not below"), Error);
    env["SLURM_PROCID"] = "-1";
    CHECK_THROWS_AS(node::slurm_rank(lookup), Error);
    env.erase("SLURM_PROCID");
    CHECK_THROWS_WITH_AS(node::slurm_rank(lookup), doctest::Contains("SLURM_PROCID is not set"), Error);
}

TEST_CASE(
    "an all-reduce record is validated as it is read, and rides in an allocation record only when taken") {
    node::NcclAllreduce n;
    n.status = node::GpuProbeStatus::ok;
    n.version = 22703;
    n.ranks = 8;
    n.bytes = 256u << 20;
    n.bus_gbs = node::summarize({380.5, 382.0, 379.9});
    n.elapsed_ms = 2100;
    n.budget_ms = 5000;
    CHECK(node::nccl_allreduce_from_json(node::to_json(n)) == n);
    auto j = node::to_json(n);
    j["status"] = "fast";
    CHECK_THROWS_AS(node::nccl_allreduce_from_json(j), Error);
    j = node::to_json(n);
    j["ranks"] = -2;
    CHECK_THROWS_AS(node::nccl_allreduce_from_json(j), Error);
    j = node::to_json(n);
    j["bus_gbs"]["samples"] = {1.0, std::nan("")};
    CHECK_THROWS_AS(node::nccl_allreduce_from_json(j), Error);
    CHECK_THROWS_AS(node::nccl_allreduce_from_json(nlohmann::json::array()), Error);

    node::AllocationRecord r;
    r.job_id = 5;
    r.node = "n1";
    r.time = "2026-12-05T12:00:00Z";
    r.mode = "record";
    r.plugin_version = "test";
    r.topology.cores = 4;
    r.topology.pus = 8;
    // Without the probe the record is what it was: no key.
    CHECK_FALSE(node::to_json(r).contains("nccl_allreduce"));
    r.nccl_allreduce = n;
    const auto back = node::record_from_json(node::to_json(r));
    REQUIRE(back.nccl_allreduce);
    CHECK(*back.nccl_allreduce == n);
}
