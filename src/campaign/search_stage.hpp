#pragma once
// The search stage, one part of a campaign (search_stage.cpp): batches of proposed candidates, each with its
// control, until the trial, node-hour or wall-time budget ends (leaving verification its wall time), with the
// agent's patches and priors between batches. It sees its Context (the contract, the store, the catalog, the
// batch runner, and the doctor, equivalence and agent stages it reads and consults) and asks the rest of the
// campaign through SearchStage::Host.
#include "campaign/agent_stage.hpp"
#include "campaign/batch_runner.hpp"
#include "campaign/doctor_stage.hpp"
#include "campaign/equivalence_stage.hpp"
#include "campaign/run_options.hpp"
#include "campaign/wall_plan.hpp"
#include "contract/contract.hpp"
#include "patch/catalog.hpp"
#include "store/campaign_store.hpp"
#include "trial/manifest.hpp"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::campaign {

// The early stop of search trials: slower than the incumbent's step time by more than max(MDE,
// kMinStopMargin) over the median of the first max(3, timed / 4) timed steps after the warm-up (timed = steps
// - warmup_steps). None when that would save too little (fewer than half the timed steps left) or there is
// no incumbent. The floor: the MDE is the noise of whole runs' means, and a few steps of two runs side by
// side are noisier; a candidate within 10% of the incumbent is worth its full measurement.
inline constexpr double kMinStopMargin = 0.10;
std::optional<trial::ManifestTask::SlowStop> slow_stop_rule(double incumbent_step_s, double mde, int steps,
                                                            int warmup_steps);

class SearchStage {
  public:
    struct Context {
        const contract::Contract& contract; // its space gains the agent's accepted patches
        store::CampaignStore& store;
        const std::vector<patch::PatchInfo>& catalog;
        BatchRunner& batches;
        DoctorStage& doctor;
        EquivalenceStage& equivalence;
        AgentStage& agent;
    };
    class Host {
      public:
        virtual BudgetUse budget_use() = 0;
        virtual std::optional<double> memory_estimate(const space::Candidate& c) = 0; // the analytic one
        virtual TrialCostModel trial_cost_model() = 0; // what a trial costs in wall time
        virtual bool stopping(const RunOptions& o) = 0;
        virtual void say(const RunOptions& o, const std::string& msg) = 0;

      protected:
        ~Host() = default;
    };

    // Registers the search's batch kind with the batch runner: concurrent, its control beside a candidate
    // that built, its trials stopped early against the control, the control ratios recorded.
    SearchStage(Context c, Host& host);

    void run(const RunOptions& o); // batches until the budget ends; resumable

  private:
    // slow_stop_rule for the next batch: relative to its control, whose log is `control_log` (empty: none,
    // the incumbent's absolute step time).
    std::optional<trial::ManifestTask::SlowStop> slow_stop(const std::filesystem::path& control_log);
    // Each search trial's step time over its batch's control's (or the controls' median where that control
    // was a fluke: control_levels), kept in its measurements (control_ratio); every batch's again, as the
    // controls grow.
    void record_control_ratios(std::int64_t batch_id);
    SearchWallPlan wall_plan(int q); // for a next search batch of q candidates

    Context c_;
    Host& host_;
};

} // namespace infrarsi::campaign
