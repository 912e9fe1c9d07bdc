#pragma once
// A GPU's dense peak FLOP/s for a dtype: the one denominator of MFU on that hardware. From the vendor's
// datasheet for the GPUs people train on (dense figures, not the "with sparsity" ones), else the measured
// bf16 GEMM probe of the node's calibration; the source goes with the figure into the report.
#include "node/gpu.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace infrarsi::node {

struct GpuPeak {
    double tflops = 0;
    std::string source; // "datasheet: NVIDIA H200 bf16 dense" or "measured: bf16 GEMM probe median"
};

// dtype: "bf16"/"bfloat16", "fp16"/"float16", "tf32", "fp32"/"float32", "fp8". nullopt for a GPU or dtype
// the table does not hold (a V100 has no bf16 tensor cores).
std::optional<GpuPeak> gpu_peak_from_datasheet(std::string_view model, std::string_view dtype);

// The datasheet's figure when it has one, else (for bf16) the GEMM probe's median; nullopt when neither.
std::optional<GpuPeak> gpu_peak(const GpuDevice& gpu, std::string_view dtype);

} // namespace infrarsi::node
