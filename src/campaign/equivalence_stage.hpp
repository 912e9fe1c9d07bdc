#pragma once
// The equivalence stage, one part of a campaign (equivalence_stage.cpp): a candidate's patch set against the
// same knobs without it at a fresh seed before the candidate is verified, the spot checks of its A/B pairs,
// and the record of every patch set that is not the same math (never promoted, never proposed again). It sees
// its Context (the contract, the store, the batch runner its batches run through) and asks the rest of the
// campaign through EquivalenceStage::Host.
#include "campaign/batch_runner.hpp"
#include "campaign/run_options.hpp"
#include "campaign/wall_plan.hpp"
#include "contract/contract.hpp"
#include "patch/catalog.hpp"
#include "space/space.hpp"
#include "store/campaign_store.hpp"
#include "verify/verify.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace infrarsi::campaign {

// Whether a trial can be given a seed other than the contract's ([invariants] seed_env or seed_arg).
bool can_seed(const contract::Contract& c);
// A random seed none of `used` nor the doctor's (contract seed, seed + 1, ...) (equivalence checks, A/B
// pairs): no logged loss at it exists to copy.
long long fresh_seed(const contract::Contract& c, const std::set<long long>& used);

// The knob settings (no patches) from `c`'s knobs toward the baseline's, where a patch set's equivalence is
// checked when the candidate's own knobs do not fit without it (EquivalenceStage::site_for): each knob at the
// candidate's value, the baseline's, or (numeric and recompute knobs) one between; the feasible ones, `c`'s
// own first, then nearest first. The distance counts each knob's steps, weighted by what it does to memory:
// a micro-batch or recompute knob is what makes room (1 a step), gradient accumulation only compensates (0),
// any other knob (ranks, threads: what the candidate is about) 2 a step. Beyond 4096 settings: `c`'s knobs
// and the baseline's.
std::vector<space::Candidate> settings_toward_baseline(const space::Space& s, const space::Candidate& c);

class EquivalenceStage {
  public:
    struct Context {
        const contract::Contract& contract;
        store::CampaignStore& store;
        BatchRunner& batches;
    };
    class Host {
      public:
        virtual std::optional<double> memory_estimate(const space::Candidate& c) = 0; // the analytic one
        virtual const patch::PatchInfo* patch_info(const std::string& id) const = 0;
        virtual TrialCostModel trial_cost_model() = 0; // what a trial costs in wall time
        virtual double wall_used_s() = 0;              // of the wall-time budget
        virtual bool stopping(const RunOptions& o) = 0;
        virtual void say(const RunOptions& o, const std::string& msg) = 0;

      protected:
        ~Host() = default;
    };

    // Registers the equivalence check's batch kind with the batch runner.
    EquivalenceStage(Context c, Host& host);

    // The record of the check of a candidate's patch set apart from knobs (docs/orchestrator.md,
    // "Equivalence"): a stored one, a failed one of a patch set it contains, or nullopt when there is none
    // yet; run runs it (one batch: the patch set, then the same knobs without it, at one fresh seed) and
    // returns its record (nullopt when stopped).
    std::optional<store::EquivalenceCheck> record(const space::Candidate& c);
    std::optional<store::EquivalenceCheck> run(const space::Candidate& c, const RunOptions& o);
    std::vector<store::EquivalenceCheck> failed_checks();              // the failed checks' records
    std::vector<std::vector<std::string>> not_equivalent_patch_sets(); // every failed check's patch set

    // The spot check of one verification stage (verification_stage.cpp): plan_spot_check draws one of the
    // stage's pairs (`plan`, placed by `pair_args`) and appends its runs to `tasks` (the candidate's knobs
    // without its patches at that pair's seed; where the equivalence check had to move its knobs, the patch
    // set and the same knobs without it there), returning its record (none without patches); judge_spot_check
    // records the verdict in `spot` and in the decision (a failure: never promoted, never proposed again).
    std::optional<store::SpotCheck> plan_spot_check(const space::Candidate& cand,
                                                    std::int64_t verification_id,
                                                    const std::vector<store::PlannedPair>& plan,
                                                    const std::vector<std::vector<std::string>>& pair_args,
                                                    std::vector<Task>& tasks,
                                                    std::vector<TaskPlacement>& where);
    void judge_spot_check(store::SpotCheck& spot, std::int64_t batch_id, const space::Candidate& cand,
                          const std::optional<store::TrialRow>& twin,
                          const std::vector<store::TrialRow>& candidate_runs, verify::Decision& d,
                          store::VerificationRow& v);

    // Whether the seeds this campaign gives reach the job: empty while nothing says otherwise, else why not
    // (the contract gives none, or runs of the same settings at three seeds or more printed the same losses:
    // the job ignores its seed). Then every check "at a fresh seed" ran at one seed in effect, and a patch
    // that replays an earlier run's losses is not excluded by seeds.
    std::string seeds_not_reaching_job();

  private:
    void finish(std::int64_t batch_id);
    // Where a patch set's equivalence is checked: the candidate's knobs without its patches where they fit in
    // memory, else the nearest setting toward the baseline's knobs that fits (known from a run of it, or the
    // censored memory model's P(out of memory) <= 0.25; the baseline's own always does), skipping settings
    // in `ran_out` (earlier runs of this check there ran out of memory). `why` says why it moved.
    struct Site {
        space::Candidate knobs; // no patches
        bool moved = false;     // not the candidate's own knobs
        std::string why;
    };
    Site site_for(const space::Candidate& c, const std::set<std::string>& ran_out);
    // P(out of memory) of each candidate from the campaign's finished runs (model::CensoredMemoryModel fitted
    // as the search fits it); 0 for all without a memory limit.
    std::vector<double> oom_probabilities(const std::vector<space::Candidate>& cands);
    // Once seeds_not_reaching_job() says the job ignores its seed, no record keeps claiming a fresh one: the
    // stored equivalence checks and the verifications' copies and spot checks (`current`: the one being
    // finished, changed in place) say they ran at one seed.
    void retract_seed_claims(store::VerificationRow* current);
    // The verdict of a patch set's run against the same knobs without it at one seed: state passed, failed
    // or incomplete (a run that did not complete says nothing about the math), the compared values and the
    // trial ids; a failed patch set run gets the typed violation not_equivalent.
    nlohmann::json judge(const std::optional<store::TrialRow>& base,
                         const std::optional<store::TrialRow>& cand, double tolerance);
    // [invariants] equivalence_tolerance, or loss_tolerance where a patch is tagged math_changing (said in
    // *math_changing).
    double tolerance_for(const space::Candidate& c, bool* math_changing = nullptr) const;
    // A patch set that failed a spot check is recorded as a failed equivalence check: never promoted, never
    // proposed again.
    void record_not_equivalent(const space::Candidate& c, const nlohmann::json& check);

    Context c_;
    Host& host_;
};

} // namespace infrarsi::campaign
