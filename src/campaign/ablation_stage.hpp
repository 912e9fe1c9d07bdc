#pragma once
// The ablation stage, one part of a campaign (ablation_stage.cpp): each promoted bundle of several changes
// is run again with each change removed in turn, A/B against the bundle as far as the wall-time budget
// allows, so the report and the experience bank say what carries the gain. It sees its Context (the
// contract, the store, the batch runner its batches run through) and asks the rest of the campaign through
// AblationStage::Host.
#include "campaign/batch_runner.hpp"
#include "campaign/run_options.hpp"
#include "campaign/wall_plan.hpp"
#include "contract/contract.hpp"
#include "store/campaign_store.hpp"

#include <cstdint>
#include <string>

namespace infrarsi::campaign {

class AblationStage {
  public:
    struct Context {
        const contract::Contract& contract;
        store::CampaignStore& store;
        BatchRunner& batches;
    };
    class Host {
      public:
        virtual TrialCostModel trial_cost_model() = 0; // what a trial costs in wall time
        virtual double wall_used_s() = 0;              // of the wall-time budget
        virtual bool stopping(const RunOptions& o) = 0;
        virtual void say(const RunOptions& o, const std::string& msg) = 0;

      protected:
        ~Host() = default;
    };

    // Registers the ablation's batch kind with the batch runner.
    AblationStage(Context c, Host& host);

    // Each promoted bundle not ablated yet: its ablation batch planned, run and judged; the result in the
    // verification's detail (store::Ablation).
    void run(const RunOptions& o);

  private:
    void finish(std::int64_t batch_id);

    Context c_;
    Host& host_;
};

} // namespace infrarsi::campaign
