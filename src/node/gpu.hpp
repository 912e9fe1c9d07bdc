#pragma once
// A node's GPUs as the plugin records them: per GPU its model, memory, multiprocessors and clocks (NVML and
// the CUDA runtime), a short bf16 GEMM probe (cuBLAS) and a device-memory bandwidth probe, the links between
// GPUs (NVLink or the PCIe level NVML names), and the GPUs more than 1.5x slower than the node's median.
// The libraries are loaded at run time (gpu_libraries.hpp); without them the record says "no GPU" and why.
#include "node/calibration.hpp"

#include <chrono>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::node {

// Why a node has no GPU figures: none found, the libraries are not there, or a call failed.
enum class GpuProbeStatus { ok, no_gpu, no_library, failed, timed_out };
std::string to_string(GpuProbeStatus s);
std::optional<GpuProbeStatus> gpu_probe_status_from_string(const std::string& s);

struct GpuDevice {
    int index = 0;          // the CUDA runtime's device number in the probe's environment
    std::string model;      // NVML's name, "NVIDIA H200"; empty without NVML
    std::string uuid;       // "GPU-..."; empty without NVML
    std::string pci_busid;  // "0000:19:00.0"
    uint64_t memory_bytes = 0;
    int compute_capability = 0; // major * 10 + minor: 90 for Hopper
    int multiprocessors = 0;
    int sm_clock_max_mhz = 0;     // NVML; 0 without it
    int memory_clock_max_mhz = 0; // NVML; 0 without it
    int memory_bus_width_bits = 0;
    int nvlinks_active = 0;
    ProbeStats gemm_tflops; // bf16 inputs, fp32 accumulation, NxNxN, random data: 2 N^3 / time
    ProbeStats memory_gbs;  // device-to-device copy, bytes read plus bytes written / time
    bool operator==(const GpuDevice&) const = default;
};

// Between two GPUs of the node: "nvlink", or the closest common PCIe ancestor as NVML names it
// ("pcie-switch", "pcie-switches", "host-bridge", "numa-node", "system", "same-board").
struct GpuLink {
    int a = 0, b = 0;
    std::string kind;
    bool operator==(const GpuLink&) const = default;
};

struct GpuCalibration {
    GpuProbeStatus status = GpuProbeStatus::no_gpu;
    std::string detail;     // why not ok, for people: the missing library, the call that failed
    std::string driver;     // NVML's driver version, "580.159.03"
    int cuda_driver = 0;    // cudaDriverGetVersion: 13000 for 13.0
    int cuda_runtime = 0;   // cudaRuntimeGetVersion of the runtime loaded
    std::vector<GpuDevice> gpus;
    std::vector<GpuLink> links;
    std::vector<int> slow;  // indices of GPUs more than kSlowFactor slower than the node's median, GEMM or copy
    double elapsed_ms = 0;
    double budget_ms = 0;
    bool operator==(const GpuCalibration&) const = default;
};

inline constexpr double kSlowFactor = 1.5;

struct GpuProbeOptions {
    std::chrono::milliseconds budget{5000}; // the whole probe, CUDA's start-up included
    unsigned repeats = 5;
    int gemm_n = 8192;                      // shrunk to fit a quarter of the free memory
    size_t copy_bytes = size_t(1) << 30;    // likewise
    std::vector<std::string> library_dirs;  // searched before the loader's path
    bool loader_path = true;                // false: only library_dirs (a test of a node without CUDA)
};

// Probes in this process (the orchestrator's `infrarsi node --gpu`, the probe's own child). Never throws:
// what failed is in status and detail.
GpuCalibration probe_gpus(const GpuProbeOptions& options);

// The same in a forked child killed at the budget (plus a second for its start-up): what the plugin calls
// in slurmstepd, where a hung driver must not hold a job and a crash in a vendor library must not kill it.
GpuCalibration probe_gpus_bounded(const GpuProbeOptions& options);

// Indices whose value is more than `factor` below the median of `values` (higher is faster); empty for
// fewer than two values. Used for the GPUs of a node and for the nodes of an allocation.
std::vector<int> slower_than_median(const std::vector<double>& values, double factor = kSlowFactor);

// Whether a node looks like it has NVIDIA GPUs (a /dev/nvidia0 device or an NVIDIA GPU in the topology):
// the plugin's "gpu=auto" probes only then.
bool has_nvidia_device_files();

nlohmann::json to_json(const GpuCalibration& g);
// Validates as it reads; throws infrarsi::Error naming the field.
GpuCalibration gpu_calibration_from_json(const nlohmann::json& j);

} // namespace infrarsi::node
