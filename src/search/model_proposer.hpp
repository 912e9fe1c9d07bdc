#pragma once
// The model-based proposer ("model", the default): model::BatchProposer (runtime GP, censored memory model,
// cost- and noise-aware batch EI) over the space's candidates.
//
// Each call enumerates the space (a uniform sample above `pool_limit`) plus every candidate of the history,
// so that every observation maps to a candidate index, and builds model::Candidates from them:
//   - features: Space::encode;
//   - prior_peak_bytes: the contract's analytic estimate (ProposalContext::memory_estimate). When there is
//     none for some candidate, every candidate gets the same constant (half the memory limit), so the
//     censored model still learns a correction from the OOMs; the reasons say so;
//   - memory_key (see model::Candidate): micro-batch knobs raise memory, recompute knobs (none < selective
//     < full) lower it, patches tagged memory_hungry raise it and memory_saver lower it, gradient
//     accumulation is ignored; every other knob and patch is of unknown effect (memory_unknown): it must
//     match for a dominance claim, and the OOM edge (model/failure_edges.hpp) presumes a change of it saves
//     no memory until a trial shows it does (threads, a BLAS choice);
//   - savers: the same candidate with recompute one step stronger, or with one memory_saver patch added.
// History (every trial marks its candidate as tried):
//   Ok with a step time -> ok (with the measured peak); Ok without one (queued, not yet measured) -> failed;
//   OutOfMemory -> oom at the memory limit;
//   Timeout -> timeout: the step time is at least (time limit - overhead) / steps, censored, or the median
//     of the steps it measured when that is larger;
//   StoppedSlow -> stopped, with the step time its first steps measured;
//   Crash, ContractViolation -> infeasible (the feasibility model), with the step time of its timed steps
//     (not for a Timing or Settings violation, whose step times are not the candidate's); a failure the
//     infrastructure caused (Observation::infrastructure) -> failed, not learned;
//   BuildFailure, NodeFailure, Cancelled -> failed.
// Claims (PatchFacts::claim, ProposalContext::knob_priors; model/claim_prior.hpp): each claimed patch of the
// space and each knob prior whose knob is in the space, at a value other than the baseline's, is one basis
// function of the runtime model (1 for the candidates with that change) whose coefficient's prior is the
// claim; its memory factor multiplies the memory prior of those candidates; the notes list them. Without
// claims, nothing of this is in the models.
// The initial design starts with the baseline's one-knob neighbours
// (model::ProposerSettings::initial_design): every other value of a choice or bool knob, the adjacent values
// of a numeric one, each patch on its own. Candidates whose patch set contains one that failed to build are
// not proposed. Without a memory limit the model cannot weigh OOMs: the call falls back to the simple
// proposer, and says so in the reasons.
#include "model/batch_proposer.hpp"
#include "model/claim_prior.hpp"
#include "search/proposer.hpp"

#include <cstddef>
#include <string>

namespace infrarsi::search {

class ModelProposer : public Proposer {
  public:
    explicit ModelProposer(std::size_t pool_limit = 2000) : pool_limit_(pool_limit) {}
    std::string name() const override { return "model (runtime GP + censored memory model, batch EI)"; }
    std::vector<Proposal> propose(const ProposalContext& context) override;
    std::vector<std::string> notes() const override { return notes_; }
    std::string stop_reason() const override { return stop_reason_; }

  private:
    std::vector<std::string> notes_;
    std::string stop_reason_;
    std::size_t pool_limit_;
    model::BatchProposer model_; // keeps the last hyperparameters as the next fit's start
};

// A change an agent made a claim about: a patch switched on, or a knob at a value.
struct ClaimedChange {
    std::string patch;       // empty for a knob's value
    std::string knob, value; // value as space::to_string writes it
    bool in(const space::Candidate& c) const;
};
struct ClaimedChanges {
    std::vector<ClaimedChange> changes;
    std::vector<model::EffectClaim> claims; // one per change
    std::string describe() const;           // one line for the notes
};
// The claims the models use, in their order: the claimed patches of the space first (as listed), then the
// knob priors whose knob is in the space at a value other than the baseline's; a change claimed twice, the
// first.
ClaimedChanges claimed_changes(const space::Space& space, const std::vector<PatchFacts>& patches,
                               const std::vector<KnobPrior>& knob_priors);

// The model's reading of one trial (see above); `timeout_bound_s` is the least step time a timeout implies
// (0 when unknown).
model::TrialObservation to_model_observation(const Observation& o, double timeout_bound_s);
// The baseline's one-knob neighbours that are in the space and feasible (space::Space::neighbours: a knob
// moved, with the compensating moves a constraint needs, or a patch toggled), one move of each knob and patch
// before a second move of any; of a knob's moves, those that keep the baseline's micro-batch first.
std::vector<space::Candidate> baseline_neighbours(const space::Space& space);

} // namespace infrarsi::search
