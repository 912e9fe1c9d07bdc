// Transfer across hardware: the synthetic machines of tests/fixtures/hwloc/gpu-*.xml (A, its near twin A',
// and a different B) and the allocation records that hand them to campaigns (tests/fixtures/bank, used by
// tests/integration/46-bank-transfer.sh). The capacity rule that carries micro-batch and recompute as
// settings relative to memory is tested in space_capacity_test.cpp.
#include "bank/experience_bank.hpp"
#include "space/space.hpp"

#include "test_support.hpp"
#include <cmath>

#include <doctest/doctest.h>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unistd.h>

using namespace infrarsi;
using test::toy;
using namespace infrarsi::bank;
using namespace infrarsi::node;
namespace fs = std::filesystem;

namespace {

const fs::path fixtures = INFRARSI_FIXTURES;

SoftwareStack stack() {
    return {"g++ 12.2.0", "Open MPI 4.1.4", "", "toyload@abc"};
}

HardwareKey from_xml(const std::string& name) {
    return {topology_from_xml((fixtures / "hwloc" / name).string()), 0, stack()};
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
    // Twice the cores and twice the PCIe bandwidth: two doublings; and another GPU model (A100 against H100,
    // by PCI id): 2 more, exp(-2) ~ 0.14.
    CHECK(similarity(a, b) < kSeenHardwareSimilarity);
    CHECK(similarity(a, b) == doctest::Approx(std::exp(-2.0)).epsilon(0.1));

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
    // the plugin writes it), written by node::append_record.
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
