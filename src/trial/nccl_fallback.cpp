#include "trial/nccl_fallback.hpp"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>

namespace infrarsi::trial {
namespace {

std::string joined(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v)
        s += (s.empty() ? "" : ", ") + x;
    return s;
}

// What NCCL's environment says forced the choice, for the message.
std::string forced_by(const NcclLog& log, std::initializer_list<const char*> names) {
    std::string s;
    for (const char* n : names)
        if (auto it = log.environment.find(n); it != log.environment.end())
            s += fmt::format("{}{}={}", s.empty() ? "" : ", ", n, it->second);
    return s.empty() ? "" : " (set in the job's environment: " + s + ")";
}

} // namespace

NcclHardware nccl_hardware(const std::vector<node::TopologyFeatures>& nodes, int nodes_per_run) {
    NcclHardware h;
    h.nodes = nodes_per_run;
    for (const auto& t : nodes)
        for (const auto& nic : t.nics)
            if (nic.kind == "openfabrics" &&
                std::find(h.rdma_nics.begin(), h.rdma_nics.end(), nic.name) == h.rdma_nics.end())
                h.rdma_nics.push_back(nic.name);
    return h;
}

std::vector<NcclFallback> nccl_fallbacks(const NcclLog& log, const NcclHardware& hw) {
    std::vector<NcclFallback> out;
    if (log.empty()) return out;
    const bool crosses_nodes = log.net_channels() > 0 || hw.nodes > 1;
    // Sockets where the nodes have RDMA NICs: the channel lines say so; without them (NCCL_DEBUG_SUBSYS
    // leaving INIT's channel lines out), the network NCCL chose in a job over several nodes.
    if (!hw.rdma_nics.empty()) {
        NcclLine shown = log.first_socket_channel;
        if (shown.line_no == 0 && log.net_channels() == 0 && hw.nodes > 1 && log.networks.count("Socket") &&
            log.networks.size() == 1)
            shown = log.socket_choice;
        if (shown.line_no != 0)
            out.push_back({NcclFallbackKind::SocketsOverRdma, shown,
                           fmt::format("the nodes have InfiniBand/RoCE NICs ({}){}{}", joined(hw.rdma_nics),
                                       log.ib_absent ? "; NCCL found no usable IB device" : "",
                                       forced_by(log, {"NCCL_NET", "NCCL_IB_DISABLE", "NCCL_IB_HCA"}))});
    }
    // A net plugin that is there and failed, unless another one loaded.
    if (!log.plugin_failures.empty() && !log.plugin_loaded && crosses_nodes) {
        std::string nets;
        for (const auto& n : log.networks)
            nets += (nets.empty() ? "" : ", ") + n;
        out.push_back({NcclFallbackKind::NetPluginFailed, log.plugin_failures.front(),
                       fmt::format("NCCL went on with {}{}", nets.empty() ? "its internal transports" : nets,
                                   forced_by(log, {"NCCL_NET_PLUGIN"}))});
    }
    if (hw.nvlink.value_or(false) && log.first_shm_channel.line_no != 0)
        out.push_back(
            {NcclFallbackKind::P2PDisabled, log.first_shm_channel,
             fmt::format("the GPUs are joined by NVLink; {} channel connections through host shared "
                         "memory{}",
                         log.channels.at("SHM"), forced_by(log, {"NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL"}))});
    return out;
}

std::string NcclFallback::message() const {
    const std::string where =
        evidence.line_no ? fmt::format(" (output line {}: {})", evidence.line_no, evidence.text) : "";
    switch (kind) {
    case NcclFallbackKind::SocketsOverRdma:
        return fmt::format("NCCL sends between nodes over TCP sockets{}; {}. Make the RDMA NICs usable by "
                           "NCCL (libibverbs and the HCA driver in the job's environment, no NCCL_NET=Socket "
                           "or NCCL_IB_DISABLE=1, NCCL_IB_HCA naming existing devices), or the campaign "
                           "tunes a baseline that runs on the fallback",
                           where, detail);
    case NcclFallbackKind::NetPluginFailed:
        return fmt::format("NCCL's external network plugin did not load{}; {}. Fix the plugin's install "
                           "(its libraries on LD_LIBRARY_PATH, a plugin built for this NCCL version) or "
                           "leave NCCL_NET_PLUGIN unset where it is not wanted",
                           where, detail);
    case NcclFallbackKind::P2PDisabled:
        return fmt::format("NCCL connects GPUs within a node through host memory instead of NVLink{}; {}. "
                           "Unset NCCL_P2P_DISABLE / NCCL_P2P_LEVEL, and check that the job sees all its "
                           "GPUs in one container/cgroup",
                           where, detail);
    }
    return detail;
}

nlohmann::json to_json(const NcclFallback& f) {
    return {{"kind", std::string(nccl_fallback_names.name(f.kind))},
            {"line", f.evidence.line_no},
            {"text", f.evidence.text},
            {"detail", f.detail}};
}

} // namespace infrarsi::trial
