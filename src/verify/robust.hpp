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
#include <string>
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

// A bimodal host (docs/orchestrator.md, "bimodal hosts"): each run lands in a fast or a slow mode, `gap`
// apart in log step time, independently of what it runs. A pair whose two runs are in different modes carries
// +-gap on top of the speed-up; one in the same mode does not.
struct Modes {
    double gap = 0;       // log(slow / fast); 0: the runs show one mode
    double within_sd = 0; // the runs' spread within their mode (pooled standard deviation of log step time)
    int dof = 0;          // its degrees of freedom (runs - 2)
    // The spread of the runs' densest half (0.7413 x the length of the narrowest window holding n/2 + 1
    // of the sorted log step times): a run's noise as the larger mode shows it, which the other mode does
    // not inflate (a median absolute deviation of 5 runs split 3/2 is the range of the 3), and which a
    // chance split of one mode's runs does not shrink (the within-mode spread, 3 dof, can be tiny).
    // Computed with 4 runs or more, modes or not.
    double core_sd = 0;
};
// The doctor's runs: split at the widest gap of their sorted log step times; two modes when at least 4 runs
// complete, each side holds one, and the gap is at least kModeGapSds within-mode standard deviations (pooled)
// (a lone stalled run counts as a mode too: it is one, for the pairs' purpose). Two or three runs of one mode
// can agree closely by chance (7.5% of 5 runs with Gaussian noise split so): decide() uses such a gap only
// where it is 6 sqrt(2) of the runs' spread or the pairs show the same gap (verify.hpp). (A further check
// against 4 of the runs' median absolute deviation, which 5 runs split 3/2 inflate to the range of the 3,
// told 72% of 5 runs of the bench's bimodal host against 84% without, and 4.6% of Gaussian ones; dropped.)
inline constexpr double kModeGapSds = 6;
Modes doctor_modes(const std::vector<double>& step_s);

// Each run's mode among runs that differ by nothing else (`log_levels`: each run's log step time; one arm's
// runs on one node): 1 above the widest gap of the sorted levels when that gap is at least `min_gap`, else 0;
// when no gap is that wide (all the runs in one mode, which one unknown), every run gets `unsplit`.
std::vector<int> arm_modes(const std::vector<double>& log_levels, double min_gap, int unsplit);

// Each pair's modes, as sA - sB in {-1, 0, 1} (its log-ratio is mu + gap x (sA - sB) + noise): the pairs'
// log-ratios fall in clusters a gap apart (cluster index c_i, exact while the noise is well under half a
// gap), and which cluster holds the same-mode pairs (k) is told by the pairs whose two runs' modes are both
// known: each arm's runs on one node differ by their mode only (a node's speed is common), so arm_modes of
// them tells each one's mode where that node saw both modes of that arm. Each such pair votes k = c_i -
// (sA - sB). `low`: the smallest k voted (none voted: the smallest any pairing allows), so what the levels
// cannot tell is never credited to the candidate; `high`: the largest (the futility bound's); `mid`: the
// middle vote, or the densest cluster as the same-mode one (the estimate). Each vector holds c_i - k per
// pair; `votes`: pairs that voted. The gap the pairs' own log-ratios show when the doctor saw one mode (all
// its runs in the same one): the widest gap between the sorted log-ratios when it is at least `min_gap`, as
// the distance between the medians of the pairs within half that gap on either side of it; 0 when none is
// that wide.
// `group` (each pair's order, AB true; empty: one group): the gap is looked for within each group, an
// order effect being no mode, and the spread within the clusters pooled over the groups that show one.
double pairs_mode_gap(const std::vector<double>& log_ratios, double min_gap,
                      const std::vector<bool>& group = {});

struct PairModes {
    std::vector<double> low, mid, high;
    int votes = 0;
    // The gap as the pairs measure it (the least-squares slope of their log-ratios on their cluster index,
    // when they fall in more than one cluster) and its standard error; else `gap` and 0.
    double gap = 0, gap_se = 0;
    bool measured = false;
};
PairModes pair_modes(const std::vector<double>& log_ratios, const std::vector<double>& baseline_levels,
                     const std::vector<double>& candidate_levels, const std::vector<std::string>& nodes,
                     double gap);

} // namespace infrarsi::verify
