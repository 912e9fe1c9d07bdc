#pragma once
// This node as the plugin records it, for `infrarsi node` (text and --json): topology, CPU calibration and,
// with GPUs, each GPU's model, memory, probes, peak for MFU and its source, the links, and the slow ones;
// with
// --nccl-allreduce the GPUs' all-reduce bus bandwidth.
#include "node/calibration.hpp"
#include "node/gpu.hpp"
#include "node/nccl_allreduce.hpp"
#include "node/topology.hpp"

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace infrarsi::report {

nlohmann::json describe_node(const node::TopologyFeatures& topology, const node::Calibration& calibration,
                             const std::optional<node::GpuCalibration>& gpu,
                             const std::optional<node::NcclAllreduce>& allreduce = std::nullopt);
std::string render_node(const nlohmann::json& j);

// One NCCL all-reduce record (node::to_json) as a line for people: status, ranks, size, bus bandwidth.
std::string render_nccl_allreduce(const nlohmann::json& j);

} // namespace infrarsi::report
