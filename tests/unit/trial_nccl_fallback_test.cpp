// The NCCL INFO reader and the doctor's transport check against NCCL's own lines (tests/fixtures/nccl/*.log:
// captured from NCCL 2.18-2.27 output as posted in public issue threads, each file saying where from, and a
// few composed from NCCL's format strings where no capture was found; those say so).
#include "node/topology.hpp"
#include "test_support.hpp"
#include "trial/nccl_fallback.hpp"
#include "trial/nccl_log.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <string>

using namespace infrarsi;
using trial::NcclFallbackKind;

namespace {

trial::NcclLog nccl_fixture(const std::string& name) {
    const auto text = test::read_file(std::string(INFRARSI_FIXTURES) + "/nccl/" + name);
    REQUIRE_MESSAGE(!text.empty(), "missing fixture " << name);
    return trial::read_nccl_log(text);
}

trial::NcclHardware infiniband_nodes(int nodes = 2) {
    return {nodes, {"mlx5_0", "mlx5_1"}, std::nullopt};
}
trial::NcclHardware ethernet_nodes(int nodes = 2) {
    return {nodes, {}, std::nullopt};
}

std::vector<NcclFallbackKind> kinds(const std::vector<trial::NcclFallback>& f) {
    std::vector<NcclFallbackKind> k;
    for (const auto& x : f)
        k.push_back(x.kind);
    return k;
}

} // namespace

TEST_CASE("the NCCL reader takes the version, the network, the IB devices and the channels' transports") {
    const auto log = nccl_fixture("ib-roce-2.19.log");
    CHECK(log.version == "2.19.3");
    CHECK(log.networks == std::set<std::string>{"IB"});
    CHECK(log.ib_devices == std::vector<std::string>{"mlx5_10:1/RoCE", "mlx5_11:1/RoCE"});
    CHECK(log.channels.at("NET/IB") == 3);
    CHECK(log.channels.at("P2P") == 2);
    CHECK(log.net_channels() == 3);
    CHECK(log.plugin_failures.empty()); // no plugin installed is how NCCL is meant to run
    CHECK_FALSE(log.ib_absent);
}

TEST_CASE("NCCL lines behind a launcher's rank prefix read the same, in the 2.23+ plugin loader's format") {
    const auto log = nccl_fixture("ib-2.27.log");
    CHECK(log.networks == std::set<std::string>{"IB"});
    CHECK(log.ib_devices == std::vector<std::string>{"mlx5_0:1/IB"});
    CHECK(log.environment.at("NCCL_IB_DISABLE") == "0");
    CHECK(log.plugin_failures.empty());
    CHECK(log.channels.at("P2P") == 2);
}

TEST_CASE("a good IB or RoCE baseline passes the transport check") {
    for (const char* name : {"ib-roce-2.19.log", "ib-2.27.log"}) {
        CAPTURE(name);
        CHECK(trial::nccl_fallbacks(nccl_fixture(name), infiniband_nodes()).empty());
    }
}

TEST_CASE("sockets between nodes that have IB NICs are a fallback, on an Ethernet cluster they are right") {
    const auto log = nccl_fixture("socket-2.18.log");
    CHECK(log.version == "2.18.3");
    CHECK(log.ib_absent);
    CHECK(log.channels.at("NET/Socket") == 2);
    const auto f = trial::nccl_fallbacks(log, infiniband_nodes());
    REQUIRE(kinds(f) == std::vector{NcclFallbackKind::SocketsOverRdma});
    CHECK(f[0].evidence.line_no == 16);
    CHECK(f[0].evidence.text.find("via NET/Socket/3") != std::string::npos);
    CHECK(f[0].detail.find("mlx5_0") != std::string::npos);
    CHECK(f[0].message().find("TCP sockets") != std::string::npos);
    CHECK(trial::nccl_fallbacks(log, ethernet_nodes()).empty());
}

TEST_CASE("without channel lines, the network NCCL chose decides for a run over several nodes only") {
    const auto log = nccl_fixture("socket-2.21-no-channels.log");
    CHECK(log.version == "2.21.5");
    CHECK(log.net_channels() == 0);
    CHECK(log.plugin_failures.empty());
    const auto f = trial::nccl_fallbacks(log, infiniband_nodes(2));
    REQUIRE(kinds(f) == std::vector{NcclFallbackKind::SocketsOverRdma});
    CHECK(f[0].evidence.text.find("Using network Socket") != std::string::npos);
    // One node: NCCL names a network it never uses.
    CHECK(trial::nccl_fallbacks(log, infiniband_nodes(1)).empty());
}

TEST_CASE("a net plugin that is there and unusable is a fallback, on any network") {
    const auto log = nccl_fixture("plugin-unsupported-2.19.log");
    REQUIRE(log.plugin_failures.size() == 2);
    CHECK(log.plugin_failures[0].text.find("ncclNetPlugin_v7") != std::string::npos);
    CHECK(kinds(trial::nccl_fallbacks(log, ethernet_nodes())) ==
          std::vector{NcclFallbackKind::NetPluginFailed});
    CHECK(kinds(trial::nccl_fallbacks(log, infiniband_nodes())) ==
          std::vector{NcclFallbackKind::SocketsOverRdma, NcclFallbackKind::NetPluginFailed});
}

TEST_CASE("a plugin without CollNet symbols that loads is no failure") {
    const auto log = nccl_fixture("plugin-ofi-2.21.log");
    CHECK(log.version == "2.21.5");
    CHECK(log.plugin_loaded);
    CHECK(log.plugin_failures.empty());
    CHECK(log.networks == std::set<std::string>{"AWS Libfabric"});
    CHECK(log.channels.at("NET/AWS Libfabric") == 1);
    CHECK(trial::nccl_fallbacks(log, infiniband_nodes()).empty());
}

TEST_CASE("a plugin asked for by NCCL_NET_PLUGIN and not found failed to load") {
    const auto log = nccl_fixture("plugin-requested-missing-2.27.log");
    CHECK(log.environment.at("NCCL_NET_PLUGIN") == "ofi");
    REQUIRE(log.plugin_failures.size() == 1);
    CHECK(log.plugin_failures[0].text.find("Could not find: ofi libnccl-net-ofi.so") != std::string::npos);
    const auto f = trial::nccl_fallbacks(log, ethernet_nodes());
    REQUIRE(kinds(f) == std::vector{NcclFallbackKind::NetPluginFailed});
    CHECK(f[0].detail.find("NCCL_NET_PLUGIN=ofi") != std::string::npos);
    // The same "Could not find" without the request is how NCCL runs without a plugin.
    CHECK(nccl_fixture("ib-2.27.log").plugin_failures.empty());
}

TEST_CASE("a plugin whose own dependency is missing failed to load even where NCCL's IB took over") {
    const auto log = nccl_fixture("plugin-dependency-2.23.log");
    REQUIRE(log.plugin_failures.size() == 1);
    CHECK(log.plugin_failures[0].line_no == 4);
    CHECK(kinds(trial::nccl_fallbacks(log, infiniband_nodes())) ==
          std::vector{NcclFallbackKind::NetPluginFailed});
}

TEST_CASE("channels through host memory are a fallback only where the GPUs have NVLink") {
    const auto log = nccl_fixture("shm-p2p-disabled.log");
    CHECK(log.environment.at("NCCL_P2P_DISABLE") == "1");
    CHECK(log.channels.at("SHM") == 2);
    trial::NcclHardware hw{1, {}, true};
    const auto f = trial::nccl_fallbacks(log, hw);
    REQUIRE(kinds(f) == std::vector{NcclFallbackKind::P2PDisabled});
    CHECK(f[0].detail.find("NCCL_P2P_DISABLE=1") != std::string::npos);
    hw.nvlink = false;
    CHECK(trial::nccl_fallbacks(log, hw).empty());
    hw.nvlink = std::nullopt;
    CHECK(trial::nccl_fallbacks(log, hw).empty());
}

TEST_CASE("an output without NCCL lines has nothing to check, and garbage never throws") {
    CHECK(trial::read_nccl_log("").empty());
    CHECK(trial::nccl_fallbacks(trial::read_nccl_log("step 1 loss 3.2\n"), infiniband_nodes()).empty());
    const auto odd =
        trial::read_nccl_log("NCCL INFO \nNCCL INFO NET/IB : Using [\nNCCL INFO Channel 0 via \n"
                             "NCCL INFO NET/Plugin\nNCCL INFO Assigned NET plugin \nNCCL version ");
    CHECK(odd.info_lines == 5);
    CHECK(trial::to_json(odd).is_object());
}

TEST_CASE("the nodes' RDMA NICs come from the topology records' openfabrics devices") {
    const auto ib = node::topology_from_xml(std::string(INFRARSI_FIXTURES) + "/hwloc/kvm-2core-gpu-ib.xml");
    const auto eth = node::topology_from_xml(std::string(INFRARSI_FIXTURES) + "/hwloc/kvm-2core-eth.xml");
    const auto hw = trial::nccl_hardware({ib, eth}, 2);
    CHECK(hw.nodes == 2);
    CHECK_FALSE(hw.rdma_nics.empty());
    CHECK_FALSE(hw.nvlink.has_value());
    CHECK(trial::nccl_hardware({eth}, 2).rdma_nics.empty());
    const auto f = trial::nccl_fallbacks(nccl_fixture("socket-2.18.log"), hw);
    REQUIRE(f.size() == 1);
    CHECK(trial::to_json(f[0])["kind"] == "sockets_over_rdma");
}
