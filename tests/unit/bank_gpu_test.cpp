// The experience bank and GPUs: hardware keyed and compared by GPU model, GPU memory and interconnect
// (tests/fixtures/hwloc/gpu-*.xml: an A100 node and an H100 node, both with an InfiniBand HCA), and the
// capacity rule that scales by the memory of one GPU when the limit is per GPU.
#include "bank/experience_bank.hpp"
#include "campaign/experience.hpp"
#include "contract/contract.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace infrarsi;
using namespace infrarsi::bank;
namespace fs = std::filesystem;

namespace {

const fs::path fixtures = INFRARSI_FIXTURES;
constexpr double GiB = 1024.0 * 1024 * 1024;

HardwareKey from_xml(const std::string& name, double gpu_memory = 0) {
    HardwareKey k;
    k.topology = node::topology_from_xml((fixtures / "hwloc" / name).string());
    k.accelerator_memory_bytes = gpu_memory;
    k.stack = {"g++ 12.2.0", "Open MPI 4.1.4", "", "toyload@abc"};
    return k;
}

// The toyload contract, with an edit, next to the fixture.
struct Contract {
    fs::path path;
    contract::Contract c;
    explicit Contract(const std::string& resources_extra) {
        std::string text = test::read_file(fixtures / "toyload.contract.toml");
        const std::string mem = "mem = \"300M\"";
        text.replace(text.find(mem), mem.size(), mem + "\n" + resources_extra);
        path = fixtures / ("tmp-bankgpu-" + std::to_string(::getpid()) + ".contract.toml");
        std::ofstream(path) << text;
        c = contract::load(path);
    }
    ~Contract() { fs::remove(path); }
};

struct Bank {
    test::TempDir dir{"infrarsi-bank-gpu"};
    ExperienceBank bank{(dir.path / "bank.sqlite").string(), "cluster-a"};
    void add(const HardwareKey& where, const space::Candidate& cand, double gpu_limit) {
        Finding f;
        f.kind = "knob_setting";
        f.workload = "toyload";
        f.verified = true;
        f.content = {{"candidate", cand.to_json()}, {"speedup", 1.5}};
        if (gpu_limit > 0) f.content["gpu_limit_bytes"] = gpu_limit;
        f.campaign = "a";
        REQUIRE(bank.add_finding(where, f));
    }
};

} // namespace

TEST_CASE("the bank tells GPU models, node interconnects and GPU interconnects apart") {
    const auto a100 = from_xml("gpu-2s32c-pcie4.xml", 80 * GiB);
    const auto h100 = from_xml("gpu-2s64c-pcie5.xml", 80 * GiB);
    CHECK(gpu_model_of(a100.topology) == "pci 10de:20b2");
    CHECK(gpu_model_of(h100.topology) == "pci 10de:2330");
    CHECK(node_interconnect(a100.topology) == "rdma");
    const auto vm = node::topology_from_xml((fixtures / "hwloc" / "kvm-2core-eth.xml").string());
    CHECK(node_interconnect(vm) == "ethernet");
    CHECK(gpu_model_of(vm).empty());

    // Same node, another GPU model: exp(-2/2).
    auto other_model = a100;
    other_model.gpu_model = "NVIDIA H100 80GB HBM3";
    auto named = a100;
    named.gpu_model = "NVIDIA A100-SXM4-80GB";
    CHECK(similarity(named, other_model) == doctest::Approx(std::exp(-1.0)));
    CHECK(similarity(named, named) == doctest::Approx(1.0));
    // The same node without its InfiniBand HCA: another node interconnect, one unit (and one NIC less).
    auto no_ib = a100;
    no_ib.topology.nics.erase(std::remove_if(no_ib.topology.nics.begin(), no_ib.topology.nics.end(),
                                             [](const node::OsDevice& d) { return d.kind == "openfabrics"; }),
                              no_ib.topology.nics.end());
    CHECK(node_interconnect(no_ib.topology) != "rdma");
    CHECK(similarity(a100, no_ib) < std::exp(-0.5));
    // NVLink against PCIe between the GPUs, where both are known.
    auto nvlink = a100, pcie = a100;
    nvlink.gpu_interconnect = "nvlink";
    pcie.gpu_interconnect = "pcie";
    CHECK(similarity(nvlink, pcie) == doctest::Approx(std::exp(-0.5)));
    CHECK(similarity(nvlink, a100) == doctest::Approx(1.0)); // unknown on one side: no penalty
    // Half the memory per GPU: one doubling.
    CHECK(similarity(a100, from_xml("gpu-2s32c-pcie4.xml", 40 * GiB)) ==
          doctest::Approx(std::exp(-0.5 * std::pow(std::log2(81.0 / 41.0), 2))));
}

TEST_CASE("GPU fields are part of a key's fingerprint only when known, and round-trip through JSON") {
    const auto a = from_xml("gpu-2s32c-pcie4.xml", 80 * GiB);
    const auto j = to_json(a);
    CHECK_FALSE(j.contains("gpu_model"));
    CHECK_FALSE(j.contains("gpu_interconnect"));
    auto named = a;
    named.gpu_model = "NVIDIA A100-SXM4-80GB";
    named.gpu_interconnect = "nvlink";
    CHECK(fingerprint(named) != fingerprint(a));
    const auto back = hardware_key_from_json(to_json(named));
    CHECK(back.gpu_model == named.gpu_model);
    CHECK(back.gpu_interconnect == "nvlink");
    CHECK(fingerprint(back) == fingerprint(named));
    CHECK(fingerprint(hardware_key_from_json(j)) == fingerprint(a));
    auto bad = j;
    bad["accelerator_memory_bytes"] = -1.0;
    CHECK_THROWS_AS(hardware_key_from_json(bad), Error);
}

TEST_CASE("a setting verified under a per-GPU limit scales by the memory of one GPU") {
    const auto here = from_xml("gpu-2s32c-pcie4.xml", 40 * GiB);
    Bank b;
    b.add(from_xml("gpu-2s32c-pcie4.xml", 80 * GiB), test::toy(8, 2, "none"), 80 * GiB);

    SUBCASE("this contract's gpu_mem against the finding's") {
        Contract k("gpu_mem = \"40G\"");
        campaign::CampaignView view{&k.c, nullptr, "b", {}};
        const auto seeds = campaign::seeds_from_bank(b.bank, view, here);
        REQUIRE(seeds.size() == 1);
        CHECK(seeds[0].candidate == test::toy(4, 4, "none"));
        CHECK(seeds[0].provenance["capacity"]["rule"] == "gpu_memory_scale");
        CHECK(seeds[0].provenance["capacity"]["scale"].get<double>() == doctest::Approx(0.5));
        CHECK(seeds[0].reason.find("per GPU") != std::string::npos);
    }
    SUBCASE("no gpu_mem here: the GPU memory of this hardware's key") {
        Contract k("");
        campaign::CampaignView view{&k.c, nullptr, "b", {}};
        const auto seeds = campaign::seeds_from_bank(b.bank, view, here);
        REQUIRE(seeds.size() == 1);
        CHECK(seeds[0].candidate == test::toy(4, 4, "none"));
    }
    SUBCASE("the same memory per GPU: the setting as verified") {
        Contract k("gpu_mem = \"80G\"");
        campaign::CampaignView view{&k.c, nullptr, "b", {}};
        const auto seeds = campaign::seeds_from_bank(b.bank, view, here);
        REQUIRE(seeds.size() == 1);
        CHECK(seeds[0].candidate == test::toy(8, 2, "none"));
        CHECK(seeds[0].provenance["capacity"].is_null());
    }
}

TEST_CASE("a per-GPU finding cannot be carried where this side's GPU memory is not known") {
    // Both keys without GPU memory (no calibration), so the prior is there; the finding was verified under a
    // per-GPU limit of 80G.
    const auto here = from_xml("gpu-2s32c-pcie4.xml", 0);
    Bank b;
    b.add(from_xml("gpu-2s32c-pcie4.xml", 0), test::toy(8, 2, "none"), 80 * GiB);
    Contract unknown("");
    campaign::CampaignView view{&unknown.c, nullptr, "b", {}};
    CHECK(campaign::seeds_from_bank(b.bank, view, here).empty());
    // The same finding where this contract gives its GPU memory: carried, scaled.
    Contract known("gpu_mem = \"40G\"");
    campaign::CampaignView known_view{&known.c, nullptr, "b", {}};
    const auto scaled = campaign::seeds_from_bank(b.bank, known_view, here);
    REQUIRE(scaled.size() == 1);
    CHECK(scaled[0].candidate == test::toy(4, 4, "none"));
    // A finding without a per-GPU limit, on a contract without one: the node rule, carried as it is.
    Bank node_only;
    node_only.add(from_xml("gpu-2s32c-pcie4.xml", 0), test::toy(8, 2, "none"), 0);
    const auto seeds = campaign::seeds_from_bank(node_only.bank, view, here);
    REQUIRE(seeds.size() == 1);
    CHECK(seeds[0].candidate == test::toy(8, 2, "none"));
}
