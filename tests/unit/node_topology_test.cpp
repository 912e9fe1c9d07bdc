// Topology features from synthetic descriptions and committed XML (tests/fixtures/hwloc), so the features
// the experience bank keys on are pinned without the hardware.
#include "node/topology.hpp"
#include "util/error.hpp"

#include <cmath>
#include <doctest/doctest.h>
#include <map>
#include <nlohmann/json.hpp>

using namespace infrarsi;
using namespace infrarsi::node;

namespace {
std::string hwloc_fixture(const std::string& name) {
    return std::string(INFRARSI_FIXTURES) + "/hwloc/" + name;
}
} // namespace

TEST_CASE("a synthetic two-socket topology yields its packages, cores, PUs and the sizes it declares") {
    auto t = topology_from_synthetic(
        "pack:2 numa:1 l3:1(size=32MiB) l2:8(size=1MiB) l1d:1(size=48KiB) core:1 pu:2");
    CHECK(t.packages == 2);
    CHECK(t.numa_nodes == 2);
    CHECK(t.cores == 16);
    CHECK(t.pus == 32);
    CHECK(t.l3_count == 2);
    CHECK(t.l3_bytes == 32ull << 20);
    CHECK(t.l2_bytes == 1ull << 20);
    CHECK(t.l1d_bytes == 48ull << 10);
    CHECK(t.memory_bytes > 0); // hwloc gives synthetic NUMA nodes a default size
    CHECK(t.gpus.empty());
    CHECK(t.nics.empty());
    CHECK(t.source.rfind("synthetic:", 0) == 0);
}

TEST_CASE("the issue's synthetic example counts 2 packages, 16 cores, 32 PUs") {
    auto t = topology_from_synthetic("pack:2 numa:1 l3:1 core:8 pu:2");
    CHECK(t.packages == 2);
    CHECK(t.cores == 16);
    CHECK(t.pus == 32);
    CHECK(t.numa_nodes == 2);
    CHECK(t.l3_count == 2);
    CHECK(t.l2_bytes == 0); // no L2 level in the description
}

TEST_CASE("a synthetic description hwloc refuses is an error that says what was expected") {
    CHECK_THROWS_WITH_AS(topology_from_synthetic("pack:two"), doctest::Contains("expected"), Error);
}

TEST_CASE("an XML topology of a VM yields its cores, caches, memory and its Ethernet NIC") {
    auto t = topology_from_xml(hwloc_fixture("kvm-2core-eth.xml"));
    CHECK(t.packages == 1);
    CHECK(t.cores == 2);
    CHECK(t.pus == 2);
    CHECK(t.l1d_bytes == 48ull << 10);
    CHECK(t.l2_bytes == 1ull << 20);
    CHECK(t.l3_bytes > 0);
    CHECK(t.memory_bytes > 1ull << 30);
    CHECK(t.gpus.empty());
    REQUIRE(t.nics.size() == 1);
    CHECK(t.nics[0].name == "eth0");
    CHECK(t.nics[0].kind == "network");
    CHECK(t.nics[0].pci_busid == "0000:00:03.0");
    CHECK(t.nics[0].pci_vendor == 0x1af4);
}

TEST_CASE("a GPU with CUDA and NVML names counts once, with its PCI link, a BMC display is no GPU, an HCA is "
          "a NIC") {
    auto t = topology_from_xml(hwloc_fixture("kvm-2core-gpu-ib.xml"));
    REQUIRE(t.gpus.size() == 1);
    CHECK(t.gpus[0].pci_busid == "0000:00:06.0");
    CHECK(t.gpus[0].pci_vendor == 0x10de);
    CHECK(t.gpus[0].pci_device == 0x2335);
    CHECK(t.gpus[0].pci_link_gbps == doctest::Approx(31.5).epsilon(0.01));
    REQUIRE(t.nics.size() == 3);
    int fabrics = 0;
    for (const auto& n : t.nics)
        fabrics += n.kind == "openfabrics";
    CHECK(fabrics == 1);
    // The link enters similarity as log2(1 + GB/s), like every other size: PCIe Gen4 x16 is about 5.
    auto v = feature_vector(t);
    CHECK(feature_names().back() == "log2_max_pci_link_gbps");
    CHECK(v.back() == doctest::Approx(std::log2(1 + 31.5)).epsilon(0.01));
}

TEST_CASE("a missing XML file is an error naming the file") {
    CHECK_THROWS_WITH_AS(topology_from_xml("/nonexistent/topo.xml"),
                         doctest::Contains("/nonexistent/topo.xml"), Error);
}

TEST_CASE("the live machine has at least one core and its topology survives JSON") {
    auto t = topology_from_live();
    CHECK(t.cores >= 1);
    CHECK(t.pus >= t.cores);
    CHECK(topology_from_json(to_json(t)) == t);
}

TEST_CASE("topology JSON round-trips devices and rejects a missing or mistyped field") {
    auto t = topology_from_xml(hwloc_fixture("kvm-2core-gpu-ib.xml"));
    auto j = to_json(t);
    CHECK(topology_from_json(j) == t);
    auto missing = j;
    missing.erase("cores");
    CHECK_THROWS_WITH_AS(topology_from_json(missing), doctest::Contains("cores"), Error);
    auto mistyped = j;
    mistyped["l3_bytes"] = "big";
    CHECK_THROWS_WITH_AS(topology_from_json(mistyped), doctest::Contains("l3_bytes"), Error);
    auto nonsense = j;
    nonsense["pus"] = 1;
    nonsense["cores"] = 4;
    CHECK_THROWS_AS(topology_from_json(nonsense), Error);
}

TEST_CASE("the feature vector separates node size from node shape") {
    auto small = topology_from_synthetic("pack:1 numa:1 l3:1(size=32MB) core:16 pu:2");
    auto big = topology_from_synthetic("pack:2 numa:1 l3:1(size=32MB) core:16 pu:2");
    auto vs = feature_vector(small), vb = feature_vector(big);
    REQUIRE(vs.size() == feature_names().size());
    CHECK(vb[0] > vs[0]);                   // more cores
    CHECK(vb[1] == doctest::Approx(vs[1])); // same PUs per core
    CHECK(vb[4] == doctest::Approx(vs[4])); // same L3 per core
}

TEST_CASE("a bounded live load gives the same topology, and one past its budget is an error, not a stall") {
    auto bounded = topology_from_live(std::chrono::seconds(60));
    CHECK(bounded == topology_from_live());
    CHECK_THROWS_WITH_AS(topology_from_live(std::chrono::milliseconds(0)), doctest::Contains("within 0 ms"),
                         Error);
}

TEST_CASE(
    "each GPU-NIC path is classed as NVML classes GPU pairs: one switch, several, host bridge, NUMA node, "
    "system") {
    auto t = topology_from_xml(hwloc_fixture("gpu-nic-paths.xml"));
    REQUIRE(t.gpus.size() == 1);
    REQUIRE(t.nics.size() == 4);
    std::map<std::string, std::string> kind;
    for (const auto& l : t.gpu_nic_links) {
        CHECK(l.gpu == "0000:03:00.0");
        kind[l.nic] = l.kind;
    }
    CHECK(kind == std::map<std::string, std::string>{{"mlx5_0", "pcie-switch"},
                                                     {"mlx5_3", "pcie-switches"},
                                                     {"mlx5_1", "numa-node"},
                                                     {"mlx5_2", "system"}});
    // A VM's devices all hang off its one host bridge.
    for (const auto& l : topology_from_xml(hwloc_fixture("kvm-2core-gpu-ib.xml")).gpu_nic_links)
        CHECK(l.kind == "host-bridge");
    // Without GPUs there are none, and the JSON has no such field (a CPU node's record is as it was).
    auto cpu = topology_from_xml(hwloc_fixture("kvm-2core-eth.xml"));
    CHECK(cpu.gpu_nic_links.empty());
    CHECK_FALSE(to_json(cpu).contains("gpu_nic_links"));
    // They survive JSON; an unknown kind is refused.
    auto j = to_json(t);
    CHECK(topology_from_json(j) == t);
    j["gpu_nic_links"][0]["kind"] = "warp-drive";
    CHECK_THROWS_WITH_AS(topology_from_json(j), doctest::Contains("warp-drive"), Error);
    j["gpu_nic_links"][0].erase("kind");
    CHECK_THROWS_WITH_AS(topology_from_json(j), doctest::Contains("kind"), Error);
    j["gpu_nic_links"] = "mlx5_0";
    CHECK_THROWS_WITH_AS(topology_from_json(j), doctest::Contains("gpu_nic_links"), Error);
}
