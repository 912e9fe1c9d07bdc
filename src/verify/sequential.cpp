#include "verify/sequential.hpp"

#include "measure/statistics.hpp"
#include "util/enum_names.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

namespace infrarsi::verify {

int Design::looks() const {
    return std::max(2, max_pairs / kBlock);
}

int Design::first_stage_pairs() const {
    return (looks() - 1) * kBlock;
}

double Design::look_alpha(int pairs) const {
    const int k = std::clamp((pairs + kBlock - 1) / kBlock, 1, looks());
    const double total = looks() * (looks() + 1) / 2.0;
    return alpha / std::max(1, candidates) * k / total;
}

Rule Design::rule(int pairs) const {
    Rule r;
    r.min_speedup = min_speedup;
    r.alpha = look_alpha(pairs);
    r.futility_alpha = kFutilityAlpha;
    return r;
}

int Design::planned_pairs(double run_log_sd, double speedup) const {
    const double margin = std::log(speedup) - std::log1p(min_speedup);
    if (!(margin > 0) || !std::isfinite(margin) || !(run_log_sd >= 0)) return max_pairs;
    for (int n = kBlock; n <= first_stage_pairs(); n += kBlock) {
        // A pair's log-ratio carries two runs' noise.
        const double se = std::sqrt(2.0) * run_log_sd / std::sqrt(static_cast<double>(n));
        if (margin - measure::normal_quantile(1 - look_alpha(n)) * se > 0)
            return std::min(max_pairs, n + kBlock);
    }
    return max_pairs;
}

Design design(const contract::Contract& c) {
    Design s;
    s.min_speedup = c.verify.min_speedup;
    s.alpha = c.verify.alpha;
    s.candidates = std::max(1, c.repeats.verify_top);
    s.max_pairs = c.verify.max_pairs;
    return s;
}

namespace {
constexpr util::EnumNames<Next, 4> next_names{{{
    {Next::More, "more"},
    {Next::Recheck, "recheck"},
    {Next::Stop, "stop"},
    {Next::Promoted, "promoted"},
}}};
} // namespace

const char* to_string(Next n) {
    return next_names.name(n).data(); // a literal of the table: NUL-terminated
}

Next after_look(const Design& s, const Decision& d, int pairs_so_far, bool room) {
    if (d.settled) return Next::Stop;
    if (d.promoted) return Next::Recheck;
    if (d.futile) return Next::Stop;
    if (!room || pairs_so_far + Design::kBlock > s.first_stage_pairs()) return Next::Stop;
    return Next::More;
}

Next after_recheck(const Design& s, const Decision& all, double fresh_estimate, int pairs_so_far, bool room) {
    if (all.settled) return Next::Stop;
    if (all.promoted && fresh_estimate > 1.0) return Next::Promoted;
    if (all.futile) return Next::Stop;
    if (!room || pairs_so_far + Design::kBlock > s.max_pairs) return Next::Stop;
    return Next::More;
}

std::vector<PairOrder> block_orders(std::uint64_t seed) {
    return counterbalanced_orders(Design::kBlock, seed);
}

std::string look_text(double estimate, double lo, double hi) {
    auto bound = [](double x) {
        if (std::isnan(x)) return std::string("?");
        if (!(x < 1e6)) return std::string("inf");
        return fmt::format("{:.3f}", std::max(x, 0.0));
    };
    return fmt::format("{}x [{}, {}]", bound(estimate), bound(lo), bound(hi));
}

} // namespace infrarsi::verify
