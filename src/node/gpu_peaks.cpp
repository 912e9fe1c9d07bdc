#include "node/gpu_peaks.hpp"

#include <array>
#include <cctype>
#include <fmt/format.h>

namespace infrarsi::node {
namespace {

enum Dtype { kBf16, kFp16, kTf32, kFp32, kFp8, kDtypes };

// Dense tensor-core (fp32: CUDA-core) TFLOP/s from NVIDIA's datasheets; 0 where the GPU has no such unit.
// First match wins, so a name that contains another ("GH200" holds "H200", "L40S" holds "L4") comes first.
struct Row {
    std::string_view name;
    std::array<double, kDtypes> tflops; // bf16, fp16, tf32, fp32, fp8
};
constexpr Row kTable[] = {
    {"GH200", {989.4, 989.4, 494.7, 66.9, 1978.9}},
    {"H200 NVL", {835.5, 835.5, 417.5, 60.0, 1670.5}},
    {"H200", {989.4, 989.4, 494.7, 66.9, 1978.9}},
    {"H100 NVL", {835.5, 835.5, 417.5, 59.8, 1670.5}},
    {"H100 PCIe", {756.5, 756.5, 378.0, 51.2, 1513.0}},
    {"H100", {989.4, 989.4, 494.7, 66.9, 1978.9}},
    {"B200", {2250.0, 2250.0, 1100.0, 75.0, 4500.0}},
    {"A100", {312.0, 312.0, 156.0, 19.5, 0}},
    {"A30", {165.0, 165.0, 82.0, 10.3, 0}},
    {"A10", {125.0, 125.0, 62.5, 31.2, 0}},
    {"L40S", {362.05, 362.05, 183.0, 91.6, 733.0}},
    {"L40", {181.0, 181.0, 90.5, 90.5, 362.0}},
    {"L4", {121.0, 121.0, 60.0, 30.3, 242.5}},
    {"V100", {0, 125.0, 0, 15.7, 0}},
    {"T4", {0, 65.0, 0, 8.1, 0}},
};

std::optional<Dtype> dtype_of(std::string_view d) {
    if (d == "bf16" || d == "bfloat16") return kBf16;
    if (d == "fp16" || d == "float16" || d == "half") return kFp16;
    if (d == "tf32") return kTf32;
    if (d == "fp32" || d == "float32" || d == "float") return kFp32;
    if (d == "fp8") return kFp8;
    return std::nullopt;
}

// A whole word of the model name: "NVIDIA A100-SXM4-80GB" holds "A100", "NVIDIA A10" holds "A10", and
// "NVIDIA A100" does not hold "A10".
bool holds_word(std::string_view model, std::string_view name) {
    for (size_t at = model.find(name); at != std::string_view::npos; at = model.find(name, at + 1)) {
        const bool left = at == 0 || !std::isalnum(static_cast<unsigned char>(model[at - 1]));
        const size_t end = at + name.size();
        const bool right = end == model.size() || !std::isalnum(static_cast<unsigned char>(model[end]));
        if (left && right) return true;
    }
    return false;
}

} // namespace

std::optional<GpuPeak> gpu_peak_from_datasheet(std::string_view model, std::string_view dtype) {
    const auto d = dtype_of(dtype);
    if (!d) return std::nullopt;
    for (const auto& row : kTable)
        if (holds_word(model, row.name)) {
            const double t = row.tflops[*d];
            if (t <= 0) return std::nullopt;
            return GpuPeak{t, fmt::format("datasheet: {} {} dense", row.name, dtype)};
        }
    return std::nullopt;
}

std::optional<GpuPeak> gpu_peak(const GpuDevice& gpu, std::string_view dtype) {
    if (auto p = gpu_peak_from_datasheet(gpu.model, dtype)) return p;
    const auto d = dtype_of(dtype);
    if (d == kBf16 && gpu.gemm_tflops.median > 0)
        return GpuPeak{gpu.gemm_tflops.median, "measured: bf16 GEMM probe median"};
    return std::nullopt;
}

} // namespace infrarsi::node
