#include "optimizer.hpp"

#include "error.hpp"

#include <algorithm>
#include <cmath>

namespace minigpt {

AdamW::AdamW(ParamStore& ps, const Group& world, const Group& expert_dp, bool zero1, AdamWConfig cfg)
    : ps_(ps), world_(world), expert_dp_(expert_dp), cfg_(cfg) {
    std::size_t state = 0;
    auto add = [&](std::size_t lo, std::size_t hi, const Group* g) {
        Shard s{g, lo, hi, lo, hi, state, {}, {}};
        if (zero1 && g->size() > 1) {
            const std::size_t n = hi - lo, P = g->size(), per = align_up((n + P - 1) / P);
            for (std::size_t r = 0; r < P; ++r) {
                const std::size_t a = std::min(n, r * per), b = std::min(n, (r + 1) * per);
                s.counts.push_back(static_cast<int>(b - a));
                s.displs.push_back(static_cast<int>(lo + a));
            }
            s.begin = lo + std::min(n, g->rank() * per);
            s.end = lo + std::min(n, (g->rank() + 1) * per);
        }
        state += s.end - s.begin;
        shards_.push_back(std::move(s));
    };
    add(0, ps.replicated_count(), &world_);
    add(ps.replicated_count(), ps.count(), &expert_dp_);
    m_.assign(state, 0.0f);
    v_.assign(state, 0.0f);
}

void AdamW::step(int t, float lr) {
    const float bc1 = 1.0f - std::pow(cfg_.beta1, static_cast<float>(t));
    const float bc2 = 1.0f - std::pow(cfg_.beta2, static_cast<float>(t));
    for (const auto& s : shards_) {
        // One tensor at a time and one pass (with a temporary) per elementary operation, like an unfused
        // framework optimizer.
        for (const auto& p : ps_.info) {
            const std::size_t a = std::max(p.offset, s.begin), b = std::min(p.offset + p.size(), s.end);
            if (a >= b) continue;
            const auto n = static_cast<Eigen::Index>(b - a);
            Eigen::Map<Eigen::ArrayXf> w(ps_.data.data() + a, n);
            Eigen::Map<const Eigen::ArrayXf> g(ps_.grad.data() + a, n);
            Eigen::Map<Eigen::ArrayXf> m(m_.data() + s.state + (a - s.begin), n);
            Eigen::Map<Eigen::ArrayXf> v(v_.data() + s.state + (a - s.begin), n);
            m = cfg_.beta1 * m + (1.0f - cfg_.beta1) * g;
            v = cfg_.beta2 * v + (1.0f - cfg_.beta2) * g.square();
            const Eigen::ArrayXf mhat = m / bc1;
            const Eigen::ArrayXf vhat = v / bc2;
            Eigen::ArrayXf update = mhat / (vhat.sqrt() + cfg_.eps);
            if (p.decay) update += cfg_.weight_decay * w;
            w -= lr * update;
        }
    }
    for (const auto& s : shards_)
        if (!s.counts.empty()) s.group->allgatherv_inplace(ps_.data.data(), s.counts, s.displs);
}

} // namespace minigpt
