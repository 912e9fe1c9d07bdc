#pragma once
// The tuners compared by bench_tuners and bench_transfer, all behind one ask/tell interface over an
// Environment, and the run loop and statistics both benchmarks report.
#include "environment.hpp"
#include "model/batch_proposer.hpp"
#include "pipe_child.hpp"

#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace infrarsi::bench {

class Tuner {
  public:
    virtual ~Tuner() = default;
    // The next batch of candidate indices; empty when the tuner has nothing more to try.
    virtual std::vector<int> ask() = 0;
    virtual void tell(const model::TrialObservation& t) = 0;
    // Asks that named a configuration outside the table (rejected before running, no cost).
    virtual int invalid_asks() const { return 0; }
};

// Ours: the model-based batch proposer, q candidates per job array. `hints` (candidate indices, e.g. the
// experience bank's seeds) go first, then the baseline, which a campaign always measures.
class ModelTuner : public Tuner {
  public:
    ModelTuner(const Environment& env, int q, std::uint64_t seed, std::vector<int> hints = {});
    std::vector<int> ask() override;
    void tell(const model::TrialObservation& t) override { trials_.push_back(t); }

  private:
    const Environment& env_;
    int q_;
    model::ProposerSettings settings_;
    model::BatchProposer proposer_;
    std::vector<model::TrialObservation> trials_;
};

// Uniform sampling without replacement over the table.
class RandomTuner : public Tuner {
  public:
    RandomTuner(const Environment& env, std::uint64_t seed);
    std::vector<int> ask() override;
    void tell(const model::TrialObservation&) override {}

  private:
    std::vector<int> order_;
    size_t next_ = 0;
    std::mt19937_64 rng_;
};

// Greedy coordinate descent from the baseline: one knob (or patch) at a time, every other value, move to
// the best if it is faster by more than the MDE; stop after a full pass without a move. OOMs count as
// infinitely slow; configurations outside the table are skipped.
class GreedyTuner : public Tuner {
  public:
    GreedyTuner(const Environment& env, std::uint64_t seed, double mde = 0.02);
    std::vector<int> ask() override;
    void tell(const model::TrialObservation& t) override;

  private:
    void plan_coordinate();
    const Environment& env_;
    double mde_;
    std::vector<int> coordinates_; // knob indices, then patches offset by the knob count
    size_t position_ = 0;
    int moves_in_pass_ = 0;
    bool planned_ = false;
    model::Configuration current_;
    int current_index_ = -1;
    std::vector<int> pending_;
    std::map<int, double> seen_; // candidate -> log step time (inf for OOM/failure)
    bool done_ = false;
};

// An Optuna sampler through tests/bench/optuna_adapter.py (ask/tell over a pipe), `q` asks per batch like
// ours (the constant liar sees the pending ones). `sampler`: the adapter's name (tpe: OOM a failed trial, as
// the Debian 3.1 peer always ran; tpe-cl and gp: an OOM a completed trial whose constraint is violated; smac:
// a crashed trial). A combination outside the table costs nothing and is not counted as a trial; the adapter
// tells it as a violated constraint where the sampler takes constraints (else as failed). A sampler that says
// it has nothing left to propose (SMAC3 on a small space) ends the run.
class TpeTuner : public Tuner {
  public:
    TpeTuner(const Environment& env, PipeChild& adapter, std::uint64_t seed, std::string sampler = "tpe",
             int q = 1);
    std::vector<int> ask() override;
    void tell(const model::TrialObservation& t) override;
    int invalid_asks() const override { return invalid_; }

  private:
    const Environment& env_;
    PipeChild& adapter_;
    std::string sampler_;
    int q_;
    std::vector<long> pending_; // trial numbers asked, in the order their results will be told
    int invalid_ = 0;
};

// How one run of a tuner went. A run counts trials until a configuration within 5% of the environment's
// best feasible one has run (to_5pct), and goes on to fixed_budget trials so that the best found there can
// be read; it ends at search_limit trials, or when the tuner has nothing more to ask. Trials, OOMs and cost
// are counted within `budget`.
struct RunLimits {
    int budget = 0;       // trials counted in trials/ooms/cost_s
    int fixed_budget = 0; // trials at which best_at_fixed is read (0: stop as soon as 5% is reached)
    int search_limit = 0; // trials at most
};
struct RunResult {
    int to_5pct = 0; // trials until within 5% (0: not within search_limit)
    int trials = 0, ooms = 0, crashes = 0, timeouts = 0, invalid = 0; // crashes: every other failure
    double cost_s = 0, cost_to_5pct_s = 0;
    double wasted_s = 0; // cost of the trials that did not succeed (within the budget)
    double best_at_fixed = std::numeric_limits<double>::infinity(); // true time of the best ok configuration
    std::vector<model::TrialObservation> history;                   // every trial run, in order
};
// The environment's draws depend only on `seed`, so every tuner sees the same ones.
RunResult run(const Environment& env, Tuner& tuner, const RunLimits& limits, std::uint64_t seed);

// Linear interpolation between order statistics; NaN for no values.
double quantile(std::vector<double> v, double q);

// Trials to 5% over the runs of one tuner: a run that did not get there counts as limit + 1.
struct TrialsToTarget {
    int reached = 0, runs = 0, limit = 0;
    double median = 0, q25 = 0, q75 = 0;
    double oom_fraction = 0; // OOM trials over all trials of the runs (within their budget)
    double crash_fraction = 0, timeout_fraction = 0;
};
TrialsToTarget trials_to_target(const std::vector<RunResult>& runs, int limit);
// "12", or ">100" for a value past the limit.
std::string trials_text(double v, int limit);
// "12 [8-20]": median and quartiles.
std::string trials_text(const TrialsToTarget& t);

} // namespace infrarsi::bench
