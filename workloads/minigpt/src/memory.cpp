#include "memory.hpp"

#include "model.hpp"

#include <algorithm>
#include <sys/resource.h>

namespace minigpt {

long long peak_rss_bytes() {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return static_cast<long long>(ru.ru_maxrss) * 1024; // Linux reports KiB
}

MemoryEstimate estimate_memory(const Config& cfg, int dp_size) {
    const auto& m = cfg.model;
    constexpr double f = sizeof(float);
    const double T = m.seq_len, d = m.d_model, L = m.n_layers, V = m.vocab, F = m.ffn(), E = m.experts,
                 Fe = m.eff(), ep = cfg.ep_size;

    // Parameters: replicated ones, and the experts this rank holds (E/ep of them).
    double per_layer = 4 * d * d + 4 * d + 2 * d * (m.norm == NormKind::Layer ? 2 : 1);
    double expert_local = 0;
    if (m.moe) {
        per_layer += d * E;
        expert_local = L * (E / ep) * (2 * d * Fe + Fe + d);
    } else {
        per_layer += 2 * d * F + F + d;
    }
    const double replicated = V * d + T * d + L * per_layer + d * (m.norm == NormKind::Layer ? 2 : 1) + d * V;
    const double params = replicated + expert_local;
    const int expert_dp = dp_size / cfg.ep_size;
    const double shard = cfg.zero1 ? replicated / dp_size + expert_local / expert_dp : params;

    // Activations: each module states its own footprint next to its code; the model composes them under the
    // recompute policy (model.cpp).
    const ActivationMemory act = Model::footprint(m, cfg.recompute, cfg.micro_batch, cfg.threads);

    MemoryEstimate est;
    // Process baseline measured with a 1-step tiny run: binary, Eigen/OpenMP/MPI libraries, TCP buffers.
    const double runtime = (dp_size > 1 ? 80.0 : 40.0) * 1024 * 1024;
    est.breakdown = {{"params", params * f},
                     {"grads", params * f},
                     {"optimizer_states", 2 * shard * f},
                     {"activations_stored", act.stored},
                     {"attention_scores", act.attention_scores},
                     {"transient", act.transient},
                     {"moe_buffers", act.moe_buffers},
                     {"runtime", runtime}};
    est.per_rank_bytes = (3 * params + 2 * shard) * f + act.stored + act.transient + runtime;
    est.per_node_bytes = est.per_rank_bytes * std::min(cfg.ranks_per_node, dp_size);
    return est;
}

} // namespace minigpt
