#pragma once
// The agent stage, one part of a campaign (agent_stage.cpp, docs/agent.md): the calls to a site's coding
// agent, its patches stored and scope-checked into the space, its claims as the proposer's priors and its
// calibration. It sees what it needs of its campaign (AgentStage::Context) and asks the rest for what one
// call needs (AgentStage::Host, which the campaign is); the campaign (campaign.hpp) owns it.
#include "agent/protocol.hpp"
#include "campaign/run_options.hpp"
#include "contract/contract.hpp"
#include "model/claim_calibration.hpp"
#include "patch/catalog.hpp"
#include "search/proposer.hpp"
#include "store/campaign_store.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::campaign {

// A patch's measured effect (AgentStage::measured_patch_effect): step-time speed-up and peak-memory factor.
struct AgentPatchEffect {
    double speedup = 1;
    std::optional<double> memory_factor;
    int pairs = 0;
};

struct AgentCalibration {
    model::ClaimCalibration speed, memory;
    int bank_pairs = 0; // of speed's pairs, those the experience bank brought (earlier campaigns)
};
struct AgentPairs {
    std::vector<model::ClaimPair> speed, memory;
};

class AgentStage {
  public:
    // What the agent stage sees of its campaign: the directory its patches and calls are kept in, the
    // contract whose space and the catalog that gain each accepted patch, and the store.
    struct Context {
        std::filesystem::path dir;
        contract::Contract& contract;
        store::CampaignStore& store;
        std::vector<patch::PatchInfo>& catalog;
    };
    // What one call asks of the rest of the campaign.
    class Host {
      public:
        virtual std::filesystem::path baseline_tree() = 0; // the baseline's sandbox, made if need be
        virtual std::vector<store::EquivalenceCheck> failed_equivalence_checks() = 0;
        virtual void say(const RunOptions& o, const std::string& msg) = 0; // an event, for people

      protected:
        ~Host() = default;
    };

    AgentStage(Context c, Host& host) : c_(c), host_(host) {}

    // At open: the accepted patches join the catalog, each checked by its hash. One changed since it was
    // stored is an Error, or (read_only) named in `changed` and left out.
    void load_patches(bool read_only, std::vector<std::string>& changed);
    // A call is owed now and allowed: after the doctor, after each search batch, or (space_exhausted) once
    // when the proposer has no candidate left, while calls and token budget remain.
    bool due(bool space_exhausted = false);
    // Calls the agent when due (`trigger`: after_doctor, after_batch, space_exhausted); the patches accepted.
    int consult(const RunOptions& o, const std::string& trigger);
    // The agent's claims as the proposer's priors (search::PatchFacts::claim, knob_priors), discounted by its
    // calibration so far.
    void fill_priors(search::ProposalContext& ctx);

    // What trials measured of a patch: the median over pairs of trials that differ by it alone.
    std::optional<AgentPatchEffect> measured_patch_effect(const std::string& patch_id);
    // The agent's calibration: its claims against what trials measured, the bank's (earlier campaigns on
    // hardware like this) and this campaign's.
    AgentCalibration calibration();
    AgentPairs own_pairs(); // this campaign's alone

  private:
    struct PatchIntake {
        std::string id;
        bool accepted = false;
        std::string reason;
    };
    std::filesystem::path patch_file(const std::string& id) const;
    nlohmann::json request(int call, const std::string& trigger, const std::filesystem::path& tree,
                           const std::vector<store::EquivalenceCheck>& failed_checks);
    PatchIntake take_patch(const agent::ProposedPatch& p, int call, int index);

    Context c_;
    Host& host_;
};

} // namespace infrarsi::campaign
