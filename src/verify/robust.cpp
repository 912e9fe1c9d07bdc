#include "verify/robust.hpp"

#include "measure/statistics.hpp"

#include <algorithm>
#include <cmath>
#include <map>

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

Modes doctor_modes(const std::vector<double>& step_s) {
    Modes m;
    auto l = logs(step_s);
    const int n = static_cast<int>(l.size());
    if (n < 4) return m;
    std::sort(l.begin(), l.end());
    int cut = 1; // the slow mode starts at l[cut]
    for (int i = 2; i < n; ++i)
        if (l[i] - l[i - 1] > l[cut] - l[cut - 1]) cut = i;
    const std::vector<double> fast(l.begin(), l.begin() + cut), slow(l.begin() + cut, l.end());
    double ss = 0;
    for (const auto* side : {&fast, &slow}) {
        const double mu = measure::mean(*side);
        for (double x : *side)
            ss += (x - mu) * (x - mu);
    }
    const double within = std::sqrt(ss / (n - 2));
    const double gap = measure::median(slow) - measure::median(fast);
    const double split = l[cut] - l[cut - 1];
    const int h = n / 2 + 1;
    double shortest = l[h - 1] - l[0];
    for (int i = 1; i + h - 1 < n; ++i)
        shortest = std::min(shortest, l[i + h - 1] - l[i]);
    m.core_sd = 0.7413 * shortest;
    if (!(split >= kModeGapSds * within) || !(gap > 0)) return m;
    m.gap = gap;
    m.within_sd = within;
    m.dof = n - 2;
    return m;
}

std::vector<int> arm_modes(const std::vector<double>& log_levels, double min_gap, int unsplit) {
    const int n = static_cast<int>(log_levels.size());
    std::vector<int> out(log_levels.size(), unsplit);
    if (n < 2) return out;
    std::vector<double> x = log_levels;
    std::sort(x.begin(), x.end());
    int cut = 1;
    for (int i = 2; i < n; ++i)
        if (x[i] - x[i - 1] > x[cut] - x[cut - 1]) cut = i;
    if (!(x[cut] - x[cut - 1] >= min_gap)) return out;
    const double threshold = (x[cut] + x[cut - 1]) / 2;
    for (int i = 0; i < n; ++i)
        out[i] = log_levels[i] > threshold ? 1 : 0;
    return out;
}

double pairs_mode_gap(const std::vector<double>& d, double min_gap, const std::vector<bool>& group) {
    if (d.size() < 2 || !(min_gap > 0)) return 0;
    // Each group (a pair's order) on its own: an order effect puts the two orders apart too, and it is no
    // mode. Its widest gap, and the pairs within half that gap on either side of it.
    struct Side {
        double wide = 0, gap = 0;
        std::vector<double> below, above;
    };
    std::vector<Side> sides;
    for (int g : {1, 0}) {
        std::vector<double> x;
        for (std::size_t i = 0; i < d.size(); ++i)
            if (group.size() == d.size() ? static_cast<int>(group[i]) == g : g == 1) x.push_back(d[i]);
        if (x.size() < 2) continue;
        std::sort(x.begin(), x.end());
        std::size_t cut = 1;
        for (std::size_t i = 2; i < x.size(); ++i)
            if (x[i] - x[i - 1] > x[cut] - x[cut - 1]) cut = i;
        Side s;
        s.wide = x[cut] - x[cut - 1];
        if (!(s.wide >= min_gap)) continue;
        for (double v : x)
            if (v <= x[cut - 1] && v >= x[cut - 1] - s.wide / 2)
                s.below.push_back(v);
            else if (v >= x[cut] && v <= x[cut] + s.wide / 2)
                s.above.push_back(v);
        s.gap = measure::median(s.above) - measure::median(s.below);
        sides.push_back(std::move(s));
    }
    // And at least 6 standard deviations of the pairs within the clusters, pooled over the groups (the
    // verification's noise, which the doctor's can understate): a gap that noise made is no mode.
    double ss = 0, gaps = 0;
    std::size_t count = 0, clusters = 0;
    for (const auto& s : sides) {
        for (const auto* side : {&s.below, &s.above}) {
            const double mu = measure::mean(*side);
            for (double v : *side)
                ss += (v - mu) * (v - mu);
            count += side->size();
            ++clusters;
        }
        gaps += s.gap;
    }
    if (sides.empty() || count < clusters + 2) return 0;
    const double within = std::sqrt(ss / static_cast<double>(count - clusters));
    for (const auto& s : sides)
        if (!(s.wide >= 6 * within)) return 0;
    return gaps / static_cast<double>(sides.size());
}

PairModes pair_modes(const std::vector<double>& d, const std::vector<double>& la,
                     const std::vector<double>& lb, const std::vector<std::string>& nodes, double gap) {
    PairModes out;
    const int n = static_cast<int>(d.size());
    if (n == 0 || !(gap > 0)) return out;
    // The reference: the pair with the most others within a quarter gap (the densest cluster's).
    int ref = 0, best = -1;
    for (int i = 0; i < n; ++i) {
        int near = 0;
        for (int j = 0; j < n; ++j)
            near += std::fabs(d[j] - d[i]) <= gap / 4;
        if (near > best) best = near, ref = i;
    }
    std::vector<int> c(n);
    for (int i = 0; i < n; ++i)
        c[i] = static_cast<int>(std::lround((d[i] - d[ref]) / gap));
    out.gap = gap;
    {
        double mc = 0, md = 0;
        for (int i = 0; i < n; ++i)
            mc += c[i], md += d[i];
        mc /= n, md /= n;
        double scc = 0, scd = 0;
        for (int i = 0; i < n; ++i)
            scc += (c[i] - mc) * (c[i] - mc), scd += (c[i] - mc) * (d[i] - md);
        if (scc > 0 && n >= 3) {
            const double slope = scd / scc;
            double ss = 0;
            for (int i = 0; i < n; ++i) {
                const double r = d[i] - md - slope * (c[i] - mc);
                ss += r * r;
            }
            out.gap = slope;
            out.gap_se = std::sqrt(ss / (n - 2) / scc);
            out.measured = true;
        }
    }
    // Each arm's modes, node by node.
    std::vector<int> sa(n, -1), sb(n, -1);
    std::map<std::string, std::vector<int>> by_node;
    for (int i = 0; i < n; ++i)
        by_node[i < static_cast<int>(nodes.size()) ? nodes[i] : std::string()].push_back(i);
    for (const auto& [node, members] : by_node) {
        std::vector<double> xa, xb;
        for (int i : members)
            xa.push_back(la[i]), xb.push_back(lb[i]);
        // Two thirds of a gap: a split that noise and the order effect make is far less likely than at half.
        const auto ma = arm_modes(xa, gap / 2, -1), mb = arm_modes(xb, gap / 2, -1);
        for (std::size_t m = 0; m < members.size(); ++m)
            sa[members[m]] = ma[m], sb[members[m]] = mb[m];
    }
    std::vector<int> votes;
    for (int i = 0; i < n; ++i)
        if (sa[i] >= 0 && sb[i] >= 0) votes.push_back(c[i] - (sa[i] - sb[i]));
    // Every pair's c_i - k must be -1, 0 or 1: k within [max c - 1, min c + 1] (an outlier beyond that is
    // the screen's to set aside).
    const int cmax = *std::max_element(c.begin(), c.end()), cmin = *std::min_element(c.begin(), c.end());
    int lo = cmax - 1, hi = cmin + 1;
    if (lo > hi)
        lo = hi = static_cast<int>(std::lround(measure::median(std::vector<double>(c.begin(), c.end()))));
    // The estimate without votes: the densest cluster (the reference, 0) as the same-mode one, the likeliest
    // while a run is in its usual mode more often than not.
    double k_low = lo, k_high = hi, k_mid = std::clamp(0, lo, hi);
    out.votes = static_cast<int>(votes.size());
    // Votes count when at least two pairs cast them and all agree: one node's split made by noise, not by
    // the modes, would otherwise decide.
    std::sort(votes.begin(), votes.end());
    if (votes.size() >= 2 && votes.front() == votes.back()) {
        k_low = std::clamp(votes.front(), lo, hi);
        k_high = std::clamp(votes.back(), lo, hi);
        k_mid = std::clamp(votes[votes.size() / 2], lo, hi);
    }
    for (int i = 0; i < n; ++i) {
        out.low.push_back(c[i] - k_low);
        out.mid.push_back(c[i] - k_mid);
        out.high.push_back(c[i] - k_high);
    }
    return out;
}

} // namespace infrarsi::verify
