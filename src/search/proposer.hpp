#pragma once
// The proposer interface: given the space, every trial so far (failures included), the noise floor and q,
// return q distinct untried candidates, each with a reason for the audit. The campaign loop only knows this
// interface; the model-based one (search/model_proposer.hpp) is the default, the simple one below a fallback.
#include "space/space.hpp"
#include "trial/outcome.hpp"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::search {

struct Observation {
    space::Candidate candidate;
    trial::Outcome outcome = trial::Outcome::Ok;
    std::optional<double> step_time_s;       // steady-state median, when measured (a failed trial's too)
    std::optional<double> peak_memory_bytes; // measured peak; for an OOM, the limit (peak > limit)
    double cost_node_s = 0;
    trial::Violation violation = trial::Violation::None; // how a ContractViolation broke the contract
    // The failure was the infrastructure's, not the candidate's (the baseline failed as well in the same
    // batch): not learned by the feasibility model.
    bool infrastructure = false;
};

// An agent's claim about a patch (issue 31): a prior on that patch's effect that trials correct
// (model/claim_prior.hpp says how: a prior on the runtime model's mean, the claimed memory factor on the
// memory model's prior estimate).
struct PatchClaim {
    double speedup = 1;       // claimed step-time factor, baseline / with the patch (> 0)
    double memory_factor = 1; // claimed peak-memory factor with the patch (> 0; 0.8 = saves 20%)
    double confidence = 0.5;  // the agent's, in [0, 1]
    // The campaign's discount from the agent's calibration so far (bank and this campaign): the claim's
    // log effect is multiplied by it before use (1 = taken as said, 0 = ignored).
    double discount = 1;
    // The same for the claimed memory factor (model::ClaimCalibration of the memory pairs).
    double memory_discount = 1;
    // The agent's calibration error so far (model::ClaimCalibration::error: mean |log claimed - log
    // measured|; 0 = unknown): the prior's sd is at least this, whatever the confidence says.
    double calibration_error = 0;
};
struct PatchFacts {
    std::string id;
    std::vector<std::string> tags; // memory_saver, memory_hungry, math_changing, ...
    // The agent's, for a patch an agent wrote; for a catalog's, what its tags claim (tag_claim).
    std::optional<PatchClaim> claim = std::nullopt;
};

// What a catalog's tags claim of a patch: a person who tagged it `speedup` says it is faster, by how much
// unsaid. A weak prior (kTagClaimedSpeedup at confidence 0: sd 0.5 on the log effect, next to nothing once
// the patch has run), so that the search tries such a patch on its best knobs early rather than as one
// unknown among many; none when the tags say it changes the math or is expected not to build (math_changing,
// expected_build_failure), or claim no speed-up.
inline constexpr double kTagClaimedSpeedup = 1.1;
std::optional<PatchClaim> tag_claim(const std::vector<std::string>& tags);
// A claim about a knob's value: its expected effect against the baseline's value.
struct KnobPrior {
    std::string knob;
    std::string value; // as space::to_string writes it
    double speedup = 1;
    double memory_factor = 1;
    double confidence = 0.5;
    double discount = 1;
    double memory_discount = 1;   // as PatchClaim's
    double calibration_error = 0; // as PatchClaim's
};

struct ProposalContext {
    const space::Space* space = nullptr;
    std::vector<PatchFacts> patches;
    std::vector<Observation> history;
    std::optional<double> baseline_step_s;
    double noise_floor = 0.0; // minimum detectable effect (relative): one trial's noise against another's
    // The smallest gain worth a trial: the rule's [verify] min_speedup (0: the noise floor). Verification
    // takes as many pairs as a smaller gain than the MDE needs, so the search aims at what the rule promotes,
    // not at what one trial can tell apart.
    double min_gain = 0.0;
    double memory_limit_bytes = 0;
    // What a trial costs and may take: the contract's time limit (0: none), its steps, and the start-up per
    // trial (campaign::TrialCostModel). A timeout's step time is at least (time_limit_s - overhead) / steps.
    double time_limit_s = 0;
    int trial_steps = 0;
    double trial_overhead_s = 0;
    int q = 1;
    std::uint64_t seed = 1;
    // Analytic peak-memory estimate of a candidate (the contract's estimate command), when available.
    std::function<std::optional<double>(const space::Candidate&)> memory_estimate;
    // Candidates to try first (experience bank and contract hints); the model proposer takes them as hints.
    std::vector<space::Candidate> seeds;
    // Patch sets that failed their equivalence check (campaign/equivalence_stage.cpp): a candidate whose patches
    // include one is never proposed (the patch set changes the math, whatever the knobs).
    std::vector<std::vector<std::string>> excluded_patch_sets;
    // An agent's claims about knob values (issue 31): priors like a patch's claim (PatchFacts::claim).
    std::vector<KnobPrior> knob_priors;
};

// Patch sets known not to work: pairs the catalog declares conflicting (tag conflicts_with=ID), sets that
// failed to build, and non-empty sets whose trial broke the contract (the loss invariant: the patch changes
// the math, and no knob setting changes it back), and the sets given as `excluded` (those that failed their
// equivalence check). Such a set fails inside any larger set too, so a candidate whose patches include one is
// not worth a trial.
// A set that failed to build also names a suspect when all its patches but one are known to build (each was
// part of a set that built): that one is not tried with other patches again. It may still be tried alone,
// since two patches can conflict where neither is broken; once it builds somewhere, it is no longer a
// suspect.
class BuildFailures {
  public:
    BuildFailures(const std::vector<PatchFacts>& patches, const std::vector<Observation>& history,
                  const std::vector<std::vector<std::string>>& excluded = {});
    bool builds(const space::Candidate& candidate) const;

  private:
    std::vector<std::vector<std::string>> failed_; // sorted patch lists, as in Candidate
    std::vector<std::string> suspects_;            // fail with any other patch, not known to fail alone
};

struct Proposal {
    space::Candidate candidate;
    std::string reason;
};

class Proposer {
  public:
    virtual ~Proposer() = default;
    virtual std::string name() const = 0;
    // At most q distinct candidates that are in the space and not in the history, except a re-measurement
    // of a candidate measured once (its reason says so); fewer when the space is exhausted or nothing is
    // worth a trial (stop_reason()).
    virtual std::vector<Proposal> propose(const ProposalContext& context) = 0;
    // Why the last call avoided regions of the space (for the audit): one line each; empty when none.
    virtual std::vector<std::string> notes() const { return {}; }
    // Why the last call proposed nothing although untried candidates remain; empty when it did not stop.
    virtual std::string stop_reason() const { return {}; }
};

// Space-filling (greedy maximin distance in the encoded space) until a candidate succeeds, then the best
// successful candidate's neighbours first, the rest space-filling.
class SimpleProposer : public Proposer {
  public:
    std::string name() const override { return "simple (space-filling, then neighbours of the best)"; }
    std::vector<Proposal> propose(const ProposalContext& context) override;
};

std::unique_ptr<Proposer> make_proposer(const std::string& name); // "model" (default), "simple"

} // namespace infrarsi::search
