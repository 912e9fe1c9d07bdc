#pragma once
// Re-verification and promotion rules. A candidate is promoted only if, in interleaved A/B runs against the
// baseline: every run succeeded, the loss invariant holds, its peak memory stays under the limit, it changes
// no math (a patch tagged math_changing is never promoted), and the one-sided lower confidence bound of its
// speed-up exceeds 1 + min_speedup at a level the campaign's error budget sets (verify/sequential.hpp: the
// sequence of looks, and the level of each; docs/orchestrator.md states the rule and its error rates).
#include "contract/contract.hpp"
#include "measure/statistics.hpp"
#include "store/baseline.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::verify {

// Empty when `losses` keeps the loss of `reference` within the contract's tolerance; else a one-line reason.
std::string check_loss(const std::vector<double>& reference, const std::vector<double>& losses,
                       const contract::Invariants& inv);

// loss_mode = "final_eval": the doctor's final evaluation losses, from repeats at different seeds (seed,
// seed + 1, ...). Their spread is how much the final evaluation loss moves for reasons that change nothing
// about the training (which samples a step sees), so it calibrates the tolerance.
struct EvalReference {
    double mean = 0; // over the doctor's runs
    double sd = 0;   // their sample standard deviation
    int runs = 0;
};
EvalReference eval_reference(const std::vector<double>& final_eval_losses);
// The tolerance, absolute: the half-width of the 95% prediction interval of one more run's final evaluation
// loss around the mean (t(runs - 1) * sd * sqrt(1 + 1/runs)); for the difference of two single runs
// (`pair`), t(runs - 1) * sd * sqrt(2). At least invariants.loss_tolerance * |mean| (a deterministic job's
// seeds may agree exactly).
double eval_tolerance(const EvalReference& ref, const contract::Invariants& inv, bool pair = false);
// Empty when `got` (a run's final evaluation loss; nullopt when it printed none) lies within the tolerance
// of `against` (another run's, as a pair) or, without it, of the reference mean; else a one-line reason.
std::string check_eval_loss(const EvalReference& ref, std::optional<double> got,
                            const contract::Invariants& inv, std::optional<double> against = std::nullopt);

// Per-step median over several runs' loss curves (runs may differ in length; the shortest bounds it).
std::vector<double> reference_losses(const std::vector<std::vector<double>>& runs);

struct Arm {
    bool ok = false;   // the run completed with all its step lines
    double step_s = 0; // steady-state median
    // The steady-state per-step times (after warm-up) the median came from; a pair's log-ratio is the
    // Hodges-Lehmann shift of its two runs' log step times (verify/robust.hpp). Empty: step_s alone.
    std::vector<double> step_samples;
    std::vector<double> losses;
    std::optional<double> peak_memory_bytes;
    std::optional<double> eval_loss; // the final evaluation loss, when the job printed one
    std::string node;                // where it ran (Slurm's node list); empty: not known
    bool first = false;              // it ran first in its pair (a pair's order: which arm has it)
    // It ran at the contract's seed, whose reference losses it can be held to; false: its pair had a seed of
    // its own (the campaign draws one per pair), so only the pair's baseline, at that seed, compares.
    bool at_reference_seed = true;
};

// The order a pair's two runs ran in: baseline first (AB) or candidate first (BA).
enum class PairOrder { AB, BA };
const char* to_string(PairOrder o);
PairOrder pair_order(const Arm& baseline, const Arm& candidate); // AB unless the candidate ran first

// Counterbalanced orders for `pairs` pairs: as many AB as BA (one more AB when odd), in a random order drawn
// from `seed` (recorded with the verification), so whatever favours a pair's first or second run cancels in
// the mean and a candidate cannot tell from its position which run it is.
std::vector<PairOrder> counterbalanced_orders(int pairs, std::uint64_t seed);

// Pairs come in blocks of kPairsPerBlock, one AB and one BA (verify/sequential.hpp).
inline constexpr int kPairsPerBlock = 2;

// Where each pair of a sequence runs: node-blocked, the blocks rotating over `nodes`: pair k on group
// (k / kPairsPerBlock) mod G, so a block's pairs (one AB, one BA) share one node and each block moves to the
// next (`per_pair` nodes a pair for a multi-node job, taken as consecutive groups; G groups). Both arms then
// run twice on one node from the first block, which is what tells a bimodal host's modes apart
// (verify::pair_modes): one arm's runs on one node differ by their mode only. Empty when `nodes` has fewer
// than `per_pair` (the scheduler places them; a local backend has one host).
std::vector<std::vector<std::string>> spread_pairs(int pairs, const std::vector<std::string>& nodes,
                                                   int per_pair = 1);

// The threshold and the level of one decision: promote when the one-sided lower confidence bound (error
// `alpha`) of the speed-up exceeds 1 + min_speedup. The upper bound at one-sided error `futility_alpha` below
// 1 + min_speedup says that more pairs would not promote it (a clear loser: the sequence stops).
struct Rule {
    double min_speedup = 0.03;
    double alpha = 0.025;
    double futility_alpha = 0.01;
};

struct Decision {
    bool promoted = false;
    // baseline time / candidate time; lo and hi: one-sided bounds at error rule.alpha each (a 1 - 2 alpha
    // two-sided interval)
    double speedup = 0, lo = 0, hi = 0;
    double upper = 0;     // one-sided upper bound at error rule.futility_alpha
    bool futile = false;  // upper < 1 + min_speedup: more pairs will not promote it
    bool settled = false; // refused for a reason more pairs do not change (a loss, memory, a node, math)
    int pairs = 0;        // pairs counted in the interval (complete, on one node, not set aside)
    int set_aside = 0;    // complete pairs set aside as outliers (verify/robust.hpp: screen_pairs)
    std::vector<std::string> reasons;  // why not (empty when promoted)
    std::vector<std::string> evidence; // what was checked
    double order_effect = 0; // estimated log-ratio of a pair's second run over its first (0: not estimable)
    int nodes = 0;           // distinct nodes the counted pairs ran on
};

// The doctor's noise calibration as prior knowledge of run-to-run noise: the relative spread of the baseline
// runs' medians (a coefficient of variation, taken as the standard deviation of log step time) and its
// degrees of freedom (baseline runs - 1).
struct NoisePrior {
    double cv_between = 0;
    int dof = 0;
    // The same spread, robustly (robust_log_sd: a bimodal host's minority runs do not inflate it); 0: as
    // cv_between. decide() uses it once it has enough pairs to set outliers aside (kMinPairsToScreen).
    double cv_robust = 0;
    // A bimodal doctor (verify::doctor_modes): the gap between its runs' two modes (log) and the spread
    // within a mode (its dof: runs - 2). mode_gap 0: one mode. decide() then takes each pair's runs' modes
    // into account (docs/orchestrator.md, "bimodal hosts").
    double mode_gap = 0, cv_within = 0;
    int within_dof = 0;
    // The spread of the doctor's densest half of runs (verify::Modes::core_sd); 0: not known.
    double cv_core = 0;
};

// The prior verification uses: the doctor's runs' spread of log step times, plain (cv_between; the stored
// one with fewer than 2 runs) and robust (cv_robust), dof = completed runs - 1.
NoisePrior doctor_prior(const store::Baseline& b);
// The same from the runs' step times alone.
NoisePrior doctor_prior(const std::vector<double>& step_s, double fallback_cv = 0);

// The order-adjusted interval: log_ratios[i] = log(baseline / candidate) of pair i, ab[i] whether its
// baseline ran first. Each pair's difference is taken within one node, so a node's speed cancels; the model
// is d_i = mu + delta (AB) or mu - delta (BA), delta the advantage of a pair's second run: mu is the mean of
// the two orders' means and the residual variance is pooled within orders (n - 2 degrees of freedom, plus the
// prior's). Without both orders it is speedup_interval (the caller refuses that design); so it is with one
// pair in each order and no prior (no degree of freedom left: the balanced mean is free of the order effect).
// `delta` gets the order effect's estimate.
measure::Interval order_adjusted_interval(const std::vector<double>& log_ratios, const std::vector<bool>& ab,
                                          const NoisePrior& prior, double level = 0.95,
                                          double* delta = nullptr);
// The same on a bimodal host (docs/orchestrator.md, "bimodal hosts"), with each pair's modes as an offset
// (`offsets`: sA - sB, each -1, 0 or 1, from verify::pair_modes) and its log-ratio as measured, not brought
// back by a gap: d_i = mu + delta o_i + gap s_i + e_i, fitted by least squares (o_i +1 for AB, -1 for BA;
// n - 3 degrees of freedom plus the prior's), so that the gap is measured by the same pairs and its
// uncertainty is in mu's interval rather than a worst-case margin on every pair. nullopt where the pairs
// cannot tell the gap from mu or from the order effect (the offsets all alike, or alike within each order),
// where an offset is not -1, 0 or 1, or with no degree of freedom left: the caller then brings the pairs back
// by a gap it knows and uses order_adjusted_interval.
std::optional<measure::Interval> mode_adjusted_interval(const std::vector<double>& log_ratios,
                                                        const std::vector<bool>& ab,
                                                        const std::vector<double>& offsets,
                                                        const NoisePrior& prior, double level,
                                                        double* delta = nullptr);

// The interval of the mean log speed-up over A/B pairs. Its variance pools the pairs' own spread with the
// doctor's calibration (a pair's log-ratio has variance 2 cv^2 when both arms share the baseline's noise), so
// two consistent pairs are not judged with a one-degree-of-freedom t interval alone. Without a prior (dof 0)
// it is the plain t interval of the pairs.
measure::Interval speedup_interval(const std::vector<double>& log_ratios, const NoisePrior& prior,
                                   double level = 0.95);

// pairs: (baseline run, candidate run); Arm::first says which ran first, Arm::node where. A pair whose two
// runs ran on different nodes is not counted (a node's speed would be credited to the candidate); the pairs
// must have run in both orders (else an order effect cannot be told from the speed-up: not promoted). Each
// pair's log-ratio is robust_pair_log_ratio of its runs' per-step times; pairs far from the others (a run in
// another mode of a bimodal host) are set aside by screen_pairs; the interval is order_adjusted_interval of
// the rest at `rule`'s level. The loss is checked by the contract's mode:
// against reference_loss (per_step, last_k_mean; a candidate arm at_reference_seed only) or eval
// (final_eval), and against the pair's baseline (at the pair's seed) in every mode.
Decision decide(const std::vector<std::pair<Arm, Arm>>& pairs, const std::vector<double>& reference_loss,
                const contract::Contract& c, const Rule& rule, bool math_changing,
                const NoisePrior& noise = {}, const EvalReference& eval = {});

// MFU with one denominator. A trial's MFU as the job prints it divides by a peak the job measured itself
// (minigpt: a short GEMM probe with the trial's own threads and ranks), so candidates are not comparable. The
// campaign uses one peak per hardware (the contract's, or the doctor's, measured once) and the baseline's
// model FLOPs per step for every MFU it reports: at fixed model FLOPs, the MFU ratio is the speed-up.
// A trial's own parts of it: measure::reported_mfu_parts (statistics.hpp).
struct MfuComparison {
    double peak_flops = 0, model_flops_per_step = 0;
    std::string peak_source;
    double baseline_step_s = 0, candidate_step_s = 0; // the candidate's: the baseline's / the speed-up
    double baseline = 0, candidate = 0;               // MFU; above 1 when `unknown` says why
    // Non-empty when a run achieved more model FLOP/s than `peak_flops`: an MFU above 1 is no MFU (the model
    // FLOPs count work the code skips, a causal mask's upper triangle, or the peak was measured low), so the
    // report says unknown for it rather than raise the denominator to what was achieved and print 1.0000.
    std::string unknown;
    bool baseline_known() const { return baseline <= 1; }
    bool candidate_known() const { return candidate <= 1; }
};
// `baseline_step_s`: the verification's baseline step time; `speedup`: its estimate. Both over the one
// `peak_flops` (the MFU ratio is the speed-up); an MFU above 1 is marked unknown (`unknown`).
MfuComparison compare_mfu(double model_flops_per_step, double peak_flops, const std::string& peak_source,
                          double baseline_step_s, double speedup);

// A verification that promoted is final only when a re-check in a fresh allocation (other nodes where the
// partition has them), decided by the same rules, promotes it too. Returns `first` with the outcome: not
// promoted, with the re-check's reasons, when it did not reproduce. The speed-up stays the first's. (The
// campaign's re-check is the next look of the same sequence, over all its pairs: verify/sequential.hpp.)
Decision reproduce(Decision first, const Decision& recheck);

// One MFU denominator per hardware, by precedence: the contract's `[resources] peak_flops`; the node's peak
// from the allocation's calibration record (node::calibration_peak_flops); the peak the job's own probe
// implies (the doctor's median; a per-trial probe, kept only when nothing else exists). `achieved_flops` (the
// baseline's model FLOPs over its step time) above the chosen peak raises it to that, with the source saying
// so. flops 0: none.
struct PeakFlops {
    double flops = 0;
    std::string source;
    bool by_job = false; // the peak the job's own MFU figure implies (its assumption, not a measurement)
};
PeakFlops mfu_denominator(double contract_peak, const std::optional<PeakFlops>& calibration,
                          const std::optional<PeakFlops>& job_reported, double achieved_flops);

} // namespace infrarsi::verify
