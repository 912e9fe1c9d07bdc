#pragma once
// Where a benchmark trial comes from: the 3D-parallel simulator, or a recorded table replayed by drawing
// one of its measured repeats. Every tuner sees the same candidates and the same draws for a seed.
#include "model/candidate.hpp"
#include "model/features.hpp"
#include "training_simulator.hpp"

#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace infrarsi::bench {

class Environment {
  public:
    virtual ~Environment() = default;
    virtual std::string name() const = 0;
    virtual const model::FeatureEncoding& encoding() const = 0;
    virtual const std::vector<model::Candidate>& candidates() const = 0;
    virtual model::Configuration configuration(int i) const = 0;
    virtual model::TrialObservation run(int i, std::mt19937_64& rng) const = 0;
    virtual double true_step_time(int i) const = 0; // mean (simulator) or median of repeats (table)
    virtual bool feasible(int i) const = 0;
    virtual int baseline() const = 0;
    virtual double memory_limit_bytes() const = 0;
    virtual double noise_variance() const = 0;
    virtual double trial_steps() const = 0;
    virtual double startup_s() const = 0;
    // Whether candidates' prior_peak_bytes are an analytic estimate (else one constant for all, as a
    // campaign without a memory estimate has: half the limit).
    virtual bool analytic_prior() const { return true; }

    int size() const { return static_cast<int>(candidates().size()); }
    // Index of a configuration, or -1 when it is not in the table (an invalid combination).
    int find(const model::Configuration& c) const;
    double best_feasible_time() const;

  protected:
    void index_configurations();

  private:
    std::unordered_map<std::string, int> by_id_;
};

class SimulatorEnvironment : public Environment {
  public:
    explicit SimulatorEnvironment(model::SimulatorSpec spec);
    std::string name() const override { return sim_.spec().name; }
    const model::FeatureEncoding& encoding() const override { return sim_.encoding(); }
    const std::vector<model::Candidate>& candidates() const override { return sim_.candidates(); }
    model::Configuration configuration(int i) const override { return sim_.configuration(i); }
    model::TrialObservation run(int i, std::mt19937_64& rng) const override { return sim_.run(i, rng); }
    double true_step_time(int i) const override { return sim_.true_step_time(i); }
    bool feasible(int i) const override { return sim_.fits(i); }
    int baseline() const override { return sim_.baseline(); }
    double memory_limit_bytes() const override { return sim_.spec().memory_limit_bytes; }
    double noise_variance() const override { return sim_.noise_variance(); }
    double trial_steps() const override { return sim_.spec().trial_steps; }
    double startup_s() const override { return sim_.spec().startup_s; }
    const model::TrainingSimulator& simulator() const { return sim_; }

  private:
    model::TrainingSimulator sim_;
};

// A measured table (format: tests/bench/tables/README.md).
class RecordedTableEnvironment : public Environment {
  public:
    explicit RecordedTableEnvironment(const std::string& path);
    std::string name() const override { return name_; }
    const model::FeatureEncoding& encoding() const override { return *encoding_; }
    const std::vector<model::Candidate>& candidates() const override { return candidates_; }
    model::Configuration configuration(int i) const override { return configs_.at(i); }
    model::TrialObservation run(int i, std::mt19937_64& rng) const override;
    double true_step_time(int i) const override { return true_time_[i]; }
    bool feasible(int i) const override { return feasible_[i]; }
    int baseline() const override { return baseline_; }
    double memory_limit_bytes() const override { return limit_; }
    double noise_variance() const override { return noise_variance_; }
    double trial_steps() const override { return steps_; }
    double startup_s() const override { return startup_; }
    bool analytic_prior() const override { return analytic_prior_; }

  private:
    std::string name_;
    bool analytic_prior_ = true;
    std::unique_ptr<model::FeatureEncoding> encoding_;
    std::vector<model::Configuration> configs_;
    std::vector<model::Candidate> candidates_;
    std::vector<std::vector<model::TrialObservation>> repeats_;
    std::vector<double> true_time_;
    std::vector<char> feasible_;
    int baseline_ = -1;
    double limit_ = 0, noise_variance_ = 0, steps_ = 0, startup_ = 0;
};

// The memory prior a campaign might have instead of the environment's own: none (one constant, half the
// limit, as a campaign without an estimate has), or the estimate halved or doubled (a systematic error).
// Everything else is the wrapped environment's, so runs draw the same outcomes.
enum class PriorVariant { given, none, half, twice };
std::string prior_variant_name(PriorVariant v); // given, none, half, double

class PriorVariantEnvironment : public Environment {
  public:
    PriorVariantEnvironment(const Environment& env, PriorVariant variant);
    std::string name() const override { return env_.name(); }
    const model::FeatureEncoding& encoding() const override { return env_.encoding(); }
    const std::vector<model::Candidate>& candidates() const override { return candidates_; }
    model::Configuration configuration(int i) const override { return env_.configuration(i); }
    model::TrialObservation run(int i, std::mt19937_64& rng) const override { return env_.run(i, rng); }
    double true_step_time(int i) const override { return env_.true_step_time(i); }
    bool feasible(int i) const override { return env_.feasible(i); }
    int baseline() const override { return env_.baseline(); }
    double memory_limit_bytes() const override { return env_.memory_limit_bytes(); }
    double noise_variance() const override { return env_.noise_variance(); }
    double trial_steps() const override { return env_.trial_steps(); }
    double startup_s() const override { return env_.startup_s(); }
    bool analytic_prior() const override { return variant_ != PriorVariant::none && env_.analytic_prior(); }

  private:
    const Environment& env_;
    PriorVariant variant_;
    std::vector<model::Candidate> candidates_;
};

// Writes an environment as a table with `repeats` draws per configuration (to exercise the format; a
// simulated table is never committed as a recorded one).
void write_table(const Environment& env, const std::string& path, int repeats, std::uint64_t seed);

} // namespace infrarsi::bench
