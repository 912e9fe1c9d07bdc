#include "model/transformer_memory.hpp"

#include "util/error.hpp"

#include <algorithm>

namespace infrarsi::model {

TransformerMemory transformer_memory(const TransformerShape& sh, const TransformerSettings& st) {
    TransformerMemory m;
    const double L = sh.layers, h = sh.hidden, a = std::max(1, sh.heads), s = sh.seq_len, V = sh.vocab;
    const double b = std::max(1, st.micro_batch);
    m.parameters = sh.parameters > 0 ? sh.parameters : 12.0 * L * h * h + V * h;

    // Model states per rank (ZeRO: stage 1 shards optimizer states, 2 also gradients, 3 also weights).
    const double n = std::max(1, st.data_parallel);
    const double weights = m.parameters * sh.parameter_bytes / (st.zero_stage >= 3 ? n : 1.0);
    const double grads = m.parameters * sh.parameter_bytes / (st.zero_stage >= 2 ? n : 1.0);
    const double optim = m.parameters * sh.optimizer_bytes / (st.zero_stage >= 1 ? n : 1.0);
    m.states = weights + grads + optim;

    // Activations per layer with 16-bit activations and 1-byte dropout masks (Korthikanti et al., Table 2):
    // s b h (34 + 5 a s / h) bytes; selective recompute keeps 34 s b h (the attention's s^2 terms are
    // recomputed); full recompute keeps each layer's 2 s b h input and rebuilds one layer at a time. Other
    // widths scale by activation_bytes / 2. Outside the layers: the embedding's output and dropout mask
    // (3 s b h), the final layer norm and output projection's input (4 s b h), and the fp32 logits and
    // their gradient for the cross entropy (8 s b V).
    const double full_layer = s * b * h * (34.0 + 5.0 * a * s / std::max(1.0, h));
    double layers = 0;
    switch (st.recompute) {
    case Recompute::None:
        layers = L * full_layer;
        break;
    case Recompute::Selective:
        layers = L * 34.0 * s * b * h;
        break;
    case Recompute::Full:
        layers = L * 2.0 * s * b * h + full_layer;
        break;
    }
    const double scale = sh.activation_bytes / 2.0;
    m.activations = scale * (layers + 7.0 * s * b * h) + 8.0 * s * b * V;
    m.runtime = sh.runtime_bytes;
    m.per_rank = m.states + m.activations + m.runtime;
    m.per_node = m.per_rank * std::max(1, st.ranks_per_node);
    return m;
}

Recompute parse_recompute(const std::string& name) {
    if (name == "none" || name == "false" || name == "off" || name == "0") return Recompute::None;
    if (name == "selective") return Recompute::Selective;
    if (name == "full" || name == "true" || name == "on" || name == "1") return Recompute::Full;
    throw Error("unknown recompute setting '" + name + "'", "", "none, selective or full");
}

} // namespace infrarsi::model
