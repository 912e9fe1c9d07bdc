#include "node/gpu.hpp"

#include "node/cuda_call.hpp"
#include "node/gpu_libraries.hpp"
#include "util/enum_names.hpp"
#include "util/error.hpp"
#include "util/json_field.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unistd.h>

namespace infrarsi::node {
namespace {

using Clock = std::chrono::steady_clock;
namespace abi = cuda_abi;

constexpr util::EnumNames<GpuProbeStatus, 5> kStatusNames{{{{GpuProbeStatus::ok, "ok"},
                                                              {GpuProbeStatus::no_gpu, "no_gpu"},
                                                              {GpuProbeStatus::no_library, "no_library"},
                                                              {GpuProbeStatus::failed, "failed"},
                                                              {GpuProbeStatus::timed_out, "timed_out"}}}};


class EventPair {
  public:
    explicit EventPair(const Cuda& cuda) : cuda_(cuda) {
        cuda.check(cuda.rt().event_create(&start_), "cudaEventCreate");
        cuda.check(cuda.rt().event_create(&stop_), "cudaEventCreate");
    }
    EventPair(const EventPair&) = delete;
    EventPair& operator=(const EventPair&) = delete;
    ~EventPair() {
        if (start_) cuda_.rt().event_destroy(start_);
        if (stop_) cuda_.rt().event_destroy(stop_);
    }
    // Milliseconds `work` took on the device (default stream).
    template <class F> double time(F&& work) {
        cuda_.check(cuda_.rt().event_record(start_, nullptr), "cudaEventRecord");
        work();
        cuda_.check(cuda_.rt().event_record(stop_, nullptr), "cudaEventRecord");
        cuda_.check(cuda_.rt().event_synchronize(stop_), "cudaEventSynchronize");
        float ms = 0;
        cuda_.check(cuda_.rt().event_elapsed_time(&ms, start_, stop_), "cudaEventElapsedTime");
        return static_cast<double>(ms);
    }

  private:
    const Cuda& cuda_;
    abi::Event start_ = nullptr, stop_ = nullptr;
};

// `repeats` samples of `per_sample_ms` each: one untimed warm-up call, one timed call to size a sample,
// then samples of k calls. `rate(k, ms)` turns k calls in ms into the figure.
template <class Call, class Rate>
std::vector<double> sample(const Cuda& cuda, Call&& call, Rate&& rate, unsigned repeats, double per_sample_ms) {
    EventPair ev(cuda);
    call();
    const double one = std::max(ev.time(call), 1e-3);
    const int k = static_cast<int>(std::clamp(per_sample_ms / one, 1.0, 200.0));
    std::vector<double> out;
    for (unsigned r = 0; r < repeats; ++r) {
        const double ms = ev.time([&] {
            for (int i = 0; i < k; ++i)
                call();
        });
        if (ms > 0) out.push_back(rate(k, ms));
    }
    return out;
}

// Uniform in [-1, 1) as bf16 (the upper half of a float): random data, as zeros run faster than real work.
std::vector<uint16_t> random_bf16(size_t n) {
    std::vector<uint16_t> v(n);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (auto& e : v) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        const float f = static_cast<float>(static_cast<double>(x >> 11) / 9007199254740992.0 * 2.0 - 1.0);
        uint32_t bits;
        std::memcpy(&bits, &f, sizeof bits);
        e = static_cast<uint16_t>(bits >> 16);
    }
    return v;
}

ProbeStats gemm_probe(const Cuda& cuda, const Cublas& blas, int n, unsigned repeats, double per_sample_ms) {
    const size_t elems = size_t(n) * size_t(n), bytes = elems * 2;
    DeviceBuffer a(cuda, bytes), b(cuda, bytes), c(cuda, bytes);
    const auto host = random_bf16(elems);
    cuda.check(cuda.rt().memcpy(a.get(), host.data(), bytes, abi::kMemcpyHostToDevice), "cudaMemcpy");
    cuda.check(cuda.rt().memcpy(b.get(), host.data(), bytes, abi::kMemcpyHostToDevice), "cudaMemcpy");
    abi::BlasHandle h = nullptr;
    if (blas.create(&h) != 0) throw CudaFailure{"cublasCreate failed"};
    struct Destroy {
        const Cublas& blas;
        abi::BlasHandle h;
        ~Destroy() { blas.destroy(h); }
    } destroy{blas, h};
    const float alpha = 1.0f, beta = 0.0f;
    auto gemm = [&] {
        const abi::Status s = blas.gemm_ex(h, abi::kBlasOpN, abi::kBlasOpN, n, n, n, &alpha, a.get(), abi::kDataBf16,
                                           n, b.get(), abi::kDataBf16, n, &beta, c.get(), abi::kDataBf16, n,
                                           abi::kBlasCompute32F, abi::kBlasGemmDefault);
        if (s != 0) throw CudaFailure{"cublasGemmEx: status " + std::to_string(s)};
    };
    const double flops = 2.0 * double(n) * double(n) * double(n);
    return summarize(sample(
        cuda, gemm, [&](int k, double ms) { return flops * k / (ms / 1e3) / 1e12; }, repeats, per_sample_ms));
}

ProbeStats copy_probe(const Cuda& cuda, size_t bytes, unsigned repeats, double per_sample_ms) {
    DeviceBuffer src(cuda, bytes), dst(cuda, bytes);
    auto copy = [&] {
        cuda.check(cuda.rt().memcpy(dst.get(), src.get(), bytes, abi::kMemcpyDeviceToDevice), "cudaMemcpy");
    };
    return summarize(sample(
        cuda, copy, [&](int k, double ms) { return 2.0 * double(bytes) * k / (ms / 1e3) / 1e9; }, repeats,
        per_sample_ms));
}

std::string nvml_string(abi::Status s, const char* buf) {
    return s == 0 ? std::string(buf, ::strnlen(buf, 96)) : std::string();
}

void describe_from_nvml(const Nvml& nv, abi::NvmlDevice d, GpuDevice& g) {
    char buf[96] = {};
    g.model = nvml_string(nv.device_get_name(d, buf, sizeof buf), buf);
    std::memset(buf, 0, sizeof buf);
    g.uuid = nvml_string(nv.device_get_uuid(d, buf, sizeof buf), buf);
    abi::NvmlMemory mem{};
    if (nv.device_get_memory_info(d, &mem) == 0) g.memory_bytes = mem.total;
    unsigned mhz = 0;
    if (nv.device_get_max_clock_info(d, abi::kNvmlClockSm, &mhz) == 0) g.sm_clock_max_mhz = static_cast<int>(mhz);
    if (nv.device_get_max_clock_info(d, abi::kNvmlClockMem, &mhz) == 0)
        g.memory_clock_max_mhz = static_cast<int>(mhz);
    for (unsigned link = 0; link < abi::kNvmlNvlinkMaxLinks; ++link) {
        int state = 0;
        if (nv.device_get_nvlink_state(d, link, &state) != 0) break; // no such link (or no NVLink at all)
        if (state == abi::kNvmlFeatureEnabled) ++g.nvlinks_active;
    }
}

std::string topology_level_name(int level) {
    switch (level) {
        case 0: return "same-board";
        case 10: return "pcie-switch";
        case 20: return "pcie-switches";
        case 30: return "host-bridge";
        case 40: return "numa-node";
        case 50: return "system";
        default: return "unknown";
    }
}

template <class T> T field(const nlohmann::json& j, const char* name) {
    return json_field<T>(j, name, "gpu calibration");
}

} // namespace

std::string to_string(GpuProbeStatus s) { return std::string(kStatusNames.name(s)); }

std::optional<GpuProbeStatus> gpu_probe_status_from_string(const std::string& s) { return kStatusNames.parse(s); }

std::vector<int> slower_than_median(const std::vector<double>& values, double factor) {
    std::vector<int> slow;
    if (values.size() < 2) return slow;
    std::vector<double> sorted = values;
    std::sort(sorted.begin(), sorted.end());
    const size_t n = sorted.size();
    const double median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    for (size_t i = 0; i < values.size(); ++i)
        if (values[i] * factor < median) slow.push_back(static_cast<int>(i));
    return slow;
}

GpuCalibration probe_gpus(const GpuProbeOptions& options) {
    const auto t0 = Clock::now();
    GpuCalibration c;
    c.budget_ms = static_cast<double>(options.budget.count());
    auto done = [&](GpuProbeStatus s, std::string detail) {
        c.status = s;
        c.detail = std::move(detail);
        c.elapsed_ms = ms_since(t0);
        return c;
    };
    GpuLibraries libs(options.library_dirs, options.loader_path);
    if (!libs.has_runtime()) {
        std::string why;
        for (const auto& m : libs.missing())
            why += (why.empty() ? "" : "; ") + m;
        return done(GpuProbeStatus::no_library, why);
    }
    const Cuda cuda(libs.runtime());
    const auto& rt = libs.runtime();
    rt.runtime_get_version(&c.cuda_runtime);
    rt.driver_get_version(&c.cuda_driver);
    int count = 0;
    if (const abi::Status s = rt.get_device_count(&count); s != 0 || count <= 0)
        return done(GpuProbeStatus::no_gpu, s != 0 ? std::string("cudaGetDeviceCount: ") + rt.get_error_string(s)
                                                   : "the CUDA runtime sees no device");
    const bool nvml = libs.has_nvml() && libs.nvml().init() == 0;
    std::vector<abi::NvmlDevice> handles(static_cast<size_t>(count), nullptr);
    if (nvml) {
        char buf[96] = {};
        c.driver = nvml_string(libs.nvml().system_get_driver_version(buf, sizeof buf), buf);
    }
    std::string problems;
    for (const auto& m : libs.missing())
        problems += (problems.empty() ? "" : "; ") + m;
    try {
        for (int i = 0; i < count; ++i) {
            GpuDevice g;
            g.index = i;
            cuda.check(rt.set_device(i), "cudaSetDevice");
            char bus[32] = {};
            cuda.check(rt.device_get_pci_bus_id(bus, sizeof bus, i), "cudaDeviceGetPCIBusId");
            g.pci_busid = std::string(bus, ::strnlen(bus, sizeof bus));
            std::transform(g.pci_busid.begin(), g.pci_busid.end(), g.pci_busid.begin(),
                           [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
            int major = 0, minor = 0, khz = 0;
            cuda.check(rt.device_get_attribute(&g.multiprocessors, abi::kAttrMultiProcessorCount, i),
                       "cudaDeviceGetAttribute");
            rt.device_get_attribute(&major, abi::kAttrComputeCapabilityMajor, i);
            rt.device_get_attribute(&minor, abi::kAttrComputeCapabilityMinor, i);
            g.compute_capability = major * 10 + minor;
            rt.device_get_attribute(&g.memory_bus_width_bits, abi::kAttrGlobalMemoryBusWidth, i);
            if (rt.device_get_attribute(&khz, abi::kAttrMemoryClockRateKhz, i) == 0 && khz > 0)
                g.memory_clock_max_mhz = khz / 1000;
            if (nvml && libs.nvml().device_get_handle_by_pci_bus_id(bus, &handles[size_t(i)]) == 0)
                describe_from_nvml(libs.nvml(), handles[size_t(i)], g);
            size_t free = 0, total = 0;
            cuda.check(rt.mem_get_info(&free, &total), "cudaMemGetInfo");
            if (g.memory_bytes == 0) g.memory_bytes = total;

            // What is left of the budget, shared among the GPUs still to probe: GEMM 60%, copy 40%.
            const double left = std::max(0.0, c.budget_ms - ms_since(t0)) * 0.85 / (count - i);
            const double per = left / (options.repeats + 2);
            if (per < 1.0) {
                problems += std::string(problems.empty() ? "" : "; ") + "no budget left for the probes of GPU " +
                            std::to_string(i);
            } else {
                if (libs.has_cublas()) {
                    int n = options.gemm_n;
                    while (n > 1024 && 3.0 * n * n * 2 > free / 4.0)
                        n /= 2;
                    g.gemm_tflops = gemm_probe(cuda, libs.cublas(), n, options.repeats, per * 0.6);
                }
                size_t bytes = options.copy_bytes;
                while (bytes > (size_t(64) << 20) && 2.0 * double(bytes) > free / 4.0)
                    bytes /= 2;
                g.memory_gbs = copy_probe(cuda, bytes, options.repeats, per * 0.4);
            }
            c.gpus.push_back(std::move(g));
        }
    } catch (const CudaFailure& f) {
        c.detail = f.what + " (GPU " + std::to_string(c.gpus.size()) + ")";
        if (nvml) libs.nvml().shutdown();
        return done(GpuProbeStatus::failed, c.detail);
    }
    if (nvml) {
        for (int i = 0; i < count; ++i)
            for (int j = i + 1; j < count; ++j) {
                auto hi = handles[size_t(i)], hj = handles[size_t(j)];
                if (!hi || !hj) continue;
                int p2p = -1, level = -1;
                if (libs.nvml().device_get_p2p_status(hi, hj, abi::kNvmlP2pCapsNvlink, &p2p) == 0 &&
                    p2p == abi::kNvmlP2pStatusOk)
                    c.links.push_back({i, j, "nvlink"});
                else if (libs.nvml().device_get_topology_common_ancestor(hi, hj, &level) == 0)
                    c.links.push_back({i, j, topology_level_name(level)});
            }
        libs.nvml().shutdown();
    }
    std::vector<double> gemm, copy;
    for (const auto& g : c.gpus) {
        gemm.push_back(g.gemm_tflops.median);
        copy.push_back(g.memory_gbs.median);
    }
    auto slow = slower_than_median(gemm);
    for (int i : slower_than_median(copy))
        if (std::find(slow.begin(), slow.end(), i) == slow.end()) slow.push_back(i);
    std::sort(slow.begin(), slow.end());
    c.slow = slow;
    return done(GpuProbeStatus::ok, problems);
}

GpuCalibration probe_gpus_bounded(const GpuProbeOptions& options) {
    return run_bounded_probe<GpuCalibration>(
        options.budget, [&] { return probe_gpus(options); }, gpu_calibration_from_json, "GPU probe",
        "a hung driver, or GPUs still initializing");
}

bool has_nvidia_device_files() { return ::access("/dev/nvidiactl", F_OK) == 0 || ::access("/dev/nvidia0", F_OK) == 0; }

nlohmann::json to_json(const GpuCalibration& c) {
    nlohmann::json gpus = nlohmann::json::array(), links = nlohmann::json::array();
    for (const auto& g : c.gpus)
        gpus.push_back({{"index", g.index},
                        {"model", g.model},
                        {"uuid", g.uuid},
                        {"pci_busid", g.pci_busid},
                        {"memory_bytes", g.memory_bytes},
                        {"compute_capability", g.compute_capability},
                        {"multiprocessors", g.multiprocessors},
                        {"sm_clock_max_mhz", g.sm_clock_max_mhz},
                        {"memory_clock_max_mhz", g.memory_clock_max_mhz},
                        {"memory_bus_width_bits", g.memory_bus_width_bits},
                        {"nvlinks_active", g.nvlinks_active},
                        {"gemm_tflops", to_json(g.gemm_tflops)},
                        {"memory_gbs", to_json(g.memory_gbs)}});
    for (const auto& l : c.links)
        links.push_back({{"a", l.a}, {"b", l.b}, {"kind", l.kind}});
    return {{"status", to_string(c.status)}, {"detail", c.detail},      {"driver", c.driver},
            {"cuda_driver", c.cuda_driver},  {"cuda_runtime", c.cuda_runtime}, {"gpus", gpus},
            {"links", links},                {"slow", c.slow},          {"elapsed_ms", c.elapsed_ms},
            {"budget_ms", c.budget_ms}};
}

GpuCalibration gpu_calibration_from_json(const nlohmann::json& j) {
    if (!j.is_object()) throw Error("a GPU calibration must be a JSON object", "gpu calibration");
    GpuCalibration c;
    const auto status = gpu_probe_status_from_string(field<std::string>(j, "status"));
    if (!status) throw Error("field 'status' is not one of ok, no_gpu, no_library, failed, timed_out", "gpu calibration");
    c.status = *status;
    c.detail = field<std::string>(j, "detail");
    c.driver = field<std::string>(j, "driver");
    c.cuda_driver = field<int>(j, "cuda_driver");
    c.cuda_runtime = field<int>(j, "cuda_runtime");
    for (const auto& g : field<nlohmann::json>(j, "gpus")) {
        GpuDevice d;
        d.index = field<int>(g, "index");
        d.model = field<std::string>(g, "model");
        d.uuid = field<std::string>(g, "uuid");
        d.pci_busid = field<std::string>(g, "pci_busid");
        d.memory_bytes = field<uint64_t>(g, "memory_bytes");
        d.compute_capability = field<int>(g, "compute_capability");
        d.multiprocessors = field<int>(g, "multiprocessors");
        d.sm_clock_max_mhz = field<int>(g, "sm_clock_max_mhz");
        d.memory_clock_max_mhz = field<int>(g, "memory_clock_max_mhz");
        d.memory_bus_width_bits = field<int>(g, "memory_bus_width_bits");
        d.nvlinks_active = field<int>(g, "nvlinks_active");
        d.gemm_tflops = probe_stats_from_json(g, "gemm_tflops", "gpu calibration");
        d.memory_gbs = probe_stats_from_json(g, "memory_gbs", "gpu calibration");
        c.gpus.push_back(std::move(d));
    }
    const int n = static_cast<int>(c.gpus.size());
    for (const auto& l : field<nlohmann::json>(j, "links")) {
        GpuLink k{field<int>(l, "a"), field<int>(l, "b"), field<std::string>(l, "kind")};
        if (k.a < 0 || k.b < 0 || k.a >= n || k.b >= n) throw Error("a link names a GPU not in the record", "gpu calibration");
        c.links.push_back(std::move(k));
    }
    c.slow = field<std::vector<int>>(j, "slow");
    for (int i : c.slow)
        if (i < 0 || i >= n) throw Error("field 'slow' names a GPU not in the record", "gpu calibration");
    c.elapsed_ms = field<double>(j, "elapsed_ms");
    c.budget_ms = field<double>(j, "budget_ms");
    return c;
}

} // namespace infrarsi::node
