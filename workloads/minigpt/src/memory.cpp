#include "memory.hpp"

#include <algorithm>
#include <cmath>
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
    const double B = cfg.micro_batch, T = m.seq_len, N = B * T, d = m.d_model, H = m.n_heads, L = m.n_layers,
                 V = m.vocab, F = m.ffn(), E = m.experts, k = m.top_k, Fe = m.eff(), ep = cfg.ep_size;
    const double C = std::ceil(m.capacity_factor * N * k / E); // slots per expert per rank

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

    // Activations kept per block for backward (floats), following the caches in model.hpp:
    // norm1 (N*d + N), attention (x, qkv, ctx: 5*N*d; probabilities B*H*T*T), norm2 (N*d + N), FFN.
    const double scores = B * H * T * T;
    double ffn = 0, ffn_transient = 0;
    if (m.moe) {
        // input, router probs, routing ints, expert inputs/hidden/GELU over E*C padded slots, gathered
        // outputs
        ffn = N * d + N * E + 2 * N * k + E * C * (d + 2 * Fe) + E * C * d;
        ffn_transient = 4 * E * C * d; // send/receive buffers of the all-to-alls
    } else {
        ffn = N * d + 2 * N * F;
        ffn_transient = 2 * N * F; // GELU temporaries
    }
    const double block_no_scores = 7 * N * d + 2 * N + ffn;
    const double block_full = block_no_scores + scores;
    double stored = 0, transient = 0;
    const double attn_bwd = 4 * N * d + cfg.threads * 2 * T * T; // dctx, dqkv; per-thread dP and dS
    switch (cfg.recompute) {
    case Recompute::None:
        stored = L * block_full;
        transient = std::max(attn_bwd, ffn_transient);
        break;
    case Recompute::Selective:
        stored = L * block_no_scores;
        // forward: all scores of one layer exist at once; backward: one recomputed T x T per thread more
        transient = std::max({scores, attn_bwd + cfg.threads * T * T, ffn_transient});
        break;
    case Recompute::Full:
        stored = L * N * d;
        transient = block_full + std::max(attn_bwd, ffn_transient); // one block re-materialized in backward
        break;
    }
    const double head = N * d + N * V + N * d + N; // head input + logits, final norm (xhat, rstd)
    const double flow = 4 * N * d;                 // residual stream, layer inputs/outputs in flight

    MemoryEstimate est;
    // Process baseline measured with a 1-step tiny run: binary, Eigen/OpenMP/MPI libraries, TCP buffers.
    const double runtime = (dp_size > 1 ? 80.0 : 40.0) * 1024 * 1024;
    est.breakdown = {{"params", params * f},
                     {"grads", params * f},
                     {"optimizer_states", 2 * shard * f},
                     {"activations_stored", (stored + head) * f},
                     {"attention_scores", cfg.recompute == Recompute::None ? L * scores * f : scores * f},
                     {"transient", (transient + flow) * f},
                     {"moe_buffers", m.moe ? (L * (E * C * (2 * d + 2 * Fe)) + 4 * E * C * d) * f : 0.0},
                     {"runtime", runtime}};
    est.per_rank_bytes = (3 * params + 2 * shard + stored + head + transient + flow) * f + runtime;
    est.per_node_bytes = est.per_rank_bytes * std::min(cfg.ranks_per_node, dp_size);
    return est;
}

} // namespace minigpt
