#pragma once
// The batch runner, one part of a campaign (batch_runner.cpp, self_submitted.cpp): plan a batch (sandboxes,
// store rows, manifest), submit it held and release it, await it, re-attach to it after a restart, and
// ingest what its trials left (trial::assess), then hand the batch to what its stage registered
// (BatchStage). It names no stage: it sees the campaign's directory, contract and store (Context) and asks
// the rest of the campaign through BatchRunner::Host, which the campaign is.
#include "campaign/run_options.hpp"
#include "contract/contract.hpp"
#include "patch/catalog.hpp"
#include "patch/sandbox.hpp"
#include "scheduler/scheduler.hpp"
#include "slurm/user_jobs.hpp"
#include "space/space.hpp"
#include "store/campaign_store.hpp"
#include "trial/assess.hpp"
#include "trial/manifest.hpp"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::campaign {

// One trial to run: a candidate, why it runs, and for verification the verification it belongs to.
struct Task {
    space::Candidate candidate;
    store::TrialKind kind = store::TrialKind::Search;
    std::string reason;
    int attempt = 0;
    std::optional<std::int64_t> verification_id;
    std::optional<long long> seed; // another seed than the contract's (the doctor's final_eval repeats)
};

// Where a task runs (BatchRunner::plan): a verification's A/B pairs, each its own array job(s) (a new array
// where `group` changes), submitted with `args` (ArrayJob::placement: the pair's node).
struct TaskPlacement {
    int group = -1;
    std::vector<std::string> args;
};

// How the batch runner treats a kind of batch, as the stage that plans it registers it
// (BatchRunner::register_stage), so that the runner names no stage. A kind no stage registered (the user's
// own job) gets the defaults.
struct BatchStage {
    // Every member has a default initializer, so a designated initializer may name any subset.
    std::function<void(std::int64_t batch_id)> finish{}; // once ingest has stored the batch's trials
    // Its runs are each at a seed of their own and compared with each other, not with the doctor's
    // reference at the contract's seed: ingest holds them to no loss rule.
    bool own_seeds = false;
    // Its trials run up to [resources] max_concurrent at once, in arrays by option set with the control's
    // first; other batches keep their order and run one trial at a time.
    bool concurrent = false;
    // Its control (TrialKind::SearchControl) is what its candidates are compared with: a batch none of whose
    // candidates built is planned without it, finished at once.
    bool control_needs_candidate = false;
    // The early stop of its trials, given the log of the batch's control (empty: none); none: every step.
    std::function<std::optional<trial::ManifestTask::SlowStop>(const std::filesystem::path& control_log)>
        slow_stop{};
};

// The batch manifest's "knobs": every environment name a task's "env" may set, with its allowed values as
// strings (null: any value), which the SPANK plugin's trial mode requires (docs/plugin.md). The space's knobs
// get their whole domain (null beyond kMaxManifestKnobValues values); the other names in the tasks' env (the
// contract's workload env, steps, seed and binary variables) get the values the tasks give them.
inline constexpr std::size_t kMaxManifestKnobValues = 4096;
trial::KnobDeclarations manifest_knobs(const space::Space& space,
                                       const std::vector<trial::ManifestTask>& tasks);

class BatchRunner {
  public:
    // What the batch runner sees of its campaign.
    struct Context {
        std::filesystem::path dir;
        const contract::Contract& contract;
        store::CampaignStore& store;
    };
    // What it asks of the rest of the campaign.
    class Host {
      public:
        virtual patch::SandboxCache sandbox_cache() const = 0; // the campaign's sandboxes
        virtual std::vector<const patch::PatchInfo*> patch_set(const space::Candidate& c) const = 0;
        virtual void sandboxes_built() = 0; // a batch's patch sets were built now (the memory estimates')
        virtual scheduler::Scheduler& scheduler(const RunOptions& o) = 0; // where the trials run
        virtual scheduler::Scheduler& slurm_for_submitted_job() = 0;      // where the user's own job ran
        // The plugin's spool for `sched`'s jobs, where the trials' evidence is; empty when there is none.
        virtual std::string plugin_spool(scheduler::Scheduler& sched, const RunOptions& o) = 0;
        virtual std::vector<std::string> nodes_to_avoid(scheduler::Scheduler& sched) = 0; // the slow ones
        virtual std::vector<double> reference_losses() = 0; // the doctor's, which a trial's losses follow
        // The user's own job (BatchKind::Submitted) left its output and record outside a trial directory:
        // into it, before the trial is read.
        virtual void take_submitted_output(const store::TrialRow& t, const slurm::JobRecord& rec) = 0;
        virtual bool stopping(const RunOptions& o) = 0;
        virtual void say(const RunOptions& o, const std::string& msg) = 0;

      protected:
        ~Host() = default;
    };

    BatchRunner(Context c, Host& host) : c_(c), host_(host) {}

    void register_stage(store::BatchKind kind, BatchStage stage) { stages_[kind] = std::move(stage); }
    const BatchStage& stage(store::BatchKind kind) const;

    // The first half of running a batch: materializes each task's sandbox (a patch that does not apply or a
    // build that fails is recorded as build_failure), records the batch and its trials (state planned) and
    // writes batches/<id>/manifest.json (docs/orchestrator.md). Submits nothing. `placement`: empty, or one
    // per task.
    struct Planned {
        std::int64_t id = 0;
        bool control_dropped = false; // BatchStage::control_needs_candidate, and none built
    };
    Planned plan(store::BatchKind kind, std::vector<Task> tasks,
                 const std::vector<TaskPlacement>& placement = {});
    void submit(std::int64_t batch_id, const RunOptions& o); // held, each array recorded, then released
    void await(std::int64_t batch_id, const RunOptions& o);  // until every task ended, then ingest
    void resume_open(const RunOptions& o);                   // every batch not finished: submit and await

    // Where ingest found the trials' evidence: the plugin's spool and the name of the scheduler whose records
    // it read (set by await).
    struct Evidence {
        std::string spool;
        std::string scheduler;
    };
    const Evidence& evidence() const { return evidence_; }

  private:
    // The first batch submitted starts the wall-time budget's clock and binds the campaign to its scheduler
    // (empty: the user's own job, which names none).
    void mark_started(const std::string& scheduler_name);
    std::vector<std::string> array_placement(std::int64_t batch_id, int seq); // ArrayJob::placement
    void ingest(std::int64_t batch_id, const std::vector<slurm::JobRecord>& records);
    // What a trial's assessment `r` means for it and its candidate (ingest): recorded; the user's own job
    // (`submitted`) that ran another run than the trials is not a baseline run; the job's files bounded; a
    // trial that says nothing of its candidate is not counted and a search candidate re-queued.
    void settle(store::TrialRow& t, const trial::TrialRecord& r, bool submitted);
    // The loss rule ingest holds a batch's trials to (trial::assess); none for runs at a seed of their own.
    trial::LossCheck loss_check(store::BatchKind kind);
    // Once a trial is read: its job's own files in its trial directory removed or bounded as [workload]
    // keep_job_files says (trial/job_files.hpp); what was removed goes into its measurements and the log.
    void remove_job_files(store::TrialRow& t);
    // self_submitted.cpp: the user's jobs submitted since the batch was, that this campaign did not submit
    // (read by await into user_jobs_), and those submitted while one trial's job ran.
    std::vector<slurm::UserJob> jobs_not_ours(const scheduler::Scheduler& sched, std::int64_t batch_id);
    std::vector<trial::SelfSubmittedJob> self_submitted_during(const slurm::JobRecord& rec) const;

    Context c_;
    Host& host_;
    std::map<store::BatchKind, BatchStage> stages_;
    Evidence evidence_;
    std::vector<slurm::UserJob> user_jobs_; // jobs_not_ours, for ingest
};

} // namespace infrarsi::campaign
