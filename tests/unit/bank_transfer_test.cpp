// Transfer across hardware: the synthetic machines of tests/fixtures/hwloc/gpu-*.xml (A, its near twin A',
// and a different B), the allocation records that hand them to campaigns (tests/fixtures/bank, used by
// tests/integration/46-bank-transfer.sh), and the capacity rule that carries micro-batch and recompute as
// settings relative to memory.
#include "bank/experience_bank.hpp"
#include "campaign/experience.hpp"
#include "contract/contract.hpp"
#include "util/error.hpp"

#include <algorithm>
#include <cmath>
#include <doctest/doctest.h>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unistd.h>

using namespace infrarsi;
using namespace infrarsi::bank;
namespace fs = std::filesystem;

namespace {

const fs::path fixtures = INFRARSI_FIXTURES;

SoftwareStack stack() {
    return {"g++ 12.2.0", "Open MPI 4.1.4", "", "toyload@abc"};
}

HardwareKey from_xml(const std::string& name) {
    return {topology_from_xml((fixtures / "hwloc" / name).string()), 0, stack()};
}

space::Space toyload_space() {
    return contract::load(fixtures / "toyload.contract.toml").space;
}

space::Candidate toy(long long micro_batch, long long grad_accum, const std::string& recompute) {
    space::Candidate c;
    c.knobs = {{"micro_batch", micro_batch}, {"grad_accum", grad_accum}, {"recompute", recompute}};
    return c;
}

} // namespace

TEST_CASE("a near twin is seen hardware, a newer and larger GPU node is unseen but close enough to seed") {
    auto a = from_xml("gpu-2s32c-pcie4.xml"), twin = from_xml("gpu-2s32c-pcie4-twin.xml"),
         b = from_xml("gpu-2s64c-pcie5.xml");
    CHECK(a.topology.cores == 32);
    CHECK(a.topology.gpus.size() == 1); // the BMC display is no GPU
    CHECK(b.topology.cores == 64);
    CHECK(twin.topology.memory_bytes < a.topology.memory_bytes);
    CHECK(twin.topology.memory_bytes > 0.95 * a.topology.memory_bytes);
    CHECK(fingerprint(a) != fingerprint(twin));

    CHECK(similarity(a, twin) > 0.95);
    CHECK(similarity(a, twin) > similarity(a, b));
    // Twice the cores and twice the PCIe bandwidth: two doublings, exp(-1) ~ 0.37.
    CHECK(similarity(a, b) < kSeenHardwareSimilarity);
    CHECK(similarity(a, b) == doctest::Approx(std::exp(-1.0)).epsilon(0.1));

    // As priors: A's verified finding is a result on the twin, a hypothesis on B, and still counts there.
    auto dir = fs::temp_directory_path() / ("infrarsi-bank-transfer-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    {
        ExperienceBank bank((dir / "bank.sqlite").string(), "cluster-a");
        Finding f;
        f.kind = "knob_setting";
        f.workload = "toyload";
        f.verified = true;
        f.content = {{"candidate", toy(8, 2, "none").to_json()}, {"speedup", 2.0}, {"memory_ratio", 0.7}};
        f.campaign = "a";
        REQUIRE(bank.add_finding(a, f));
        const double now = bank.findings()[0].created;
        auto on_twin = bank.priors(twin, "toyload", now);
        REQUIRE(on_twin.size() == 1);
        CHECK_FALSE(on_twin[0].hypothesis);
        auto on_b = bank.priors(b, "toyload", now);
        REQUIRE(on_b.size() == 1);
        CHECK(on_b[0].hypothesis);
        CHECK(on_b[0].weight < on_twin[0].weight);
    }
    fs::remove_all(dir);
}

TEST_CASE("the allocation-record fixtures are the plugin's records of the XML machines") {
    // Regenerate a record after changing its XML: AllocationRecord with this topology (source "live", as
    // the plugin writes it), written by bank::append_record.
    for (const std::string name : {"gpu-2s32c-pcie4", "gpu-2s32c-pcie4-twin", "gpu-2s64c-pcie5"}) {
        CAPTURE(name);
        auto read = read_records((fixtures / "bank" / ("allocations-" + name + ".jsonl")).string());
        CHECK(read.errors.empty());
        REQUIRE(read.records.size() == 1);
        auto want = topology_from_xml((fixtures / "hwloc" / (name + ".xml")).string());
        want.source = "live";
        CHECK(read.records[0].topology == want);
        if (read.records[0].topology != want) MESSAGE("expected topology: " << to_json(want).dump());
    }
}

TEST_CASE("capacity rule: micro-batch scales with the memory limit, the global batch stays fixed") {
    using campaign::scale_capacity;
    auto space = toyload_space();

    auto same = scale_capacity(space, toy(8, 2, "none"), 1.0);
    REQUIRE(same);
    CHECK(same->candidate == toy(8, 2, "none"));
    CHECK(same->change.empty());

    // 160M instead of 300M: 8 x 0.53 = 4.3, rounded down to the power of two 4; accumulation follows.
    auto less = scale_capacity(space, toy(8, 2, "none"), 160.0 / 300.0);
    REQUIRE(less);
    CHECK(less->candidate == toy(4, 4, "none"));
    CHECK(less->change == "grad_accum 2 -> 4, micro_batch 8 -> 4");

    // Twice the memory: twice the micro-batch, clamped to the space.
    CHECK(scale_capacity(space, toy(4, 4, "selective"), 2.0)->candidate == toy(8, 2, "selective"));
    CHECK(scale_capacity(space, toy(16, 1, "full"), 4.0)->candidate == toy(16, 1, "full"));

    // Less memory than even the smallest micro-batch allows: one step more recompute.
    auto tiny = scale_capacity(space, toy(2, 8, "none"), 0.25);
    REQUIRE(tiny);
    CHECK(tiny->candidate == toy(1, 16, "selective"));
    CHECK(scale_capacity(space, toy(1, 16, "full"), 0.1)->candidate == toy(1, 16, "full"));

    CHECK_THROWS_AS(scale_capacity(space, toy(8, 2, "none"), 0.0), Error);
}

TEST_CASE("capacity rule: layout knobs and patches are kept, a space it cannot satisfy refuses") {
    using campaign::scale_capacity;
    space::Space s = toyload_space();
    // Without a gradient-accumulation knob the fixed global batch cannot follow the micro-batch.
    space::Space fixed = s;
    fixed.knobs.erase(std::remove_if(fixed.knobs.begin(), fixed.knobs.end(),
                                     [](const space::Knob& k) { return k.name == "grad_accum"; }),
                      fixed.knobs.end());
    fixed.constraints = {{space::Constraint::Kind::ProductEquals, {"micro_batch"}, "", 8, "micro_batch = 8"}};
    space::Candidate c;
    c.knobs = {{"micro_batch", 8LL}, {"recompute", std::string("none")}};
    CHECK_FALSE(scale_capacity(fixed, c, 0.5));

    // A layout knob and the patches never move.
    space::Knob tp;
    tp.name = "tensor_parallel";
    tp.kind = space::KnobKind::Pow2;
    tp.min = 1;
    tp.max = 8;
    tp.env = "TP";
    tp.baseline = 1LL;
    s.knobs.push_back(tp);
    s.patches = {"fast_kernel"};
    auto with = toy(8, 2, "none");
    with.knobs["tensor_parallel"] = 4LL;
    with.patches = {"fast_kernel"};
    auto r = scale_capacity(s, with, 0.5);
    REQUIRE(r);
    CHECK(std::get<long long>(r->candidate.knobs.at("tensor_parallel")) == 4);
    CHECK(std::get<long long>(r->candidate.knobs.at("micro_batch")) == 4);
    CHECK(r->candidate.patches == std::vector<std::string>{"fast_kernel"});
}
