#include "memory_quality.hpp"

#include "model/censored_memory_model.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace infrarsi::bench {

MemoryQuality memory_quality(const Environment& env, int train, int repetitions, std::uint64_t seed) {
    const double limit = env.memory_limit_bytes();
    const double z90 = 1.6448536269514722; // central 90%
    std::mt19937_64 rng(seed);
    int covered = 0, peaks = 0, runs = 0;
    double brier = 0;
    std::vector<int> order(static_cast<std::size_t>(env.size()));
    const int n_train = std::clamp(train, 1, std::max(1, env.size() - 1));
    for (int rep = 0; rep < repetitions; ++rep) {
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), rng);
        std::vector<model::MemoryPoint> points;
        for (int k = 0; k < n_train; ++k) {
            const int i = order[static_cast<std::size_t>(k)];
            const auto& c = env.candidates()[static_cast<std::size_t>(i)];
            const auto t = env.run(i, rng);
            if (t.outcome == model::ObservationKind::ok && t.peak_bytes > 0)
                points.push_back({c.features, c.prior_peak_bytes, false, t.peak_bytes});
            else if (t.outcome == model::ObservationKind::oom)
                points.push_back({c.features, c.prior_peak_bytes, true, limit});
        }
        model::CensoredMemoryModel m;
        m.fit(points, static_cast<int>(env.candidates().front().features.size()));
        for (std::size_t k = static_cast<std::size_t>(n_train); k < order.size(); ++k) {
            const int i = order[k];
            const auto& c = env.candidates()[static_cast<std::size_t>(i)];
            const auto t = env.run(i, rng);
            if (t.outcome != model::ObservationKind::ok && t.outcome != model::ObservationKind::oom) continue;
            const double p = m.probability_over(c.features, c.prior_peak_bytes, limit);
            const double y = t.outcome == model::ObservationKind::oom ? 1.0 : 0.0;
            brier += (p - y) * (p - y);
            ++runs;
            if (t.outcome == model::ObservationKind::ok && t.peak_bytes > 0) {
                const auto pred = m.predict(c.features, c.prior_peak_bytes);
                const double z = (std::log(t.peak_bytes) - pred.mean_log) / pred.sd_log;
                covered += std::abs(z) <= z90;
                ++peaks;
            }
        }
    }
    return {peaks ? double(covered) / peaks : NAN, runs ? brier / runs : NAN, peaks, runs};
}

} // namespace infrarsi::bench
