#pragma once
// The doctor's NCCL transport check: a baseline whose NCCL silently fell back to a slower transport than the
// nodes have is no baseline to tune against (every candidate would be measured on the fallback, and the
// fix is a configuration change, not a knob). From the baseline's NCCL INFO output (trial/nccl_log.hpp) and
// what the nodes have (the topology records' NICs; NVLink where known), the typed fallbacks:
//   SocketsOverRdma  traffic between nodes over sockets ("via NET/Socket" channels, or "Using network Socket"
//                    in a job over several nodes that printed no channel lines) where the nodes have
//                    InfiniBand or RoCE NICs (topology NICs of kind "openfabrics").
//   NetPluginFailed  an external net plugin that is there, or was asked for (NCCL_NET_PLUGIN), and did not
//                    load or start, with no other plugin loaded, in a job whose traffic crosses nodes.
//   P2PDisabled      channels within a node through host shared memory ("via SHM") where the GPUs are joined
//                    by NVLink (only when the hardware says so: NcclHardware::nvlink).
// Each carries the NCCL line that shows it; what a person reads is made here, from the kind.
#include "node/topology.hpp"
#include "trial/nccl_log.hpp"
#include "util/enum_names.hpp"

#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <string>
#include <vector>

namespace infrarsi::trial {

enum class NcclFallbackKind { SocketsOverRdma, NetPluginFailed, P2PDisabled };
inline constexpr util::EnumNames<NcclFallbackKind, 3> nccl_fallback_names{{{
    {NcclFallbackKind::SocketsOverRdma, "sockets_over_rdma"},
    {NcclFallbackKind::NetPluginFailed, "net_plugin_failed"},
    {NcclFallbackKind::P2PDisabled, "p2p_disabled"},
}}};

// What the job's nodes have.
struct NcclHardware {
    int nodes = 1;                      // nodes of one run
    std::vector<std::string> rdma_nics; // InfiniBand/RoCE devices ("mlx5_0"), from the topology records
    std::optional<bool> nvlink;         // GPUs joined by NVLink; nullopt: not known
};
// The NICs of kind "openfabrics" on any of the nodes (distinct names); nvlink unknown.
NcclHardware nccl_hardware(const std::vector<node::TopologyFeatures>& nodes, int nodes_per_run);

struct NcclFallback {
    NcclFallbackKind kind{};
    NcclLine evidence;           // the NCCL line that shows it
    std::string detail;          // the facts it rests on ("nodes have mlx5_0, mlx5_1"), for the message
    std::string message() const; // what happened and what to do, for people
};

std::vector<NcclFallback> nccl_fallbacks(const NcclLog& log, const NcclHardware& hardware);

nlohmann::json to_json(const NcclFallback& f);

} // namespace infrarsi::trial
