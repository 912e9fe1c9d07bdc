#pragma once
// Model-based batch proposals over a finite candidate set: the runtime GP and the censored memory model,
// refitted on every call from all trials (OOMs included), and a cost-aware, noise-aware acquisition.
//
//   a(x) = EI_mde(x) * (1 - P(OOM | x)) * (1 - P(fail | x)) / E[cost(x)]
//
// EI_mde is expected improvement of log step time over the incumbent minus log(1 + MDE): a gain smaller
// than the minimum detectable effect counts as zero, because it could never be promoted. E[cost] mixes a
// full run (overhead + steps x predicted step time), a run into the time limit (its probability from the
// runtime model's predictive distribution) and an OOM that is killed part way (Snoek et al. 2012, "EI per
// second"; Gelbart et al. 2014 for the constraint-weighted EI). P(fail) is the feasibility model's
// (model/feasibility_model.hpp): crashes and broken contracts by region.
//
// Timeouts are right-censored step times: the runtime GP is fitted on the measured ones, each censored one
// is replaced by its expectation above the bound under that fit, E[y | y > c], and the GP is refitted; twice
// (the iterative imputation of Schmee & Hahn 1979, as SMAC does for capped runs: Hutter et al. 2013,
// "Bayesian optimization with censored response data"). A trial stopped early for slowness, a contract
// violation's timed steps and a timeout's first steps are measured step times like any other.
//
// A batch of q distinct candidates is chosen by the kriging believer (Ginsbourger et al. 2010): after each
// pick, the GP is conditioned on a fantasy observation equal to its mean, which shrinks the variance (and
// so the EI) of similar candidates. Hard rules, never relaxed: no candidate already tried, none that OOMed,
// none whose memory key dominates an OOM's (needs at least as much memory on the declared monotone knobs),
// none the feasibility model gives P(fail) >= max_failure_probability (until successes say otherwise).
// When the best-looking candidate is memory-hungry, it is paired with its declared memory-saver variant.
#include "model/candidate.hpp"
#include "model/censored_memory_model.hpp"
#include "model/failure_edges.hpp"
#include "model/feasibility_model.hpp"
#include "model/gaussian_process.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace infrarsi::model {

struct ProposerSettings {
    double memory_limit_bytes = 0;       // per GPU; required
    double noise_variance = 1e-4;        // of log step time for one trial: the doctor's calibration
    double min_detectable_effect = 0.02; // relative speedup the campaign can claim
    double oom_cost_fraction = 0.3;      // an OOM runs this fraction of a full trial before the kill
    double trial_overhead_s = 60;        // start-up per trial (allocation, build cache, init)
    double trial_steps = 20;             // steps per trial
    double time_limit_s = 0;             // a trial's time limit (0: none): a run into it costs the limit
    // Never proposed at or above this P(fail) (feasibility model): more likely to fail than not. Three
    // failures that share a value put the untried candidates with it at about 0.65; two that share a pair,
    // near 0.45 (weighted by 1 - P(fail) in the acquisition, not excluded).
    // The same cap holds for a proposal's P(failure) = 1 - (1 - P(OOM)) (1 - P(fail)) (1 - P(timeout)) once
    // the runtime model is fitted: nothing more likely to fail than not is proposed by acquisition (a
    // memory-hungry candidate paired with its saver is the one exception, up to max_pair_oom).
    double max_failure_probability = 0.5;
    // Below this expected improvement (log step time above the MDE) a candidate has no gain left: the batch
    // is filled with re-measurements of promising candidates measured once, or left short (stop_reason()).
    double min_expected_improvement = 1e-4;
    EdgeSettings edges; // OOM and timeout edges (model/failure_edges.hpp): what they reach is not proposed
    std::vector<int> hints;          // candidate indices to start from (contract hints, experience bank)
    int min_model_points = 3;        // successful trials before the runtime model is trusted
    double pair_oom_threshold = 0.3; // best-looking candidate with P(OOM) above this gets a saver pair
    double max_pair_oom = 0.8;       // ...and is itself proposed only below this
    double initial_max_oom = 0.5;    // initial design avoids candidates above this P(OOM)
    int pool_size = 1500;            // random candidates scored per call (plus neighbours of the best)
    int neighbours = 60;             // nearest untried candidates of each of the best few trials
    int exact_pool = 300;            // candidates given an exact posterior (the rest are bounded)
    std::uint64_t seed = 1;
    GpSettings gp; // noise_variance_floor is overwritten by noise_variance
    MemoryModelSettings memory;
    FeasibilitySettings feasibility;
    // The initial design's first candidates after the hints (the baseline's one-knob neighbours), taken while
    // the runtime model is not fitted; with claims, those with the most claimed gain first.
    std::vector<int> initial_design;
    // Claims as priors (model/claim_prior.hpp): the runtime GP's basis prior, one coefficient per claimed
    // change; every candidate's prior_basis has its size. Empty: no claims, the plain runtime model.
    GpBasisPrior runtime_prior;
};

struct Proposal {
    int candidate = -1;
    std::string reason; // human-readable, for the audit
    double p_oom = 0;
    double p_fail = 0;    // feasibility model
    double p_timeout = 0; // runtime model: P(the run reaches the time limit); 0 in the initial design
    double expected_improvement = 0; // in log step time, above the MDE
    double predicted_step_s = 0;     // 0 in the initial design
};

class BatchProposer {
  public:
    // Up to q distinct candidates (fewer only when fewer are allowed). Throws Error on inconsistent input
    // (index out of range, feature lengths differ, no memory limit).
    std::vector<Proposal> propose(const std::vector<Candidate>& candidates,
                                  const std::vector<TrialObservation>& trials, int q,
                                  const ProposerSettings& s);

    // The models of the last call (for reports and tests). The runtime model is unfitted in the initial
    // design.
    const GaussianProcess& runtime_model() const { return runtime_; }
    const CensoredMemoryModel& memory_model() const { return memory_; }
    const FeasibilityModel& feasibility_model() const { return feasibility_; }
    bool runtime_model_fitted() const { return runtime_fitted_; }
    // Why regions were avoided in the last call (for the audit): one line per reason, empty when none.
    const std::vector<std::string>& notes() const { return notes_; }
    // Why the last call proposed nothing (empty when it proposed something): every untried candidate is
    // excluded, above the failure cap or without expected gain, and no candidate measured once is worth
    // measuring again.
    const std::string& stop_reason() const { return stop_reason_; }

  private:
    GaussianProcess runtime_;
    CensoredMemoryModel memory_;
    FeasibilityModel feasibility_;
    std::vector<std::string> notes_;
    std::string stop_reason_;
    bool runtime_fitted_ = false;
    std::optional<GpHyperparameters> warm_; // last fit, as a start for the next
};

// The steps of BatchProposer::propose, in the order it takes them; each is tested on its own
// (tests/unit/model_proposer_test.cpp).

// The batch being built: which candidates may still be proposed, and the proposals so far.
class BatchDraft {
  public:
    // `excluded`: one flag per candidate (excluded_candidates).
    explicit BatchDraft(std::vector<char> excluded)
        : excluded_(std::move(excluded)), chosen_(excluded_.size()) {}
    bool allowed(int c) const { return !excluded_[c] && !chosen_[c]; }
    void take(Proposal p) {
        chosen_[p.candidate] = 1;
        proposals_.push_back(std::move(p));
    }
    int size() const { return static_cast<int>(proposals_.size()); }
    const std::vector<Proposal>& proposals() const { return proposals_; }

  private:
    std::vector<char> excluded_, chosen_;
    std::vector<Proposal> proposals_;
};

// 1. The hard rules, never relaxed: no candidate already tried (its result is known), none that OOMed, none
// whose memory key dominates an OOM's (memory_dominated).
std::vector<char> excluded_candidates(const std::vector<Candidate>& candidates,
                                      const std::vector<TrialObservation>& trials);

// 2. What the censored memory model learns from: successful trials with a measured peak, and OOMs as
// censored at the limit (peak > limit).
std::vector<MemoryPoint> memory_points(const std::vector<Candidate>& candidates,
                                       const std::vector<TrialObservation>& trials, double limit_bytes);

// 2b. What the runtime model learns from: every measured step time (ok, stopped early, a violation's or a
// timeout's timed steps) and each timeout's bound (censored: the step time is at least that).
struct RuntimePoints {
    Eigen::MatrixXd X;
    Eigen::VectorXd y; // log step time (a lower bound where censored)
    std::vector<bool> censored;
    int distinct_measured = 0; // candidates with at least one measured (uncensored) step time
};
RuntimePoints runtime_points(const std::vector<Candidate>& candidates,
                             const std::vector<TrialObservation>& trials);
// Fits `gp` on the measured points, imputes each censored one by E[y | y > bound] under that fit, and refits
// (`rounds` times). Returns the targets used (the imputed ones in place of the bounds).
Eigen::VectorXd fit_censored_runtime(GaussianProcess& gp, const RuntimePoints& points, const GpSettings& gs,
                                     int rounds = 2);
// 2c. The feasibility model's data: every trial that failed for a reason of its own (infeasible) against
// every one that did not (ok, oom, timeout, stopped). `failed` outcomes teach nothing.
void fit_feasibility(FeasibilityModel& model, const std::vector<Candidate>& candidates,
                     const std::vector<TrialObservation>& trials, const FeasibilitySettings& s);

// 3. The hints (contract, experience bank) first, whatever the phase, up to q.
void add_hints(BatchDraft& batch, const std::vector<int>& hints, const std::function<double(int)>& p_oom,
               int q);

// 4. Before the runtime model is trusted: greedy maximin over a random sample (at most 3000) of the allowed
// candidates the memory model believes fit (P(OOM) <= max_oom; the least risky quarter when none does),
// measured from everything tried or chosen, until the batch has q.
void add_space_filling(BatchDraft& batch, const std::vector<Candidate>& candidates,
                       const std::vector<TrialObservation>& trials, const std::function<double(int)>& p_oom,
                       int q, double max_oom, std::mt19937_64& rng);

// 5. The candidates scored once the runtime model is fitted: the nearest allowed neighbours of the best few
// tried candidates (`best_tried`, best first; s.neighbours each) and their declared savers, then a random
// sample of s.pool_size.
std::vector<int> candidate_pool(const std::vector<Candidate>& candidates, const std::vector<int>& best_tried,
                                const BatchDraft& batch, const ProposerSettings& s, std::mt19937_64& rng);

// 6. A pool larger than s.exact_pool is cut to the s.exact_pool most promising by an upper bound of the
// acquisition (the posterior mean and the prior sd, which bounds the posterior sd) before exact posteriors.
std::vector<int> prescreen_pool(std::vector<int> pool, const std::vector<Candidate>& candidates,
                                const GaussianProcess& runtime, double target,
                                const std::function<double(int)>& p_oom, const ProposerSettings& s);

// What a trial is expected to cost: a full run (`run_s`), cut at the time limit with probability p_timeout,
// or killed part way by an OOM.
double expected_trial_cost(double run_s, double p_oom, double p_timeout, const ProposerSettings& s);
// P(a run reaches the time limit) for log step time ~ N(mean, var): 0 without a limit.
double timeout_probability(double mean, double var, const ProposerSettings& s);

// 7. The pool's posteriors and acquisition, a(x) = EI_mde(x) (1 - P(OOM)) (1 - P(fail)) / E[cost],
// conditioned on each pick by the kriging believer.
class ScoredPool {
  public:
    ScoredPool(const GaussianProcess& runtime, const std::vector<Candidate>& candidates,
               std::function<double(int)> p_oom, double target, const ProposerSettings& s,
               std::function<double(int)> p_fail = {});
    void add(const std::vector<int>& idx); // scores more candidates (savers brought in by pairing)
    std::size_t size() const { return pool_.size(); }
    int candidate(std::size_t i) const { return pool_[i]; }
    std::optional<std::size_t> position(int candidate) const;
    double ei(std::size_t i) const { return ei_[i]; }
    double risk(std::size_t i) const { return risk_[i]; }
    double failure(std::size_t i) const { return fail_[i]; }
    double timeout(std::size_t i) const { return timeout_[i]; }
    double run_cost(std::size_t i) const { return run_cost_[i]; }
    double expected_cost(std::size_t i) const {
        return expected_trial_cost(run_cost_[i], risk_[i], timeout_[i], s_);
    }
    double acquisition(std::size_t i) const {
        return ei_[i] * (1 - risk_[i]) * (1 - fail_[i]) / expected_cost(i);
    }
    // P(the trial fails): an OOM, a failure of its own or a run into the time limit.
    double failure_probability(std::size_t i) const {
        return 1 - (1 - risk_[i]) * (1 - fail_[i]) * (1 - timeout_[i]);
    }
    const ProposerSettings& settings() const { return s_; }
    double predicted_step_s(std::size_t i) const;
    double variance(std::size_t i) const { return post_.variance(i); }
    // Kriging believer: conditions on a fantasy observation at pool item b equal to its posterior mean (means
    // are unchanged; the variance, and so the EI, of similar candidates shrinks).
    void believe(std::size_t b);
    std::string describe(std::size_t i) const; // for the audit
    // Takes pool item i into the batch (reason given) and believes it.
    void take(BatchDraft& batch, std::size_t i, std::string reason);

  private:
    void refresh_ei();
    const GaussianProcess& runtime_;
    const std::vector<Candidate>& candidates_;
    std::function<double(int)> p_oom_, p_fail_;
    double target_;
    const ProposerSettings& s_;
    std::vector<int> pool_;
    std::unordered_map<int, std::size_t> pos_;
    GpPosterior post_;
    std::vector<double> risk_, fail_, timeout_, run_cost_, ei_;
    std::vector<Eigen::VectorXd> fantasy_; // rank-one downdates of the pool's posterior covariance
    Eigen::MatrixXd xpool_;
};

// 8. Pairing: when the best-looking candidate ignoring memory risk (EI per run cost) may not fit (P(OOM) >=
// s.pair_oom_threshold) and declares memory savers, it is taken (below s.max_pair_oom) with the best-scoring
// saver up to two steps away, preferring one that likely fits.
void add_memory_saver_pair(ScoredPool& pool, BatchDraft& batch, const std::vector<Candidate>& candidates,
                           const ProposerSettings& s, int q);

// 9. The rest of the batch by acquisition, believing each pick: only candidates at P(failure) <=
// max_failure_probability with expected improvement >= min_expected_improvement. Returns how many such
// candidates there were (0: no untried candidate has gain left under the cap).
int add_by_acquisition(ScoredPool& pool, BatchDraft& batch, int q);

// 10. When acquisition left the batch short: candidates measured once, successfully, whose posterior mean is
// within the MDE of the incumbent's (they could be the best; one measurement on a noisy host may have caught
// it in a slow mode), best first, each at most once per batch. `mean_of` gives the runtime model's mean of
// log step time of a candidate.
void add_remeasurements(BatchDraft& batch, const std::vector<TrialObservation>& trials,
                        const std::function<double(int)>& mean_of, double incumbent_mean,
                        const ProposerSettings& s, int q);

// Candidates excluded by the hard memory rules: OOMed, or memory key >= an OOMed candidate's key.
std::vector<char> memory_dominated(const std::vector<Candidate>& candidates,
                                   const std::vector<TrialObservation>& trials);

// What the runtime model reads of a candidate: its features, followed by its prior_basis when there are
// claims (GpSettings::basis).
Eigen::VectorXd runtime_features(const Candidate& c);

// Expected improvement below `target` for a Gaussian N(mean, sd^2) (minimization; Jones et al. 1998).
double expected_improvement(double target, double mean, double sd);

} // namespace infrarsi::model
