#pragma once
// The tuners compared by bench_tuners, all behind one ask/tell interface over an Environment.
#include "environment.hpp"
#include "model/batch_proposer.hpp"
#include "pipe_child.hpp"

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

// Ours: the model-based batch proposer, q candidates per job array, seeded with the baseline as a hint.
class ModelTuner : public Tuner {
  public:
    ModelTuner(const Environment& env, int q, std::uint64_t seed);
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

// Optuna's TPE through tests/bench/optuna_adapter.py (ask/tell over a pipe). OOM and other failures are
// reported as failed trials, as Optuna users do; a combination outside the table is also told as failed but
// costs nothing and is not counted as a trial.
class TpeTuner : public Tuner {
  public:
    TpeTuner(const Environment& env, PipeChild& adapter, std::uint64_t seed);
    std::vector<int> ask() override;
    void tell(const model::TrialObservation& t) override;
    int invalid_asks() const override { return invalid_; }

  private:
    const Environment& env_;
    PipeChild& adapter_;
    long number_ = -1;
    int invalid_ = 0;
};

} // namespace infrarsi::bench
