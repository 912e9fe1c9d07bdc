#include "layers.hpp"

#include <cmath>

namespace minigpt {

// ---------------------------------------------------------------------------------------------- embedding

Embedding::Embedding(ParamStore& ps, const ModelConfig& m) : ps_(ps) {
    tok = ps.add("tok_emb", m.vocab, m.d_model);
    pos = ps.add("pos_emb", m.seq_len, m.d_model);
}

void Embedding::forward(const std::int32_t* ids, int B, int T, Mat& x) {
    auto te = ps_.w(tok);
    auto pe = ps_.w(pos);
    x.resize(static_cast<Eigen::Index>(B) * T, te.cols());
    for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t)
            x.row(b * T + t) = te.row(ids[b * T + t]) + pe.row(t);
}

void Embedding::backward(const std::int32_t* ids, int B, int T, const Mat& dx) {
    auto gt = ps_.g(tok);
    auto gp = ps_.g(pos);
    for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t) {
            gt.row(ids[b * T + t]) += dx.row(b * T + t);
            gp.row(t) += dx.row(b * T + t);
        }
}

// ---------------------------------------------------------------------------------------------- norm

Norm::Norm(ParamStore& ps, const ModelConfig& m, const std::string& name) : ps_(ps), kind_(m.norm) {
    gain = ps.add(name + ".gain", 1, m.d_model, false, false);
    if (kind_ == NormKind::Layer) bias = ps.add(name + ".bias", 1, m.d_model, false, false);
}

void Norm::forward(const Mat& x, NormCache& c, Mat& y) const {
    constexpr float eps = 1e-5f;
    const auto n = x.rows();
    const float inv_d = 1.0f / static_cast<float>(x.cols());
    c.xhat.resize(n, x.cols());
    c.rstd.resize(n);
    for (Eigen::Index i = 0; i < n; ++i) {
        if (kind_ == NormKind::Layer) {
            const float mu = x.row(i).sum() * inv_d;
            c.xhat.row(i) = x.row(i).array() - mu;
            c.rstd[i] = 1.0f / std::sqrt(c.xhat.row(i).squaredNorm() * inv_d + eps);
        } else {
            c.xhat.row(i) = x.row(i);
            c.rstd[i] = 1.0f / std::sqrt(x.row(i).squaredNorm() * inv_d + eps);
        }
        c.xhat.row(i) *= c.rstd[i];
    }
    y = c.xhat.array().rowwise() * ps_.w(gain).row(0).array();
    if (bias >= 0) y.rowwise() += ps_.w(bias).row(0);
}

void Norm::backward(const Mat& dy, const NormCache& c, Mat& dx) {
    const auto n = dy.rows();
    const float inv_d = 1.0f / static_cast<float>(dy.cols());
    ps_.g(gain).row(0) += (dy.array() * c.xhat.array()).colwise().sum().matrix();
    if (bias >= 0) ps_.g(bias).row(0) += dy.colwise().sum();
    const auto g = ps_.w(gain).row(0).array();
    dx.resize(n, dy.cols());
    for (Eigen::Index i = 0; i < n; ++i) {
        // d/dx of xhat: rstd * (dxhat - xhat * mean(dxhat * xhat) [- mean(dxhat) for LayerNorm])
        const RowVec dxhat = (dy.row(i).array() * g).matrix();
        const float dot = dxhat.dot(c.xhat.row(i)) * inv_d;
        dx.row(i) = dxhat - dot * c.xhat.row(i);
        if (kind_ == NormKind::Layer) dx.row(i).array() -= dxhat.sum() * inv_d;
        dx.row(i) *= c.rstd[i];
    }
}

Footprint Norm::footprint(double rows, int d) {
    return {.stored = (rows * d + rows) * sizeof(float)}; // xhat, rstd
}

// ---------------------------------------------------------------------------------------------- MLP

Mlp::Mlp(ParamStore& ps, const std::string& name, int d, int hidden, bool expert) : ps_(ps) {
    w1 = ps.add(name + ".w1", d, hidden, expert);
    b1 = ps.add(name + ".b1", 1, hidden, expert, false);
    w2 = ps.add(name + ".w2", hidden, d, expert);
    b2 = ps.add(name + ".b2", 1, d, expert, false);
}

namespace {
// The activation as an eager framework runs it: one pass (and one temporary) per elementary operation.
Mat gelu_forward(const Mat& h) {
    Mat inner = h.array().cube().matrix();
    inner = ((h.array() + kGeluC1 * inner.array()) * kGeluC0).matrix();
    const Mat t = inner.array().tanh().matrix();
    return (0.5f * h.array() * (1.0f + t.array())).matrix();
}

Mat gelu_backward(const Mat& h, const Mat& da) {
    const Mat inner = ((h.array() + kGeluC1 * h.array().cube()) * kGeluC0).matrix();
    const Mat t = inner.array().tanh().matrix();
    const Mat dinner = (kGeluC0 * (1.0f + 3.0f * kGeluC1 * h.array().square())).matrix();
    const Mat d =
        (0.5f * (1.0f + t.array()) + 0.5f * h.array() * (1.0f - t.array().square()) * dinner.array())
            .matrix();
    return (da.array() * d.array()).matrix();
}
} // namespace

void Mlp::forward(const Mat& x, MlpCache& c, Mat& y) const {
    c.x = x;
    c.h.noalias() = x * ps_.w(w1);
    c.h.rowwise() += ps_.w(b1).row(0);
    c.a = gelu_forward(c.h);
    y.noalias() = c.a * ps_.w(w2);
    y.rowwise() += ps_.w(b2).row(0);
}

void Mlp::backward(const Mat& dy, MlpCache& c, Mat& dx) {
    ps_.g(w2).noalias() += c.a.transpose() * dy;
    ps_.g(b2).row(0) += dy.colwise().sum();
    const Mat da = dy * ps_.w(w2).transpose();
    const Mat dh = gelu_backward(c.h, da);
    ps_.g(w1).noalias() += c.x.transpose() * dh;
    ps_.g(b1).row(0) += dh.colwise().sum();
    dx.noalias() = dh * ps_.w(w1).transpose();
}

Footprint Mlp::footprint(double rows, int d, int hidden) {
    constexpr double f = sizeof(float);
    return {.stored = rows * (d + 2.0 * hidden) * f, // x, h, a
            .transient = 2 * rows * hidden * f};     // the GELU temporaries of forward
}

// ---------------------------------------------------------------------------------------------- LM head

LmHead::LmHead(ParamStore& ps, const ModelConfig& m) : ps_(ps) {
    w = ps.add("lm_head", m.d_model, m.vocab);
}

double LmHead::forward(const Mat& x, const std::int32_t* targets, float scale, HeadCache& c) {
    c.x = x;
    c.scale = scale;
    c.logits.noalias() = x * ps_.w(w);
    double loss = 0;
    for (Eigen::Index i = 0; i < c.logits.rows(); ++i) {
        const float mx = c.logits.row(i).maxCoeff();
        const float lse = mx + std::log((c.logits.row(i).array() - mx).exp().sum());
        loss += lse - c.logits(i, targets[i]);
    }
    return loss;
}

void LmHead::backward(HeadCache& c, const std::int32_t* targets, Mat& dx) {
    // d(cross-entropy)/d(logits) = softmax(logits) - onehot(target)
    Mat& p = c.logits; // softmax in place: the logits are not needed after this
    for (Eigen::Index i = 0; i < p.rows(); ++i) {
        const float mx = p.row(i).maxCoeff();
        p.row(i) = (p.row(i).array() - mx).exp();
        p.row(i) /= p.row(i).sum();
        p(i, targets[i]) -= 1.0f;
    }
    p *= c.scale;
    ps_.g(w).noalias() += c.x.transpose() * p;
    dx.noalias() = p * ps_.w(w).transpose();
}

Footprint LmHead::footprint(double rows, int d, int vocab) {
    constexpr double f = sizeof(float);
    return {.stored = rows * (d + vocab) * f}; // x, logits (softmaxed in place)
}

} // namespace minigpt
