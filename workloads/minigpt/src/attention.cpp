#include "attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace minigpt {

Attention::Attention(ParamStore& ps, const ModelConfig& m, const std::string& name, int threads)
    : ps_(ps), d_(m.d_model), heads_(m.n_heads), hd_(m.head_dim()), threads_(threads) {
    wqkv = ps.add(name + ".wqkv", d_, 3 * d_);
    bqkv = ps.add(name + ".bqkv", 1, 3 * d_, false, false);
    wo = ps.add(name + ".wo", d_, d_);
    bo = ps.add(name + ".bo", 1, d_, false, false);
}

namespace {
// Row softmax of causal scores in place: entries above the diagonal are masked to zero probability.
void causal_softmax(Eigen::Ref<Mat> s) {
    const auto T = s.rows();
    for (Eigen::Index i = 0; i < T; ++i) {
        auto row = s.row(i);
        if (i + 1 < T) row.tail(T - 1 - i).setConstant(-std::numeric_limits<float>::infinity());
        const float mx = row.head(i + 1).maxCoeff();
        row = (row.array() - mx).exp();
        row /= row.sum();
    }
}
} // namespace

void Attention::forward(const Mat& x, int B, int T, bool keep_probs, AttnCache& c, Mat& y) const {
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd_));
    c.B = B;
    c.T = T;
    c.x = x;
    c.qkv.noalias() = x * ps_.w(wqkv);
    c.qkv.rowwise() += ps_.w(bqkv).row(0);
    c.ctx.resize(x.rows(), d_);
    // Scores for all heads of the micro-batch exist at once, as in an unfused framework; they are kept for
    // backward or dropped at the end of the layer (selective recompute).
    Mat scores(static_cast<Eigen::Index>(B) * heads_ * T, T);
    const Mat& qkv = c.qkv;
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (int bh = 0; bh < B * heads_; ++bh) {
        const int b = bh / heads_, h = bh % heads_;
        const auto q = qkv.block(b * T, h * hd_, T, hd_);
        const auto k = qkv.block(b * T, d_ + h * hd_, T, hd_);
        const auto v = qkv.block(b * T, 2 * d_ + h * hd_, T, hd_);
        auto s = scores.block(static_cast<Eigen::Index>(bh) * T, 0, T, T);
        s.noalias() = q * k.transpose();
        s *= scale;
        causal_softmax(s);
        c.ctx.block(b * T, h * hd_, T, hd_).noalias() = s * v;
    }
    if (keep_probs)
        c.probs = std::move(scores);
    else
        c.probs.resize(0, 0);
    y.noalias() = c.ctx * ps_.w(wo);
    y.rowwise() += ps_.w(bo).row(0);
}

void Attention::backward(const Mat& dy, AttnCache& c, Mat& dx) {
    const int B = c.B, T = c.T;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd_));
    ps_.g(wo).noalias() += c.ctx.transpose() * dy;
    ps_.g(bo).row(0) += dy.colwise().sum();
    const Mat dctx = dy * ps_.w(wo).transpose();
    Mat dqkv(c.qkv.rows(), 3 * d_);
    const bool have_probs = c.probs.rows() > 0;
    const Mat& qkv = c.qkv;
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (int bh = 0; bh < B * heads_; ++bh) {
        const int b = bh / heads_, h = bh % heads_;
        const auto q = qkv.block(b * T, h * hd_, T, hd_);
        const auto k = qkv.block(b * T, d_ + h * hd_, T, hd_);
        const auto v = qkv.block(b * T, 2 * d_ + h * hd_, T, hd_);
        Mat recomputed;
        if (!have_probs) {
            recomputed.noalias() = q * k.transpose();
            recomputed *= scale;
            causal_softmax(recomputed);
        }
        const Eigen::Ref<const Mat> p =
            have_probs ? Eigen::Ref<const Mat>(c.probs.block(static_cast<Eigen::Index>(bh) * T, 0, T, T))
                       : Eigen::Ref<const Mat>(recomputed);
        const auto dout = dctx.block(b * T, h * hd_, T, hd_);
        dqkv.block(b * T, 2 * d_ + h * hd_, T, hd_).noalias() = p.transpose() * dout;
        Mat ds = dout * v.transpose(); // dP
        // softmax backward: dS = P o (dP - rowsum(dP o P))
        for (int i = 0; i < T; ++i) {
            const float r = ds.row(i).dot(p.row(i));
            ds.row(i) = (p.row(i).array() * (ds.row(i).array() - r)).matrix();
        }
        ds *= scale;
        dqkv.block(b * T, h * hd_, T, hd_).noalias() = ds * k;
        dqkv.block(b * T, d_ + h * hd_, T, hd_).noalias() = ds.transpose() * q;
    }
    ps_.g(wqkv).noalias() += c.x.transpose() * dqkv;
    ps_.g(bqkv).row(0) += dqkv.colwise().sum();
    dx.noalias() = dqkv * ps_.w(wqkv).transpose();
}

Footprint Attention::footprint(const ModelConfig& m, int B, int threads, bool keep_probs) {
    constexpr double f = sizeof(float);
    const double T = m.seq_len, N = B * T, d = m.d_model, scores = B * m.n_heads * T * T;
    Footprint fp;
    fp.stored = (5 * N * d + (keep_probs ? scores : 0)) * f; // x, qkv, ctx (+ probs)
    // Forward: the scores of all heads exist at once (stored when kept). Backward: dctx and dqkv, and per
    // thread dP and dS, plus the recomputed probabilities when they were dropped.
    const double forward = keep_probs ? 0 : scores;
    const double backward = 4 * N * d + threads * (keep_probs ? 2 : 3) * T * T;
    fp.transient = std::max(forward, backward) * f;
    fp.dominant_stored = (keep_probs ? scores : 0) * f;
    fp.dominant_transient = forward * f;
    return fp;
}

} // namespace minigpt
