#pragma once
// Run configuration: every knob is a flag and a MINIGPT_* environment variable; a flag wins over the
// environment (README.md lists them all).
#include <nlohmann/json.hpp>
#include <string>

namespace minigpt {

enum class Recompute { None, Selective, Full };
enum class NormKind { Rms, Layer };

struct ModelConfig {
    bool moe = false;
    int vocab = 2048;
    int d_model = 128;
    int n_layers = 4;
    int n_heads = 16;
    int seq_len = 512;
    int d_ff = 0; // 0: 4 * d_model
    NormKind norm = NormKind::Rms;
    int experts = 8;
    int top_k = 2;
    int expert_ff = 0; // 0: 2 * d_model, so top-2 routing costs what the dense 4x MLP costs
    float capacity_factor = 1.25f;
    float aux_coef = 0.01f;
    int ffn() const { return d_ff > 0 ? d_ff : 4 * d_model; }
    int eff() const { return expert_ff > 0 ? expert_ff : 2 * d_model; }
    int head_dim() const { return d_model / n_heads; }
};

struct Config {
    ModelConfig model;
    int steps = 20;
    unsigned long long seed = 1234;
    int micro_batch = 1;
    int grad_accum = 1;
    int global_batch = 0; // 0: micro_batch * grad_accum * dp_size
    Recompute recompute = Recompute::None;
    int threads = 1;
    int ranks_per_node = 1;
    int nodes = 1; // only used by --estimate-memory (training takes the layout from MPI)
    double bucket_mb = 4.0;
    bool overlap = false;
    bool zero1 = false;
    int ep_size = 1;
    float lr = 3e-3f;
    int warmup_steps = 5;   // linear learning-rate warm-up
    int timing_warmup = 2;  // steps excluded from the summary's median step time
    double peak_gflops = 0; // per node; 0: measure with a GEMM probe
    bool estimate_memory = false;

    // Checks the shape and the batch arithmetic for a run with dp_size data-parallel ranks; throws Error.
    void validate(int dp_size) const;
    nlohmann::json to_json() const;
};

// Parses flags and MINIGPT_* environment variables. Returns false if --help was printed.
bool parse_config(int argc, char** argv, Config& cfg);

std::string to_string(Recompute r);

} // namespace minigpt
