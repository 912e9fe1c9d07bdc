#pragma once
// A campaign: a directory with its SQLite store, sandboxes, batch manifests and trial results, driven through
// the five stages (init, doctor, run, verify, report/apply). All state is in the store, so a process killed
// at any point resumes where it stopped: a batch is recorded before it is submitted, its job id before it is
// released, and a submitted batch is re-attached to on restart.
// The root, Campaign, and its parts: campaign.cpp (open, lock, budget, run() the sequencer), the batch runner
// (batch_runner.hpp: plan, submit, await, resume, ingest; it hands a finished batch to what its stage
// registered, BatchStage, and names no stage), the doctor stage (doctor_stage.hpp), the ablation stage
// (ablation_stage.hpp), the equivalence stage (equivalence_stage.hpp), the verification stage
// (verification_stage.hpp), the agent stage (agent_stage.hpp), the search stage (search_stage.hpp), and
// bank_stage.cpp (Campaign's own: the findings into the experience bank and its seeds out of it) and
// memory_estimate.cpp (the analytic peak-memory estimate the stages ask for).
#include "campaign/ablation_stage.hpp"
#include "campaign/agent_stage.hpp"
#include "campaign/batch_runner.hpp"
#include "campaign/control.hpp"
#include "campaign/doctor_stage.hpp"
#include "campaign/equivalence_stage.hpp"
#include "campaign/experience.hpp"
#include "campaign/search_stage.hpp"
#include "campaign/verification_stage.hpp"
#include "campaign/wall_plan.hpp"
#include "contract/contract.hpp"
#include "patch/catalog.hpp"
#include "patch/sandbox.hpp"
#include "scheduler/scheduler.hpp"
#include "store/campaign_store.hpp"

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::campaign {

namespace fs = std::filesystem;

// The root of a campaign: it opens and locks it, sequences the stages (run) and owns its parts, the batch
// runner and the doctor, search, equivalence, verification, ablation and agent stages (their headers), whose
// Host it is.
class Campaign : private BatchRunner::Host,
                 private DoctorStage::Host,
                 private SearchStage::Host,
                 private EquivalenceStage::Host,
                 private VerificationStage::Host,
                 private AblationStage::Host,
                 private AgentStage::Host {
  public:
    // Creates the campaign directory and store; records the locks. Refuses an existing campaign.
    static void init(const fs::path& contract_file, const fs::path& dir);
    // Opens a campaign and re-checks the locks (contract, baseline tree, protected files); throws an Error
    // naming what changed. Open::read_only (status, report, apply): what changed is kept in changed_inputs()
    // instead, and the contract is the text it had at init, so a finished campaign stays readable after the
    // user edits the job as its result says; the stages (doctor, run, verify) refuse to start then.
    enum class Open { checked, read_only };
    explicit Campaign(const fs::path& dir, Open mode = Open::checked);
    // Its parts hold references to its members.
    Campaign(const Campaign&) = delete;
    Campaign& operator=(const Campaign&) = delete;
    // "contract PATH", "tree PATH", ...: the locked inputs that differ from init (read-only opens only).
    const std::vector<std::string>& changed_inputs() const { return changed_inputs_; }

    const contract::Contract& contract() const { return contract_; }
    store::CampaignStore& store() { return *store_; }
    const fs::path& dir() const { return dir_; }
    const std::vector<patch::PatchInfo>& catalog() const { return catalog_; }
    const patch::PatchInfo* patch_info(const std::string& id) const override;
    // The agent stage (agent_stage.hpp): its calls, patches, priors and calibration.
    AgentStage& agent() { return *agent_; }
    // The equivalence stage (equivalence_stage.hpp): the patch sets' checks and whether seeds reach the job.
    EquivalenceStage& equivalence() { return *equivalence_; }

    // Runs trials on `s` instead of the one RunOptions::scheduler names (a program that brings its own; the
    // fault tests wrap the local one). The same rule holds: a campaign keeps its scheduler while a batch is
    // open on it.
    void use_scheduler(std::unique_ptr<scheduler::Scheduler> s);

    void doctor(const RunOptions& o); // runs (or re-attaches to) the doctor batch; no-op when done
    void search(const RunOptions& o); // batches until the budget ends
    // Interleaved A/B verification of the best candidates (verification_stage.hpp); the findings into the
    // bank as it ends.
    void verify(const RunOptions& o);
    void run(const RunOptions& o); // doctor, search, verify; resumable
    bool finished();               // every stage done
    // Once the campaign is done: its findings (the doctor's noise prior, verified settings, ...) into o.bank,
    // once (bank_stage.cpp). Called as the last stage ends, and by `run` and the daemon on a finished
    // campaign whose findings are not recorded yet (a run stopped right after it, a bank named only later).
    // No-op without a bank.
    void record_in_bank(const RunOptions& o);
    // Why the campaign is paused (the doctor's noise stayed too high to promote a real gain:
    // doctor_stage.hpp), or nullopt; `infrarsi run --accept-noise` goes on.
    std::optional<std::string> paused();
    // `infrarsi cancel`: from any process that may write the campaign (its user's). The process driving it
    // (`infrarsi run`, a daemon) stops at its next look, cancels the campaign's running jobs and ends their
    // trials as cancelled (cancel_running); nothing drives it again. For a campaign no process drives, the
    // canceller calls cancel_running itself, holding the campaign's lock.
    void request_cancel(const std::string& why);
    std::optional<std::string> cancelled(); // why, when it was; nullopt otherwise
    // Cancels the jobs of the batches still submitted and ends their unfinished trials as cancelled.
    void cancel_running(const RunOptions& o);

    BudgetUse budget_use() override;

    // The contract's analytic peak-memory estimate of a candidate: its estimate command, run with the
    // candidate's knob environment and the build of the candidate's patch set when that was built already
    // (a patch that changes memory updates the estimate it builds), else the baseline build; cached per
    // build. Empty without a command or a doctor.
    std::optional<double> memory_estimate(const space::Candidate& c) override; // memory_estimate.cpp

    // The campaign as the experience bank sees it (experience.hpp), valid while this campaign lives.
    CampaignView experience_view();

    // The batch runner (batch_runner.hpp): the stages plan, submit and await their batches through it.
    BatchRunner& batches() { return *batches_; }

  private:
    // What the parts ask of the campaign (their Host interfaces); some the doctor's or the equivalence
    // stage's, answered by them.
    patch::SandboxCache sandbox_cache() const override; // keyed by the locked tree
    std::vector<const patch::PatchInfo*> patch_set(const space::Candidate& c) const override; // or throws
    void sandboxes_built() override; // the builds the memory estimates use are looked up again
    scheduler::Scheduler& scheduler(const RunOptions& o) override; // chosen on first use (RunOptions)
    scheduler::Scheduler& slurm_for_submitted_job() override;      // the doctor's
    // The plugin's spool for `sched`'s jobs: RunOptions::spool, else discovered (slurm/plugstack.hpp), said
    // once per scheduler; empty when there is none.
    std::string plugin_spool(scheduler::Scheduler& sched, const RunOptions& o) override;
    std::vector<std::string> nodes_to_avoid(scheduler::Scheduler& sched) override; // the doctor's
    std::vector<double> reference_losses() override;                               // the doctor's
    // The doctor's: the job submitted with --infrarsi=tune into its trial directory.
    void take_submitted_output(const store::TrialRow& t, const slurm::JobRecord& rec) override;
    // A signal (o.stop) or a cancel written by another process (read from the store once a second at most).
    bool stopping(const RunOptions& o) override;
    void say(const RunOptions& o, const std::string& msg) override; // the store's log, then people
    fs::path baseline_tree() override; // the baseline's sandbox, for the agent to read
    std::vector<store::EquivalenceCheck> failed_equivalence_checks() override; // the equivalence stage's
    TrialCostModel trial_cost_model() override; // from the doctor and the one-at-a-time batches so far
    double wall_used_s() override;              // budget_use().wall_s

    void run_stages(const RunOptions& o);
    void check_scheduler_change(const std::string& to);   // throws while a batch is open on another
    void seed_from_bank(const RunOptions& o);             // once, after the doctor (bank_stage.cpp)
    fs::path estimate_sandbox(const space::Candidate& c); // the build memory_estimate uses; empty: none

    fs::path dir_;
    std::vector<std::string> changed_inputs_;
    contract::Contract contract_;
    std::unique_ptr<store::CampaignStore> store_;
    std::vector<patch::PatchInfo> catalog_;
    // Its parts, each seeing its Context and asking the rest through its Host: the campaign never moves.
    std::unique_ptr<BatchRunner> batches_;
    std::unique_ptr<DoctorStage> doctor_;
    std::unique_ptr<EquivalenceStage> equivalence_;
    std::unique_ptr<AblationStage> ablation_;
    std::unique_ptr<VerificationStage> verification_;
    std::unique_ptr<AgentStage> agent_;
    std::unique_ptr<SearchStage> search_;
    std::unique_ptr<scheduler::Scheduler> scheduler_;
    std::map<std::string, std::string> plugin_spools_;       // by scheduler name, once discovered
    std::map<std::string, std::optional<double>> estimates_; // by candidate and build
    std::map<std::string, fs::path> estimate_sandboxes_;     // by patch set, until the next batch builds
    std::chrono::steady_clock::time_point cancel_checked_{};
    bool cancel_seen_ = false;
};

// Which prior the memory model starts from, for people: the estimate command, the transformer formulas, or
// none.
std::string memory_prior_name(const contract::Contract& c);
// The transformer formulas' estimate of a candidate's peak per node ([memory.transformer]); nullopt without.
std::optional<double> transformer_memory_estimate(const contract::Contract& k, const space::Candidate& c);

} // namespace infrarsi::campaign
