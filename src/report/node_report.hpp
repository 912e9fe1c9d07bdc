#pragma once
// This node as the plugin records it, for `infrarsi node` (text and --json): topology, CPU calibration and,
// with GPUs, each GPU's model, memory, probes, peak for MFU and its source, the links, and the slow ones.
#include "node/calibration.hpp"
#include "node/gpu.hpp"
#include "node/topology.hpp"

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace infrarsi::report {

nlohmann::json describe_node(const node::TopologyFeatures& topology, const node::Calibration& calibration,
                             const std::optional<node::GpuCalibration>& gpu);
std::string render_node(const nlohmann::json& j);

} // namespace infrarsi::report
