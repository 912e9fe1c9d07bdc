#pragma once
// A short noise calibration of one node: how fast it computes, how fast it moves memory and how steady its
// timers are, each measured a few times so the spread is known. The orchestrator divides trial timings by
// node speed and flags nodes whose spread is large (noisy neighbours, throttling). Runs within a time
// budget because it runs at the start of users' jobs.
#include <chrono>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::node {

struct CalibrationOptions {
    std::chrono::milliseconds budget{300}; // total wall time of all probes
    unsigned repeats = 5;                  // samples per probe
    size_t memory_bytes = 48u << 20;       // working set of the bandwidth probe (3 arrays), beyond most L2s
    bool nccl = false;                     // look for NCCL (dlopen libnccl.so.2); off by default
};

// Samples of one probe and their summary. Units are in the name of the field that holds it.
struct ProbeStats {
    std::vector<double> samples;
    double median = 0, min = 0, max = 0;
    double cv = 0; // coefficient of variation (stddev / mean): the noise figure
    bool operator==(const ProbeStats&) const = default;
};

struct NcclInfo {
    bool available = false;
    int version = 0; // ncclGetVersion's code, e.g. 21903 for 2.19.3
    bool operator==(const NcclInfo&) const = default;
};

struct Calibration {
    ProbeStats compute_gflops; // double-precision FMA throughput of one core
    // Single-precision vector FMA throughput of one core, with the widest vector unit the CPU has
    // (vector_isa: "avx512f", "avx2+fma", "sse2"): the per-core peak a training step's GEMMs can reach, so
    // cores x it is the node's MFU denominator. Empty in a record of an older plugin.
    ProbeStats vector_gflops;
    std::string vector_isa;
    ProbeStats memory_gbs;          // STREAM-triad bandwidth of one core
    ProbeStats timer_overshoot_us;  // how late a 100 us sleep wakes up (scheduler noise)
    double timer_resolution_ns = 0; // smallest non-zero step of CLOCK_MONOTONIC seen
    double elapsed_ms = 0;          // what the calibration cost
    double budget_ms = 0;
    std::optional<NcclInfo> nccl; // absent when not asked for
    bool operator==(const Calibration&) const = default;
};

// Runs the probes on the calling thread. A budget of 0 runs nothing and returns empty samples.
Calibration calibrate(const CalibrationOptions& options = {});

// The node's single-precision vector FMA peak as a job using every core sees it: the widest vector probe on
// `threads` threads at once (0: every core this process may run on), each `slice` long, `repeats` times;
// the fastest round's total in FLOP/s, with the instruction set in *isa. A per-core sample taken while one
// core was busy elsewhere, times the cores, can come out below what a multi-threaded job achieves; this one
// measures what the cores do together, long enough for their clocks to settle.
double all_core_peak_flops(unsigned threads = 0,
                           std::chrono::milliseconds slice = std::chrono::milliseconds(250),
                           unsigned repeats = 3, std::string* isa = nullptr);

// Summary of raw samples (exposed for the record reader and for tests).
ProbeStats summarize(std::vector<double> samples);

// Whether NCCL can be loaded here, without initializing any device.
NcclInfo probe_nccl();

nlohmann::json to_json(const ProbeStats& s);
// {"samples": [...], ...} under `name`, re-summarized from its samples; throws infrarsi::Error naming
// `where`.
ProbeStats probe_stats_from_json(const nlohmann::json& j, const char* name, const std::string& where);

nlohmann::json to_json(const Calibration& c);
// Validates as it reads; throws infrarsi::Error naming the field.
Calibration calibration_from_json(const nlohmann::json& j);

} // namespace infrarsi::node
