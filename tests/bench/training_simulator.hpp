#pragma once
// A synthetic stand-in for large 3D-parallel LLM training (TP x PP x DP, micro-batch, interleaving,
// recompute, ZeRO, fused kernels) on 64 to 1024 GPUs, for benchmarks and tests where no measured table
// exists. It is not a predictor of any real system; it has the structure that makes tuning hard:
//   - step time (Narayanan et al. 2021, "Efficient large-scale language model training on GPU clusters
//     using Megatron-LM", SC'21: FLOPs per layer eq. 3, 1F1B and interleaved pipeline bubbles section 2.2,
//     TP all-reduces section 2.3), GEMM efficiency falling with small micro-batches and narrow TP shards,
//     ring all-reduce for data parallelism with bucket latency and overlap with the backward pass,
//     ZeRO communication (Rajbhandari et al. 2020, SC'20, section 7), recompute overhead (Korthikanti et al.
//     2022, "Reducing activation recomputation in large transformer models", section 5);
//   - peak memory per GPU: model states per ZeRO stage (Rajbhandari et al. 2020, section 3) and activations
//     per layer (Korthikanti et al. 2022, table 2 and section 4.2.3 for pipeline in-flight micro-batches);
//   - an analytic prior estimate that is deliberately imperfect: it omits the logits buffer, communication
//     buckets, allocator fragmentation and the recompute working set, and undercounts saved activations, so
//     it is off by 1.1x to about 2x depending on the configuration;
//   - measurement noise (log-normal, larger when communication dominates, rare stragglers), OOM when the
//     true peak exceeds the per-GPU limit, and trial cost (start-up plus steps; an OOM is killed part way).
// It lives with the benchmarks, not in libinfrarsi: the library `bench_simulator`
// (tests/bench/CMakeLists.txt) that bench_common and the unit tests link; outside tests/bench it is included
// as "bench/training_simulator.hpp". It keeps the namespace infrarsi::model of the types it builds on.
#include "model/candidate.hpp"
#include "model/features.hpp"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace infrarsi::model {

struct SimulatorSpec {
    std::string name;
    int layers = 32, hidden = 4096, heads = 32, seq = 4096, vocab = 51200;
    int gpus = 64, gpus_per_node = 8;
    int global_batch = 512;          // sequences per step
    double peak_flops = 989e12;      // bf16 dense, per GPU (H100 SXM)
    double hbm_bandwidth = 3.35e12;  // bytes/s
    double nvlink_bandwidth = 300e9; // achievable all-reduce bus bandwidth inside a node
    double network_bandwidth = 40e9; // achievable bus bandwidth per GPU across nodes
    double memory_limit_bytes = 80e9;
    int trial_steps = 20;
    double startup_s = 90;
};

struct SimulatedConfig {
    int tp = 1, pp = 1, vpp = 1, mb = 1, recompute = 0 /* none, selective, full */, zero = 0, bucket_mb = 64;
    bool flash_attention = false, sequence_parallel = false, overlap_grad_reduce = false,
         fused_optimizer = false;
};

class TrainingSimulator {
  public:
    explicit TrainingSimulator(SimulatorSpec spec);

    // sim-gpt7b-64, sim-gpt20b-256, sim-gpt175b-1024.
    static std::vector<SimulatorSpec> presets();

    const SimulatorSpec& spec() const { return spec_; }
    const FeatureEncoding& encoding() const { return encoding_; }
    const std::vector<Candidate>& candidates() const { return candidates_; }
    const std::vector<SimulatedConfig>& configs() const { return configs_; }
    Configuration configuration(int i) const;
    int size() const { return static_cast<int>(configs_.size()); }

    double true_step_time(int i) const { return step_time_[i]; }
    double true_peak_bytes(int i) const { return peak_[i]; }
    bool fits(int i) const { return peak_[i] <= spec_.memory_limit_bytes; }
    int best() const { return best_; } // fastest configuration that fits
    // What a cautious user starts from: TP across the node, full recompute, micro-batch 1, ZeRO-1, the
    // fewest pipeline stages that fit.
    int baseline() const { return baseline_; }

    // One trial: noisy step time, measured peak, outcome, cost.
    TrialObservation run(int i, std::mt19937_64& rng) const;
    // Log-variance of one trial's step-time measurement (what a doctor would calibrate), typical value.
    double noise_variance() const { return 0.02 * 0.02; }

    // Model of one configuration (public for tests and the table writer).
    double step_time(const SimulatedConfig& c) const;
    double peak_bytes(const SimulatedConfig& c, bool analytic_prior) const;
    double comm_fraction(const SimulatedConfig& c) const;
    bool valid(const SimulatedConfig& c) const;

  private:
    SimulatorSpec spec_;
    FeatureEncoding encoding_;
    std::vector<SimulatedConfig> configs_;
    std::vector<Candidate> candidates_;
    std::vector<double> step_time_, peak_, comm_;
    int best_ = -1, baseline_ = -1;
};

} // namespace infrarsi::model
