#include "verify/sequential.hpp"

#include <algorithm>

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

Design design(const contract::Contract& c) {
    Design s;
    s.min_speedup = c.verify.min_speedup;
    s.alpha = c.verify.alpha;
    s.candidates = std::max(1, c.repeats.verify_top);
    s.max_pairs = c.verify.max_pairs;
    return s;
}

const char* to_string(Next n) {
    switch (n) {
    case Next::More:
        return "more";
    case Next::Recheck:
        return "recheck";
    case Next::Stop:
        return "stop";
    case Next::Promoted:
        return "promoted";
    }
    return "stop";
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

} // namespace infrarsi::verify
