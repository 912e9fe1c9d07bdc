#pragma once
// A memory prior for a job with no estimator of its own: the standard accounting of a decoder-only
// transformer's training memory per rank, after Korthikanti et al. 2022 ("Reducing Activation Recomputation
// in Large Transformer Models", Table 2, without tensor or sequence parallelism) for activations and the
// ZeRO paper (Rajbhandari et al. 2020) for model states. Declared in the contract's [memory_model]
// (docs/contract.md); the censored memory model (censored_memory_model.hpp) corrects it from the trials.
#include <cstdint>
#include <string>

namespace infrarsi::model {

enum class Recompute { None, Selective, Full };

// What the job is, as the contract declares it.
struct TransformerShape {
    double parameters = 0; // 0: from layers, hidden and vocab (12 L h^2 + V h)
    int layers = 0;
    int hidden = 0;
    int heads = 0;
    int seq_len = 0;
    int vocab = 0;
    int activation_bytes = 2; // 2: bf16/fp16 activations, 4: fp32
    int parameter_bytes = 2;  // the working copy of weights and gradients: 2 mixed precision, 4 fp32
    int optimizer_bytes = 12; // per parameter: Adam in mixed precision 12 (fp32 master, m, v); fp32 8
    double runtime_bytes = 0; // per rank: framework, libraries, CUDA context, allocator slack
};

// One trial's settings that move memory.
struct TransformerSettings {
    int micro_batch = 1;
    Recompute recompute = Recompute::None;
    int ranks_per_node = 1;
    int data_parallel = 1; // ranks sharing the model states under ZeRO
    int zero_stage = 0;    // 0 none; 1 optimizer states; 2 + gradients; 3 + parameters
};

struct TransformerMemory {
    double parameters = 0;  // the count used
    double states = 0;      // weights, gradients, optimizer states per rank (after ZeRO)
    double activations = 0; // per rank, for one micro-batch, at the recompute setting
    double runtime = 0;
    double per_rank = 0;
    double per_node = 0; // ranks_per_node x per_rank
};

TransformerMemory transformer_memory(const TransformerShape& shape, const TransformerSettings& settings);

// "none", "selective", "full" (and false/true, as recompute knobs are often booleans); throws otherwise.
Recompute parse_recompute(const std::string& name);

} // namespace infrarsi::model
