#include "node/calibration.hpp"

#include "util/error.hpp"
#include "util/json_field.hpp"

#include <algorithm>
#include <cmath>
#include <dlfcn.h>
#include <immintrin.h>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sched.h>
#include <thread>
#include <time.h>

namespace infrarsi::node {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Eight independent FMA chains keep one core's FP pipes busy without vector intrinsics; the result goes to
// a volatile sink so the compiler cannot drop the loop.
volatile double g_sink = 0;

double compute_sample(double slice_ms) {
    double a[8] = {1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7};
    const double m = 0.999999, c = 1e-7;
    constexpr int inner = 4096;
    uint64_t flops = 0;
    auto t0 = Clock::now();
    do {
        for (int i = 0; i < inner; ++i)
            for (double& x : a)
                x = x * m + c;
        flops += uint64_t(inner) * 8 * 2;
    } while (ms_since(t0) < slice_ms);
    double secs = ms_since(t0) / 1e3;
    g_sink = std::accumulate(std::begin(a), std::end(a), 0.0);
    return flops / secs / 1e9;
}

// Twelve independent accumulators of fused multiply-adds (more than the FMA latency times the FMA ports),
// each `lanes` floats wide: what one core's vector units do at most. One function per instruction set, chosen
// at run time, so the binary runs on any x86-64.
constexpr int kVectorChains = 12;

__attribute__((target("avx512f"))) double fma_avx512(double slice_ms) {
    __m512 a[kVectorChains];
    for (int k = 0; k < kVectorChains; ++k)
        a[k] = _mm512_set1_ps(1.0f + 0.01f * static_cast<float>(k));
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    uint64_t flops = 0;
    const auto t0 = Clock::now();
    do {
        for (int i = 0; i < 1024; ++i)
            for (auto& x : a)
                x = _mm512_fmadd_ps(x, m, c);
        flops += uint64_t(1024) * kVectorChains * 16 * 2;
    } while (ms_since(t0) < slice_ms);
    const double secs = ms_since(t0) / 1e3;
    float out[16];
    _mm512_storeu_ps(out, a[0]);
    g_sink = out[0];
    return flops / secs / 1e9;
}

__attribute__((target("avx2,fma"))) double fma_avx2(double slice_ms) {
    __m256 a[kVectorChains];
    for (int k = 0; k < kVectorChains; ++k)
        a[k] = _mm256_set1_ps(1.0f + 0.01f * static_cast<float>(k));
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    uint64_t flops = 0;
    const auto t0 = Clock::now();
    do {
        for (int i = 0; i < 1024; ++i)
            for (auto& x : a)
                x = _mm256_fmadd_ps(x, m, c);
        flops += uint64_t(1024) * kVectorChains * 8 * 2;
    } while (ms_since(t0) < slice_ms);
    const double secs = ms_since(t0) / 1e3;
    float out[8];
    _mm256_storeu_ps(out, a[0]);
    g_sink = out[0];
    return flops / secs / 1e9;
}

// SSE2 (every x86-64): a multiply and an add, 4 floats each.
double fma_sse2(double slice_ms) {
    __m128 a[kVectorChains];
    for (int k = 0; k < kVectorChains; ++k)
        a[k] = _mm_set1_ps(1.0f + 0.01f * static_cast<float>(k));
    const __m128 m = _mm_set1_ps(0.999999f), c = _mm_set1_ps(1e-7f);
    uint64_t flops = 0;
    const auto t0 = Clock::now();
    do {
        for (int i = 0; i < 1024; ++i)
            for (auto& x : a)
                x = _mm_add_ps(_mm_mul_ps(x, m), c);
        flops += uint64_t(1024) * kVectorChains * 4 * 2;
    } while (ms_since(t0) < slice_ms);
    const double secs = ms_since(t0) / 1e3;
    float out[4];
    _mm_storeu_ps(out, a[0]);
    g_sink = out[0];
    return flops / secs / 1e9;
}

// The widest vector FMA this CPU has, by name, and its probe.
std::pair<const char*, double (*)(double)> vector_probe() {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return {"avx512f", fma_avx512};
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return {"avx2+fma", fma_avx2};
    return {"sse2", fma_sse2};
}

double memory_sample(double* x, const double* y, const double* z, size_t n, double slice_ms) {
    uint64_t bytes = 0;
    auto t0 = Clock::now();
    do {
        for (size_t i = 0; i < n; ++i)
            x[i] = y[i] + 3.0 * z[i]; // STREAM triad: 2 reads, 1 write
        bytes += 3 * n * sizeof(double);
    } while (ms_since(t0) < slice_ms);
    double secs = ms_since(t0) / 1e3;
    g_sink = x[n / 2];
    return bytes / secs / 1e9;
}

double timer_overshoot_sample(double slice_ms) {
    std::vector<double> late;
    auto t0 = Clock::now();
    do {
        timespec want{0, 100'000};
        auto s = Clock::now();
        nanosleep(&want, nullptr);
        late.push_back(std::chrono::duration<double, std::micro>(Clock::now() - s).count() - 100.0);
    } while (ms_since(t0) < slice_ms);
    // The worst wake-up of the slice: noise shows in the tail, not the median.
    return *std::max_element(late.begin(), late.end());
}

double timer_resolution_ns() {
    double best = 1e9;
    for (int i = 0; i < 1000; ++i) {
        timespec a{}, b{};
        clock_gettime(CLOCK_MONOTONIC, &a);
        do
            clock_gettime(CLOCK_MONOTONIC, &b);
        while (a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec);
        best = std::min(best, (b.tv_sec - a.tv_sec) * 1e9 + double(b.tv_nsec - a.tv_nsec));
    }
    return best;
}

template <class T> T field(const nlohmann::json& j, const char* name) {
    return json_field<T>(j, name, "calibration");
}

} // namespace

nlohmann::json to_json(const ProbeStats& s) {
    return {{"samples", s.samples}, {"median", s.median}, {"min", s.min}, {"max", s.max}, {"cv", s.cv}};
}

ProbeStats probe_stats_from_json(const nlohmann::json& j, const char* name, const std::string& where) {
    auto o = json_field<nlohmann::json>(j, name, where);
    ProbeStats s = summarize(json_field<std::vector<double>>(o, "samples", where));
    for (double v : s.samples)
        if (!std::isfinite(v) || v < 0)
            throw Error(std::string("field '") + name + "' has a negative or non-finite sample", where);
    return s;
}

ProbeStats summarize(std::vector<double> samples) {
    ProbeStats s;
    s.samples = std::move(samples);
    if (s.samples.empty()) return s;
    std::vector<double> sorted = s.samples;
    std::sort(sorted.begin(), sorted.end());
    size_t n = sorted.size();
    s.min = sorted.front();
    s.max = sorted.back();
    s.median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    double mean = std::accumulate(sorted.begin(), sorted.end(), 0.0) / n;
    double var = 0;
    for (double v : sorted)
        var += (v - mean) * (v - mean);
    var = n > 1 ? var / (n - 1) : 0;
    s.cv = mean > 0 ? std::sqrt(var) / mean : 0;
    return s;
}

NcclInfo probe_nccl() {
    NcclInfo info;
    // Only a library the loader finds for root (slurmstepd's environment, not the user's).
    std::unique_ptr<void, int (*)(void*)> lib(dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL), dlclose);
    if (!lib) return info;
    using GetVersion = int (*)(int*);
    auto get = reinterpret_cast<GetVersion>(dlsym(lib.get(), "ncclGetVersion"));
    int v = 0;
    if (get && get(&v) == 0) {
        info.available = true;
        info.version = v;
    }
    return info;
}

double all_core_peak_flops(unsigned threads, std::chrono::milliseconds slice, unsigned repeats,
                           std::string* isa) {
    if (threads == 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        threads = sched_getaffinity(0, sizeof(set), &set) == 0 ? static_cast<unsigned>(CPU_COUNT(&set)) : 0;
        if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
    }
    const auto [name, vector_sample] = vector_probe();
    if (isa) *isa = name;
    double best = 0;
    for (unsigned r = 0; r < std::max(1u, repeats); ++r) {
        std::vector<double> gflops(threads, 0.0);
        {
            std::vector<std::jthread> pool;
            for (unsigned t = 0; t < threads; ++t)
                pool.emplace_back(
                    [&, t, probe = vector_sample] { gflops[t] = probe(double(slice.count())); });
        }
        best = std::max(best, std::accumulate(gflops.begin(), gflops.end(), 0.0) * 1e9);
    }
    return best;
}

Calibration calibrate(const CalibrationOptions& options) {
    Calibration c;
    auto t0 = Clock::now();
    c.budget_ms = static_cast<double>(options.budget.count());
    if (options.nccl) c.nccl = probe_nccl();
    if (options.budget.count() <= 0 || options.repeats == 0) {
        c.elapsed_ms = ms_since(t0);
        return c;
    }
    c.timer_resolution_ns = timer_resolution_ns();

    // Allocate and touch the bandwidth arrays before the clock of that probe starts: page faults are not
    // bandwidth. Their cost is part of the budget, so the probes get what is left.
    size_t n = std::max<size_t>(options.memory_bytes / (3 * sizeof(double)), 1024);
    std::vector<double> x(n, 0.0), y(n, 1.0), z(n, 2.0);

    // Budget split: compute 25 %, vector compute 15 %, memory 40 %, timer 20 % of what is left, minus a small
    // reserve for the slice overshoot (a slice ends after the iteration that crosses its end).
    double left = std::max(0.0, c.budget_ms - ms_since(t0)) * 0.9;
    double per = left / options.repeats;
    const auto [isa, vector_sample] = vector_probe();
    c.vector_isa = isa;
    std::vector<double> comp, vec, mem, tim;
    // Interleaved, so a burst of interference shows up as spread in every probe instead of biasing one.
    for (unsigned r = 0; r < options.repeats; ++r) {
        comp.push_back(compute_sample(per * 0.25));
        vec.push_back(vector_sample(per * 0.15));
        mem.push_back(memory_sample(x.data(), y.data(), z.data(), n, per * 0.4));
        tim.push_back(timer_overshoot_sample(per * 0.2));
    }
    c.vector_gflops = summarize(std::move(vec));
    c.compute_gflops = summarize(std::move(comp));
    c.memory_gbs = summarize(std::move(mem));
    c.timer_overshoot_us = summarize(std::move(tim));
    c.elapsed_ms = ms_since(t0);
    return c;
}

nlohmann::json to_json(const Calibration& c) {
    nlohmann::json j = {{"compute_gflops", to_json(c.compute_gflops)},
                        {"memory_gbs", to_json(c.memory_gbs)},
                        {"timer_overshoot_us", to_json(c.timer_overshoot_us)},
                        {"timer_resolution_ns", c.timer_resolution_ns},
                        {"elapsed_ms", c.elapsed_ms},
                        {"budget_ms", c.budget_ms}};
    if (c.nccl) j["nccl"] = {{"available", c.nccl->available}, {"version", c.nccl->version}};
    if (!c.vector_gflops.samples.empty()) {
        j["vector_gflops"] = to_json(c.vector_gflops);
        j["vector_isa"] = c.vector_isa;
    }
    return j;
}

Calibration calibration_from_json(const nlohmann::json& j) {
    if (!j.is_object()) throw Error("calibration must be a JSON object", "calibration");
    Calibration c;
    c.compute_gflops = probe_stats_from_json(j, "compute_gflops", "calibration");
    c.memory_gbs = probe_stats_from_json(j, "memory_gbs", "calibration");
    c.timer_overshoot_us = probe_stats_from_json(j, "timer_overshoot_us", "calibration");
    c.timer_resolution_ns = field<double>(j, "timer_resolution_ns");
    c.elapsed_ms = field<double>(j, "elapsed_ms");
    c.budget_ms = field<double>(j, "budget_ms");
    if (c.elapsed_ms < 0 || c.budget_ms < 0) throw Error("negative elapsed_ms or budget_ms", "calibration");
    // Absent in an older plugin's record.
    if (j.contains("vector_gflops")) {
        c.vector_gflops = probe_stats_from_json(j, "vector_gflops", "calibration");
        c.vector_isa = field<std::string>(j, "vector_isa");
    }
    if (j.contains("nccl")) {
        NcclInfo n;
        n.available = field<bool>(j.at("nccl"), "available");
        n.version = field<int>(j.at("nccl"), "version");
        c.nccl = n;
    }
    return c;
}

} // namespace infrarsi::node
