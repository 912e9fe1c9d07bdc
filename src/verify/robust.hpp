#pragma once
// The robust parts of verification's estimate (docs/orchestrator.md, "all the samples, robustly"): steps
// within runs, runs within pairs, pairs within nodes.
//  - Steps within a run: a pair's log-ratio is the Hodges-Lehmann shift between its two runs' log per-step
//    times (the median of all differences log a_i - log b_j; Hodges & Lehmann 1963): one stalled step, or
//    a few, moves it no more than a median (breakdown 29% of either run's steps), and for Gaussian step noise
//    it keeps 95% of the mean's efficiency where the difference of medians keeps 64%.
//  - Runs within pairs: a run of one arm that went another way than its pair's other run (a bimodal host:
//    0.74 s/step in one run, 1.0 in the next) makes a pair's log-ratio land far from the others. From
//    kMinPairsToScreen pairs on, screen_pairs sets such pairs aside (3.5 standard deviations from the centre
//    of the pairs' shortest half), in both directions alike, so a bimodal host costs pairs, not bias; the
//    interval is then judged with the doctor's robust spread (robust_log_sd). With fewer pairs an outlier
//    cannot be told from the noise: the doctor's plain spread (which a bimodal host widens) is used.
#include <vector>

namespace infrarsi::verify {

// log(baseline / candidate) of one pair: the Hodges-Lehmann shift of the runs' log per-step times when both
// have at least 3 (and their product at most 250 000; else the log-ratio of their medians); else
// log(baseline_s / candidate_s).
double robust_pair_log_ratio(const std::vector<double>& baseline_steps, double baseline_s,
                             const std::vector<double>& candidate_steps, double candidate_s);

struct Screen {
    std::vector<bool> kept; // per pair
    double center = 0;      // the middle of the pairs' shortest half
    double scale = 0;       // the standard deviation of a pair it implies
};
inline constexpr int kMinPairsToScreen = 6; // fewer: too few to tell an outlier from the noise
// `d`: the pairs' log-ratios (net of the order effect). A pair further than k x scale from the centre of the
// shortest half (the narrowest window holding n/2 + 1 pairs; scale 0.7413 x its length x (1 + 5/(n - 1)),
// the standard deviation for normal pairs, Rousseeuw & Leroy 1987) is set aside: fewer than half of the pairs
// can be. Nothing is set aside with fewer than kMinPairsToScreen pairs, or when a group (`group`: each
// pair's order, AB true) would keep none.
Screen screen_pairs(const std::vector<double>& d, double k = 3.5, const std::vector<bool>& group = {});

// The doctor's run-to-run noise, robustly: 1.4826 x the median absolute deviation of the runs' log step
// times (the standard deviation for normal noise; a bimodal host's minority runs do not inflate it). The
// plain standard deviation with fewer than 3 runs.
double robust_log_sd(const std::vector<double>& step_s);

} // namespace infrarsi::verify
