#pragma once
// The verification stage, one part of a campaign (verification_stage.cpp): interleaved A/B pairs of the
// search's best candidates against the baseline, block by block until each is decided (verify/sequential.hpp:
// the looks and their level; verify::decide: each look), a promotion re-checked in a fresh allocation, then
// the ablation of each promoted bundle. It sees its Context (the contract, the store, the batch runner, and
// the doctor, equivalence and ablation stages it reads and runs) and asks the rest of the campaign through
// VerificationStage::Host.
#include "campaign/ablation_stage.hpp"
#include "campaign/batch_runner.hpp"
#include "campaign/doctor_stage.hpp"
#include "campaign/equivalence_stage.hpp"
#include "campaign/run_options.hpp"
#include "campaign/wall_plan.hpp"
#include "contract/contract.hpp"
#include "patch/catalog.hpp"
#include "scheduler/scheduler.hpp"
#include "store/campaign_store.hpp"

#include <cstdint>
#include <string>

namespace infrarsi::campaign {

class VerificationStage {
  public:
    struct Context {
        const contract::Contract& contract;
        store::CampaignStore& store;
        BatchRunner& batches;
        DoctorStage& doctor;
        EquivalenceStage& equivalence;
        AblationStage& ablation;
    };
    class Host {
      public:
        virtual scheduler::Scheduler& scheduler(const RunOptions& o) = 0; // whose nodes the pairs spread over
        virtual const patch::PatchInfo* patch_info(const std::string& id) const = 0;
        virtual TrialCostModel trial_cost_model() = 0; // what a trial costs in wall time
        virtual double wall_used_s() = 0;              // of the wall-time budget
        virtual bool stopping(const RunOptions& o) = 0;
        virtual void say(const RunOptions& o, const std::string& msg) = 0;

      protected:
        ~Host() = default;
    };

    // Registers the verification's batch kind with the batch runner.
    VerificationStage(Context c, Host& host);

    // Verifies the search's best candidates (resumable), ablates the promoted bundles and marks the campaign
    // done when it ran to its end.
    void run(const RunOptions& o);

  private:
    // Runs a verification's sequence block by block until its look says otherwise (also after a restart);
    // returns false when stopped.
    bool run_sequence(std::int64_t verification_id, const RunOptions& o);
    // Plans, submits and awaits one block of a verification's sequence: two A/B pairs, one in each order,
    // each pair on one node, spread over the nodes; the re-check's block (recheck = true) on nodes the first
    // stage did not use where the partition has them.
    void run_block(store::VerificationRow& v, bool recheck, const RunOptions& o);
    void finish(std::int64_t verification_id); // a block's look, once its batch is ingested

    Context c_;
    Host& host_;
};

} // namespace infrarsi::campaign
