#include "verify/robust.hpp"

#include "measure/statistics.hpp"

#include <algorithm>
#include <cmath>

namespace infrarsi::verify {

namespace {

std::vector<double> logs(const std::vector<double>& xs) {
    std::vector<double> out;
    out.reserve(xs.size());
    for (double x : xs)
        if (x > 0 && std::isfinite(x)) out.push_back(std::log(x));
    return out;
}

double mad_sd(const std::vector<double>& xs, double center) {
    std::vector<double> dev;
    dev.reserve(xs.size());
    for (double x : xs)
        dev.push_back(std::fabs(x - center));
    return 1.4826 * measure::median(dev);
}

} // namespace

double robust_pair_log_ratio(const std::vector<double>& baseline_steps, double baseline_s,
                             const std::vector<double>& candidate_steps, double candidate_s) {
    const auto a = logs(baseline_steps), b = logs(candidate_steps);
    if (a.size() < 3 || b.size() < 3) return std::log(baseline_s / candidate_s);
    if (a.size() * b.size() > 250000) return measure::median(a) - measure::median(b);
    std::vector<double> diffs;
    diffs.reserve(a.size() * b.size());
    for (double x : a)
        for (double y : b)
            diffs.push_back(x - y);
    return measure::median(std::move(diffs));
}

Screen screen_pairs(const std::vector<double>& d, double k, const std::vector<bool>& group) {
    Screen s;
    const int n = static_cast<int>(d.size());
    s.kept.assign(d.size(), true);
    if (n == 0) return s;
    s.center = measure::median(d);
    if (n < kMinPairsToScreen) return s;
    // The shortest half: the narrowest window holding h = n/2 + 1 of the pairs (Rousseeuw's LMS location
    // and scale): it lies in the main mode while that mode holds more than half of the pairs, however far
    // and however many the others are.
    std::vector<double> x = d;
    std::sort(x.begin(), x.end());
    const int h = n / 2 + 1;
    int best = 0;
    for (int i = 1; i + h - 1 < n; ++i)
        if (x[i + h - 1] - x[i] < x[best + h - 1] - x[best]) best = i;
    const double length = x[best + h - 1] - x[best];
    s.center = (x[best] + x[best + h - 1]) / 2;
    // The standard deviation it implies for normal pairs (0.7413 x the length of the shortest half), with
    // Rousseeuw & Leroy's small-sample factor 1 + 5 / (n - 1).
    s.scale = 0.7413 * (1.0 + 5.0 / (n - 1)) * length;
    if (!(s.scale > 0)) return s;
    std::vector<bool> kept(d.size());
    for (int i = 0; i < n; ++i)
        kept[i] = std::fabs(d[i] - s.center) <= k * s.scale;
    // Both groups (a pair's order) must keep a pair: the order effect is estimated from them.
    if (group.size() == d.size())
        for (bool g : {true, false}) {
            bool has = false, kept_one = false;
            for (int i = 0; i < n; ++i)
                if (group[i] == g) has = true, kept_one = kept_one || kept[i];
            if (has && !kept_one) return s;
        }
    s.kept = kept;
    return s;
}

double robust_log_sd(const std::vector<double>& step_s) {
    const auto l = logs(step_s);
    if (l.size() < 3) return l.size() >= 2 ? measure::stddev(l) : 0.0;
    return mad_sd(l, measure::median(l));
}

} // namespace infrarsi::verify
