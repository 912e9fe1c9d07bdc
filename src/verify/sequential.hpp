#pragma once
// The sequence of looks a candidate's verification takes (docs/orchestrator.md, "the rule and its error
// rates"). Pairs come in blocks of two, one in each order (AB and BA), each pair on one node; after each
// block the candidate is judged over all its pairs so far (verify::decide):
//  - the one-sided lower bound of the speed-up above 1 + min_speedup: promising; the sequence then goes on in
//    a fresh allocation (other nodes: the re-check), block by block, and the candidate is promoted at the
//    first of those looks, over all the pairs, whose lower bound is above it again while the fresh blocks'
//    own estimate is a speed-up (above 1);
//  - a reason more pairs do not change (a loss, memory, a node, math_changing), or the one-sided 95% upper
//    bound below 1 + min_speedup (a clear loser), or no room for another block (max_pairs, the wall-time
//    budget): stop, not promoted;
//  - else another block.
// Error control: the campaign's `alpha` is split Bonferroni over its `verify_top` candidates, and each
// candidate's share is spent over the looks its sequence can take (K = max_pairs / 2, the re-check's
// included), in proportion to the look's number: look k (after 2k pairs) has one-sided error
// alpha / verify_top * k / (K (K + 1) / 2), little where two pairs can only show a large gain, most where the
// pairs can show a small one. The looks' errors sum to the candidate's share, so whatever the data do, the
// chance that some look of some candidate whose true speed-up is at most 1 + min_speedup crosses is at most
// alpha (a union bound: always valid, however the sequence stops; requiring a second crossing in the fresh
// allocation only lowers it, as stopping a loser does).
#include "contract/contract.hpp"
#include "verify/verify.hpp"

#include <string>

namespace infrarsi::verify {

struct Design {
    static constexpr int kBlock = kPairsPerBlock; // pairs a block: one AB, one BA, on one node
    // A look whose one-sided upper bound at this error lies under 1 + min_speedup stops the sequence (a
    // clear loser). It cannot raise the false promotions (it only stops), and it costs a true 1.10x little.
    static constexpr double kFutilityAlpha = 0.05;
    double min_speedup = 0.03;
    double alpha = 0.01;                // the campaign's, one-sided, over every candidate and look
    int candidates = 2;                 // verify_top
    int max_pairs = 24;                 // the re-check's block included
    int looks() const;                  // max_pairs / kBlock, at least 2
    int first_stage_pairs() const;      // max_pairs less the re-check's block
    double look_alpha(int pairs) const; // the error of the look over `pairs` pairs
    Rule rule(int pairs) const;
    // The pairs a candidate `speedup` faster is expected to take to be promoted, re-check included, where a
    // run's log step time has standard deviation `run_log_sd` (the doctor's noise): the first look whose
    // lower bound at that noise clears 1 + min_speedup, plus the re-check's block; max_pairs when none does
    // (or the speed-up is not above 1 + min_speedup). What the search reserves wall time for: the MDE plans
    // the pairs, the rule alone decides.
    int planned_pairs(double run_log_sd, double speedup) const;
};
// From the contract's [verify] (min_speedup, alpha, max_pairs) and [repeats] verify_top.
Design design(const contract::Contract& c);

enum class Next {
    More,     // another block
    Recheck,  // promising: the re-check's block in a fresh allocation
    Stop,     // decided: not promoted
    Promoted, // the re-check's look crossed too
};
const char* to_string(Next n);

// After a first-stage look over `pairs_so_far` pairs; `room`: whether the wall-time budget has room for
// another block.
Next after_look(const Design& s, const Decision& d, int pairs_so_far, bool room);
// After a look of the re-check: `all` over every pair, `fresh_estimate` the re-check blocks' own speed-up
// estimate. Promoted, another block in the fresh allocation (More), or Stop.
Next after_recheck(const Design& s, const Decision& all, double fresh_estimate, int pairs_so_far, bool room);

// The orders of a block's pairs: one AB and one BA, which comes first drawn from `seed` (recorded).
std::vector<PairOrder> block_orders(std::uint64_t seed);

// A look as people read it: "1.811x [0.000, inf]". A bound beyond 1e6 (a look over 2 pairs at a small alpha
// has a t quantile in the thousands) or not finite reads as inf or 0.
std::string look_text(double estimate, double lo, double hi);

} // namespace infrarsi::verify
