#include "moe.hpp"

#include <algorithm>
#include <cmath>

namespace minigpt {

std::size_t MoeCache::bytes() const {
    std::size_t b = (x.size() + probs.size() + yback.size()) * sizeof(float);
    b += (expert.size() + slot.size()) * sizeof(int);
    for (const auto& e : experts)
        b += e.bytes();
    return b;
}

Moe::Moe(ParamStore& ps, const ModelConfig& m, const std::string& name, const Group& ep)
    : ps_(ps), ep_(ep), d_(m.d_model), E_(m.experts), k_(m.top_k), El_(m.experts / ep.size()), m_(m) {
    router = ps.add(name + ".router", d_, E_);
    for (int le = 0; le < El_; ++le)
        experts.emplace_back(ps, name + ".expert" + std::to_string(ep.rank() * El_ + le), d_, m.eff(), true);
}

double Moe::forward(const Mat& x, MoeCache& c, Mat& y) const {
    const int N = static_cast<int>(x.rows());
    const int P = ep_.size();
    c.x = x;
    // Router: softmax over experts.
    c.probs.noalias() = x * ps_.w(router);
    for (int n = 0; n < N; ++n) {
        auto r = c.probs.row(n);
        r = (r.array() - r.maxCoeff()).exp();
        r /= r.sum();
    }
    // Top-k choices per token, then slots in capacity order: all first choices before any second choice.
    c.C = capacity(m_, N);
    const int C = c.C;
    c.expert.assign(static_cast<std::size_t>(N) * k_, 0);
    c.slot.assign(c.expert.size(), -1);
    std::vector<int> order(E_);
    for (int n = 0; n < N; ++n) {
        for (int e = 0; e < E_; ++e)
            order[e] = e;
        std::partial_sort(order.begin(), order.begin() + k_, order.end(),
                          [&](int a, int b) { return c.probs(n, a) > c.probs(n, b); });
        for (int j = 0; j < k_; ++j)
            c.expert[n * k_ + j] = order[j];
    }
    std::vector<int> count(E_, 0);
    c.frac.assign(E_, 0.0f);
    for (int j = 0; j < k_; ++j)
        for (int n = 0; n < N; ++n) {
            const int e = c.expert[n * k_ + j];
            c.frac[e] += 1.0f / static_cast<float>(N * k_);
            if (count[e] < C) c.slot[n * k_ + j] = count[e]++;
        }
    // Dispatch: rows e*C + s of the send buffer; the chunk for rank p holds p's experts, contiguous.
    Mat send = Mat::Zero(static_cast<Eigen::Index>(E_) * C, d_);
    for (int n = 0; n < N; ++n)
        for (int j = 0; j < k_; ++j)
            if (const int s = c.slot[n * k_ + j]; s >= 0) send.row(c.expert[n * k_ + j] * C + s) = x.row(n);
    Mat recv(send.rows(), d_);
    ep_.alltoall(send.data(), recv.data(), static_cast<std::size_t>(El_) * C * d_);
    c.recv_counts.assign(static_cast<std::size_t>(P) * El_, 0);
    ep_.alltoall(count.data(), c.recv_counts.data(), El_);
    // Each local expert runs on its padded slots from every source rank: [P*C, d].
    c.experts.resize(El_);
    Mat out(send.rows(), d_);
    for (int le = 0; le < El_; ++le) {
        Mat xin(static_cast<Eigen::Index>(P) * C, d_), yout;
        for (int p = 0; p < P; ++p)
            xin.middleRows(p * C, C) = recv.middleRows((p * El_ + le) * C, C);
        experts[le].forward(xin, c.experts[le], yout);
        for (int p = 0; p < P; ++p)
            out.middleRows((p * El_ + le) * C, C) = yout.middleRows(p * C, C);
    }
    c.yback.resize(send.rows(), d_);
    ep_.alltoall(out.data(), c.yback.data(), static_cast<std::size_t>(El_) * C * d_);
    // Combine: y_n = sum_j gate_nj * expert_e(x_n); dropped choices contribute nothing (the residual carries
    // x).
    y = Mat::Zero(N, d_);
    for (int n = 0; n < N; ++n)
        for (int j = 0; j < k_; ++j)
            if (const int s = c.slot[n * k_ + j]; s >= 0) {
                const int e = c.expert[n * k_ + j];
                y.row(n) += c.probs(n, e) * c.yback.row(e * C + s);
            }
    double aux = 0;
    for (int e = 0; e < E_; ++e)
        aux += c.frac[e] * c.probs.col(e).mean();
    return aux * E_;
}

void Moe::backward(const Mat& dy, MoeCache& c, Mat& dx, float aux_weight) {
    const int N = static_cast<int>(dy.rows());
    const int P = ep_.size();
    const int C = c.C;
    Mat dprobs = Mat::Zero(N, E_);
    Mat dyback = Mat::Zero(static_cast<Eigen::Index>(E_) * C, d_);
    for (int n = 0; n < N; ++n)
        for (int j = 0; j < k_; ++j)
            if (const int s = c.slot[n * k_ + j]; s >= 0) {
                const int e = c.expert[n * k_ + j];
                dprobs(n, e) += dy.row(n).dot(c.yback.row(e * C + s));
                dyback.row(e * C + s) = c.probs(n, e) * dy.row(n);
            }
    Mat drecv(dyback.rows(), d_);
    ep_.alltoall(dyback.data(), drecv.data(), static_cast<std::size_t>(El_) * C * d_);
    Mat dsend(dyback.rows(), d_);
    for (int le = 0; le < El_; ++le) {
        Mat dout(static_cast<Eigen::Index>(P) * C, d_), dxin;
        for (int p = 0; p < P; ++p)
            dout.middleRows(p * C, C) = drecv.middleRows((p * El_ + le) * C, C);
        experts[le].backward(dout, c.experts[le], dxin);
        for (int p = 0; p < P; ++p)
            dsend.middleRows((p * El_ + le) * C, C) = dxin.middleRows(p * C, C);
    }
    Mat ddispatch(dyback.rows(), d_);
    ep_.alltoall(dsend.data(), ddispatch.data(), static_cast<std::size_t>(El_) * C * d_);
    dx = Mat::Zero(N, d_);
    for (int n = 0; n < N; ++n)
        for (int j = 0; j < k_; ++j)
            if (const int s = c.slot[n * k_ + j]; s >= 0)
                dx.row(n) += ddispatch.row(c.expert[n * k_ + j] * C + s);
    // Load-balancing loss: d(E * sum_e f_e * mean_n p_ne)/d p_ne = E * f_e / N (f_e is not differentiable).
    for (int e = 0; e < E_; ++e)
        dprobs.col(e).array() += aux_weight * E_ * c.frac[e] / static_cast<float>(N);
    // Softmax backward, then the router matmul.
    for (int n = 0; n < N; ++n) {
        const float r = dprobs.row(n).dot(c.probs.row(n));
        dprobs.row(n) = (c.probs.row(n).array() * (dprobs.row(n).array() - r)).matrix();
    }
    ps_.g(router).noalias() += c.x.transpose() * dprobs;
    dx.noalias() += dprobs * ps_.w(router).transpose();
}

int Moe::capacity(const ModelConfig& m, int tokens) {
    return static_cast<int>(std::ceil(m.capacity_factor * static_cast<float>(tokens) * m.top_k / m.experts));
}

Footprint Moe::footprint(const ModelConfig& m, int tokens) {
    constexpr double f = sizeof(float);
    const double N = tokens, d = m.d_model, slots = static_cast<double>(m.experts) * capacity(m, tokens);
    // The local experts together run on all E*C padded slots (E/ep experts, each over ep*C rows).
    const Footprint experts = Mlp::footprint(slots, m.d_model, m.eff());
    const double buffers = experts.stored + slots * d * f; // + yback
    Footprint fp;
    // input, router probabilities, routing choices and slots (ints, as wide as floats), experts, yback
    fp.stored = (N * d + N * m.experts + 2 * N * m.top_k) * f + buffers;
    fp.transient = 4 * slots * d * f; // send/receive buffers of the all-to-alls
    fp.dominant_stored = buffers;
    fp.dominant_transient = fp.transient;
    return fp;
}

} // namespace minigpt
