#include "model.hpp"

#include <algorithm>
#include <chrono>

namespace minigpt {

namespace {
double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
std::vector<int> range(int a, int b) {
    std::vector<int> v;
    for (int i = a; i < b; ++i)
        v.push_back(i);
    return v;
}
} // namespace

Block::Block(ParamStore& ps, const ModelConfig& m, int layer, int threads, const Group& ep)
    : n1_(ps, m, "layer" + std::to_string(layer) + ".norm1"),
      attn_(ps, m, "layer" + std::to_string(layer) + ".attn", threads),
      n2_(ps, m, "layer" + std::to_string(layer) + ".norm2") {
    const int first = n1_.gain;
    const std::string name = "layer" + std::to_string(layer) + (m.moe ? ".moe" : ".mlp");
    if (m.moe)
        moe_.emplace(ps, m, name, ep);
    else
        mlp_.emplace(ps, name, m.d_model, m.ffn(), false);
    params = range(first, static_cast<int>(ps.info.size()));
}

double Block::forward(const Mat& x, int B, int T, bool keep_probs, BlockCache& c, Mat& y) const {
    Mat h, a;
    n1_.forward(x, c.n1, h);
    attn_.forward(h, B, T, keep_probs, c.attn, a);
    y = x + a;
    n2_.forward(y, c.n2, h);
    double aux = 0;
    if (moe_)
        aux = moe_->forward(h, c.moe, a);
    else
        mlp_->forward(h, c.mlp, a);
    y += a;
    return aux;
}

void Block::backward(const Mat& dy, BlockCache& c, Mat& dx, float aux_weight) {
    Mat dh, da;
    if (moe_)
        moe_->backward(dy, c.moe, dh, aux_weight);
    else
        mlp_->backward(dy, c.mlp, dh);
    n2_.backward(dh, c.n2, da);
    da += dy; // residual
    attn_.backward(da, c.attn, dh);
    n1_.backward(dh, c.n1, dx);
    dx += da; // residual
}

std::vector<Block> Model::make_blocks(ParamStore& ps, const ModelConfig& m, int threads, const Group& ep) {
    std::vector<Block> blocks;
    blocks.reserve(m.n_layers);
    for (int l = 0; l < m.n_layers; ++l)
        blocks.emplace_back(ps, m, l, threads, ep);
    return blocks;
}

Model::Model(ParamStore& ps, const ModelConfig& m, Recompute recompute, int threads, const Group& ep)
    : ps_(ps), m_(m), recompute_(recompute), emb_(ps, m), blocks_(make_blocks(ps, m, threads, ep)),
      final_norm_(ps, m, "final_norm"), head_(ps, m) {
    emb_params_ = {emb_.tok, emb_.pos};
    head_params_ = range(final_norm_.gain, static_cast<int>(ps.info.size()));
}

Model::Result Model::step(const Batch& batch, float loss_scale, float aux_weight, GradSync* sync,
                          bool backward) {
    Result r;
    const int B = batch.B, T = batch.T, L = m_.n_layers;
    // Phase times exclude the MPI time spent inside them (the MoE all-to-alls, overlapped all-reduces).
    double t0 = now(), c0 = comm_seconds();
    std::vector<BlockCache> caches(L);
    Mat x, y;
    emb_.forward(batch.inputs.data(), B, T, x);
    const bool keep_probs = recompute_ == Recompute::None;
    for (int l = 0; l < L; ++l) {
        if (recompute_ == Recompute::Full) {
            BlockCache scratch; // the block's caches live only until the next block starts
            r.aux += blocks_[l].forward(x, B, T, true, scratch, y);
            caches[l].x_in = std::move(x);
        } else {
            r.aux += blocks_[l].forward(x, B, T, keep_probs, caches[l], y);
        }
        x = std::move(y);
    }
    NormCache fn;
    HeadCache hc;
    Mat h;
    final_norm_.forward(x, fn, h);
    r.loss_sum = head_.forward(h, batch.targets.data(), loss_scale, hc);
    for (const auto& c : caches)
        r.activation_bytes += c.bytes();
    r.activation_bytes += fn.bytes() + hc.bytes();
    r.forward_s = now() - t0 - (comm_seconds() - c0);
    if (!backward) return r;

    t0 = now();
    c0 = comm_seconds();
    Mat dh, dx;
    head_.backward(hc, batch.targets.data(), dh);
    final_norm_.backward(dh, fn, dx);
    hc = HeadCache{};
    if (sync) sync->params_ready(head_params_);
    for (int l = L - 1; l >= 0; --l) {
        if (recompute_ == Recompute::Full) {
            Mat unused;
            const Mat xin = std::move(caches[l].x_in);
            blocks_[l].forward(xin, B, T, true, caches[l], unused);
        }
        blocks_[l].backward(dx, caches[l], dh, aux_weight);
        caches[l] = BlockCache{}; // free this block's activations as soon as its backward is done
        dx = std::move(dh);
        if (sync) sync->params_ready(blocks_[l].params);
    }
    emb_.backward(batch.inputs.data(), B, T, dx);
    if (sync) sync->params_ready(emb_params_);
    r.backward_s = now() - t0 - (comm_seconds() - c0);
    return r;
}

ActivationMemory Model::footprint(const ModelConfig& m, Recompute recompute, int B, int threads) {
    const int N = B * m.seq_len;
    const double L = m.n_layers;
    const Footprint norm = Norm::footprint(N, m.d_model);
    const Footprint ffn = m.moe ? Moe::footprint(m, N) : Mlp::footprint(N, m.d_model, m.ffn());
    // A block with its probabilities kept or dropped: two norms, attention and the FFN; its temporaries are
    // those of its largest sublayer.
    const bool keep_probs = recompute != Recompute::Selective; // full re-runs the forward keeping them
    const Footprint attn = Attention::footprint(m, B, threads, keep_probs);
    const double block = 2 * norm.stored + attn.stored + ffn.stored;
    const double block_transient = std::max({norm.transient, attn.transient, ffn.transient});
    ActivationMemory a;
    switch (recompute) {
    case Recompute::None:
        a.stored = L * block;
        a.transient = block_transient;
        a.attention_scores = L * attn.dominant_stored;
        break;
    case Recompute::Selective:
        a.stored = L * block;
        a.transient = block_transient;
        a.attention_scores = attn.dominant_transient;
        break;
    case Recompute::Full:
        // Block inputs only; backward re-materializes one block at a time.
        a.stored = L * N * m.d_model * sizeof(float);
        a.transient = block + block_transient;
        a.attention_scores = attn.dominant_stored;
        break;
    }
    a.moe_buffers = L * ffn.dominant_stored + ffn.dominant_transient;
    const Footprint final_norm = Norm::footprint(N, m.d_model),
                    head = LmHead::footprint(N, m.d_model, m.vocab);
    a.stored += final_norm.stored + head.stored;
    // The residual stream: layer inputs and outputs in flight (x, y, dh, dx).
    a.transient = std::max(a.transient, head.transient) + 4.0 * N * m.d_model * sizeof(float);
    return a;
}

} // namespace minigpt
