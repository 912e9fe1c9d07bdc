#pragma once
// A campaign: a directory with its SQLite store, sandboxes, batch manifests and trial results, driven through
// the five stages (init, doctor, run, verify, report/apply). All state is in the store, so a process killed
// at any point resumes where it stopped: a batch is recorded before it is submitted, its job id before it is
// released, and a submitted batch is re-attached to on restart.
// One class, one file per part: campaign.cpp (open, lock, budget, run() the sequencer), batch.cpp (plan,
// submit, await, resume, ingest: the batch runner, which hands a finished batch to what its stage registered,
// BatchStage, and names no stage), doctor.cpp, search.cpp, verification.cpp, equivalence.cpp, ablation.cpp,
// bank_stage.cpp (the stages).
#include "agent/protocol.hpp"
#include "campaign/experience.hpp"
#include "contract/contract.hpp"
#include "model/claim_calibration.hpp"
#include "node/allocation_record.hpp"
#include "patch/catalog.hpp"
#include "patch/sandbox.hpp"
#include "scheduler/scheduler.hpp"
#include "search/proposer.hpp"
#include "store/campaign_store.hpp"
#include "trial/assess.hpp"
#include "trial/manifest.hpp"
#include "verify/verify.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace infrarsi::campaign {

namespace fs = std::filesystem;

struct RunOptions {
    bool verbose = true;
    std::string proposer = "model";
    // Where trials run: "slurm", "local" or "auto" (Slurm when it answers, else local). A campaign keeps the
    // scheduler its first batch ran on.
    std::string scheduler = "auto";
    std::chrono::milliseconds poll{1000};
    // How long a task the scheduler answers without (not queued, running or ended anywhere it looks) is
    // waited for before it is taken as lost: its trial ends cancelled and its candidate is re-queued
    // (scheduler/lost_tasks.hpp). Covers accounting written after the queue forgot the job.
    std::chrono::seconds lost_grace{120};
    // How long a scheduler that has run no batch of this campaign may not answer before `run` stops with an
    // error (no Slurm on this host); one that has is waited for as long as it takes (a restart).
    std::chrono::seconds first_answer_wait{60};
    bool verify = true; // run the verification stage after the search
    // Go on with a baseline whose noise leaves only large speed-ups promotable, instead of pausing
    // (check_noise, doctor.cpp).
    bool accept_noise = false;
    std::string bank;  // experience bank file: seeds the search, receives the findings; empty: none
    std::string spool; // the plugin's spool, whose allocation records name the hardware; empty: this host
    const std::atomic<bool>* stop = nullptr; // set by a signal handler: finish the current step and return
    // Set: each event goes here (after the store's log) instead of a line on stdout (the live status line
    // of report/progress.hpp); only while verbose.
    std::function<void(const std::string&)> on_event;
};

// Wall-time planning. Verification runs after the search, one trial at a time, so the search must stop early
// enough to leave it room within the wall-time budget. A trial's wall time is estimated from the doctor's
// baseline (a verification pair is a baseline run and a faster candidate run, so twice the baseline's trial
// bounds it) plus the overhead observed per trial (scheduling, start-up, the wrapper).
struct TrialCostModel {
    double step_s = 0;      // the baseline's steady-state step time (doctor median)
    double cold_step_s = 0; // its cold-start step time (the warm-up steps)
    int steps = 0;          // the contract's invariants.steps
    int warmup_steps = 0;
    double overhead_s = 0;  // observed per trial beyond its steps
    double steps_s() const; // the steps of one trial
    double trial_s() const; // one trial running alone: steps + overhead
};

// Wall time of verifying `candidates` candidates with `pairs` interleaved A/B pairs each (2 trials a pair,
// one at a time; a re-check's pairs counted in `pairs`) and `equivalence_checks` of them with a patch set
// still to check (equivalence.cpp: 2 trials each). 0 when there is nothing to run.
double verification_wall_s(const TrialCostModel& m, int candidates, int pairs, int equivalence_checks = 0);

// How many of `pairs` A/B pairs of one candidate fit in `wall_left_s` (0..pairs). All of them when the
// model has no estimate (trial_s() == 0).
int affordable_pairs(const TrialCostModel& m, double wall_left_s, int pairs);

// The early stop of search trials: slower than the incumbent's step time by more than max(MDE,
// kMinStopMargin) over the median of the first max(3, timed / 4) timed steps after the warm-up (timed = steps
// - warmup_steps). None when that would save too little (fewer than half the timed steps left) or there is
// no incumbent. The floor: the MDE is the noise of whole runs' means, and a few steps of two runs side by
// side are noisier; a candidate within 10% of the incumbent is worth its full measurement.
inline constexpr double kMinStopMargin = 0.10;
std::optional<trial::ManifestTask::SlowStop> slow_stop_rule(double incumbent_step_s, double mde, int steps,
                                                            int warmup_steps);

// The doctor's verdict on the baseline's noise: noisy when its minimum detectable effect is above `limit`,
// max(kNoisyMde, min_speedup): no gain of a usual size (most tuning wins are 10-30%) could be promoted.
inline constexpr double kNoisyMde = 0.25;
struct NoiseCheck {
    bool noisy = false;
    double limit = 0;
    std::string why; // for people, when noisy
};
NoiseCheck check_noise(const store::Baseline& d, double min_speedup);

// A search trial's step time over its batch's control's (Measurements::control), where both ran every step;
// nullopt otherwise.
std::optional<double> control_ratio(const store::TrialRow& t);
// What each search batch's ratios are over, given the step times of the campaign's controls (one a batch):
// the control's own, or, for a control further than `bound` (in log step time) from the median of them all
// (three at least), that median: one run far from every other is a fluke of that run (a bimodal host's slow
// run), not a slowdown of its batch. It errs against a batch that was slowed as a whole: a fluke never makes
// a candidate look faster.
struct ControlLevel {
    double over = 0;
    bool outlier = false;
};
std::vector<ControlLevel> control_levels(const std::vector<double>& control_step_s, double bound);
// A search trial's step time over the baseline's, like against like: over its batch's control where it has
// one, else over the doctor's median `baseline_step_s`; nullopt when neither can be formed. Under 1: faster.
std::optional<double> baseline_ratio(const store::TrialRow& t, double baseline_step_s);

// Whether the search may start another batch: the wall time used, that batch and the verification reserve
// must fit in the budget (budget_s <= 0: no wall-time limit).
struct SearchWallPlan {
    double next_batch_s = 0;     // estimated wall time of the next search batch
    double verify_reserve_s = 0; // verification_wall_s of the candidates it may have to verify
    int verify_candidates = 0;
    int equivalence_checks = 0; // of those, patch sets not checked yet
    int pairs = 0;              // A/B pairs planned a candidate, its re-check's included
    bool fits(double used_s, double budget_s) const {
        return budget_s <= 0 || used_s + next_batch_s + verify_reserve_s <= budget_s;
    }
};

// A patch's measured effect (Campaign::measured_patch_effect): step-time speed-up and peak-memory factor.
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

class Campaign {
  public:
    // Creates the campaign directory and store; records the locks. Refuses an existing campaign.
    static void init(const fs::path& contract_file, const fs::path& dir);
    // Opens a campaign and re-checks the locks (contract, baseline tree, protected files); throws an Error
    // naming what changed. Open::read_only (status, report, apply): what changed is kept in changed_inputs()
    // instead, and the contract is the text it had at init, so a finished campaign stays readable after the
    // user edits the job as its result says; the stages (doctor, run, verify) refuse to start then.
    enum class Open { checked, read_only };
    explicit Campaign(const fs::path& dir, Open mode = Open::checked);
    // "contract PATH", "tree PATH", ...: the locked inputs that differ from init (read-only opens only).
    const std::vector<std::string>& changed_inputs() const { return changed_inputs_; }

    const contract::Contract& contract() const { return contract_; }
    store::CampaignStore& store() { return *store_; }
    const fs::path& dir() const { return dir_; }
    const std::vector<patch::PatchInfo>& catalog() const { return catalog_; }
    const patch::PatchInfo* patch_info(const std::string& id) const;

    // Runs trials on `s` instead of the one RunOptions::scheduler names (a program that brings its own; the
    // fault tests wrap the local one). The same rule holds: a campaign keeps its scheduler while a batch is
    // open on it.
    void use_scheduler(std::unique_ptr<scheduler::Scheduler> s);

    void doctor(const RunOptions& o); // runs (or re-attaches to) the doctor batch; no-op when done
    void search(const RunOptions& o); // batches until the budget ends
    void verify(const RunOptions& o); // interleaved A/B verification of the best candidates
    void run(const RunOptions& o);    // doctor, search, verify; resumable
    bool finished();                  // every stage done
    // Once the campaign is done: its findings (the doctor's noise prior, verified settings, ...) into o.bank,
    // once (bank_stage.cpp). Called as the last stage ends, and by `run` and the daemon on a finished
    // campaign whose findings are not recorded yet (a run stopped right after it, a bank named only later).
    // No-op without a bank.
    void record_in_bank(const RunOptions& o);
    // Why the campaign is paused (the doctor's noise stayed too high to promote a real gain: doctor.cpp), or
    // nullopt; `infrarsi run --accept-noise` goes on.
    std::optional<std::string> paused();
    // `infrarsi cancel`: from any process that may write the campaign (its user's). The process driving it
    // (`infrarsi run`, a daemon) stops at its next look, cancels the campaign's running jobs and ends their
    // trials as cancelled (cancel_running); nothing drives it again. For a campaign no process drives, the
    // canceller calls cancel_running itself, holding the campaign's lock.
    void request_cancel(const std::string& why);
    std::optional<std::string> cancelled(); // why, when it was; nullopt otherwise
    // Cancels the jobs of the batches still submitted and ends their unfinished trials as cancelled.
    void cancel_running(const RunOptions& o);

    struct BudgetUse {
        int trials = 0;        // counted search trials (planned, running or finished)
        double node_hours = 0; // all trials
        double wall_s = 0;     // since the first run
        std::string exhausted; // which limit ended the search, empty while budget is left
    };
    BudgetUse budget_use();

    // The contract's analytic peak-memory estimate of a candidate: its estimate command, run with the
    // candidate's knob environment and the build of the candidate's patch set when that was built already
    // (a patch that changes memory updates the estimate it builds), else the baseline build; cached per
    // build. Empty without a command or a doctor.
    std::optional<double> memory_estimate(const space::Candidate& c);

    // Whether the seeds this campaign gives reach the job: empty while nothing says otherwise, else why not
    // (the contract gives none, or runs of the same settings at three seeds or more printed the same losses:
    // the job ignores its seed). Then every check "at a fresh seed" ran at one seed in effect
    // (equivalence.cpp), and a patch that replays an earlier run's losses is not excluded by seeds.
    std::string seeds_not_reaching_job();

    // The campaign as the experience bank sees it (experience.hpp), valid while this campaign lives.
    CampaignView experience_view();

    // One trial to run: a candidate, why it runs, and for verification the verification it belongs to.
    struct Task {
        space::Candidate candidate;
        store::TrialKind kind = store::TrialKind::Search;
        std::string reason;
        int attempt = 0;
        std::optional<std::int64_t> verification_id;
        std::optional<long long> seed; // another seed than the contract's (the doctor's final_eval repeats)
    };
    // The first half of running a batch: materializes each task's sandbox (a patch that does not apply or a
    // build that fails is recorded as build_failure), records the batch and its trials (state planned) and
    // writes batches/<id>/manifest.json (docs/orchestrator.md). Submits nothing; returns the batch id.
    // `placement` (empty, or one per task): a verification's A/B pairs, each its own array job(s) (a new
    // array where `group` changes), submitted with `args` (ArrayJob::placement: the pair's node).
    struct TaskPlacement {
        int group = -1;
        std::vector<std::string> args;
    };
    // A search batch none of whose candidates built is recorded without its control (it would have nothing
    // to be compared with), finished at once.
    std::int64_t plan_batch(store::BatchKind kind, std::vector<Task> tasks,
                            const std::vector<TaskPlacement>& placement = {});

  private:
    // How the batch runner treats a kind of batch, as the stage that plans it registers it (each stage's
    // register_*_stage, called by the constructor), so that the batch runner names no stage. A kind no stage
    // registered (the user's own job) gets the defaults.
    struct BatchStage {
        // Every member has a default initializer, so a designated initializer may name any subset.
        std::function<void(std::int64_t batch_id)> finish{}; // once ingest has stored the batch's trials
        // Its runs are each at a seed of their own and compared with each other, not with the doctor's
        // reference at the contract's seed: ingest holds them to no loss rule.
        bool own_seeds = false;
        // Its trials run up to [resources] max_concurrent at once, in arrays by option set with the control's
        // first; other batches keep their order and run one trial at a time.
        bool concurrent = false;
        // The early stop of its trials, given the log of the batch's control (empty: none); none: every step.
        std::function<std::optional<trial::ManifestTask::SlowStop>(const fs::path& control_log)> slow_stop{};
    };
    std::map<store::BatchKind, BatchStage> batch_stages_;
    const BatchStage& batch_stage(store::BatchKind kind) const;
    void register_doctor_stage();
    void register_search_stage();
    void register_verification_stage();
    void register_equivalence_stage();
    void register_ablation_stage();
    patch::SandboxCache sandbox_cache() const; // the campaign's sandboxes, keyed by the locked tree
    std::vector<const patch::PatchInfo*> patch_set(const space::Candidate& c) const; // throws if unknown
    void submit_batch(std::int64_t batch_id, const RunOptions& o);
    // The first batch submitted starts the wall-time budget's clock and binds the campaign to its scheduler
    // (empty: the user's own job, which names none).
    void mark_started(const std::string& scheduler_name);
    void await_batch(std::int64_t batch_id, const RunOptions& o);
    void resume_open_batches(const RunOptions& o);
    void ingest(std::int64_t batch_id, const std::vector<slurm::JobRecord>& records);
    // Once a trial is read: its job's own files in its trial directory removed or bounded as [workload]
    // keep_job_files says (trial/job_files.hpp); what was removed goes into its measurements and the log.
    void remove_job_files(store::TrialRow& t);
    // self_submitted.cpp: the user's jobs submitted since the batch was, that this campaign did not submit
    // (read by await_batch into user_jobs_), and those submitted while one trial's job ran.
    std::vector<slurm::UserJob> jobs_not_ours(const scheduler::Scheduler& sched, std::int64_t batch_id);
    std::vector<trial::SelfSubmittedJob> self_submitted_during(const slurm::JobRecord& rec) const;
    // The baseline from the doctor's runs (`remeasure`: from that re-measurement batch's runs alone).
    void finish_doctor(std::optional<std::int64_t> remeasure = std::nullopt);
    std::vector<Task> doctor_tasks(int adopted, const std::string& why) const; // the baseline's repeats
    // After the doctor: a baseline too noisy to promote a real gain is re-measured once, one job at a time;
    // still too noisy, the campaign pauses (paused()) unless RunOptions::accept_noise.
    void check_doctor_noise(const RunOptions& o);
    // nccl_check.cpp: the baseline's NCCL transports against the nodes' NICs, for a job that uses NCCL;
    // throws (or logs, with [nccl] fallback = "warn") when NCCL fell back to a slower transport.
    void check_nccl_transport(const std::vector<store::TrialRow>& doctor_runs);
    // The job submitted with --infrarsi=tune as the doctor's first run (submitted_job.cpp): its batch, made
    // now, or nullopt (not a tune campaign, adopted before, or Slurm no longer knows it: said why).
    std::optional<std::int64_t> adopt_submitted_job(const RunOptions& o);
    // Ingest of that job: its output into the trial's log.txt, its Slurm record into result.json.
    void take_submitted_output(const store::TrialRow& t, const slurm::JobRecord& rec);
    scheduler::Scheduler& slurm_for_submitted_job(); // awaited through Slurm whatever runs the trials
    void seed_from_bank(const RunOptions& o);        // once, after the doctor (bank_stage.cpp)
    void finish_verification(std::int64_t verification_id);
    // Plans, submits and awaits one block of a verification's sequence (verification.cpp,
    // verify/sequential.hpp): two A/B pairs, one in each order, each pair on one node, spread over the
    // nodes; the re-check's block (recheck = true) on nodes the first stage did not use where the partition
    // has them.
    void run_verification_stage(store::VerificationRow& v, bool recheck, const RunOptions& o);
    // Runs a verification's first stage block by block until its look says otherwise (also after a
    // restart); returns false when stopped.
    bool run_sequence(std::int64_t verification_id, const RunOptions& o);
    std::vector<std::string> array_placement(std::int64_t batch_id, int seq); // ArrayJob::placement
    // equivalence.cpp: the equivalence check of a candidate's patch set apart from knobs. The record of the
    // check (docs/orchestrator.md, "Equivalence"): a stored one, a failed one of a patch set it contains, or
    // nullopt when there is none yet; run_equivalence runs it (one batch: the patch set, then the baseline,
    // both at the baseline's knobs and one fresh seed) and returns its record (nullopt when stopped).
    std::optional<store::EquivalenceCheck> equivalence_record(const space::Candidate& c);
    std::optional<store::EquivalenceCheck> run_equivalence(const space::Candidate& c, const RunOptions& o);
    void finish_equivalence(std::int64_t batch_id);
    // Where a patch set's equivalence is checked: the candidate's knobs without its patches where they fit in
    // memory, else the nearest setting toward the baseline's knobs that fits (known from a run of it, or the
    // censored memory model's P(out of memory) <= 0.25; the baseline's own always does), skipping settings
    // in `ran_out` (earlier runs of this check there ran out of memory). `why` says why it moved.
    struct EquivalenceSite {
        space::Candidate knobs; // no patches
        bool moved = false;     // not the candidate's own knobs
        std::string why;
    };
    EquivalenceSite equivalence_site(const space::Candidate& c, const std::set<std::string>& ran_out);
    // P(out of memory) of each candidate from the campaign's finished runs (model::CensoredMemoryModel fitted
    // as the search fits it); 0 for all without a memory limit.
    std::vector<double> oom_probabilities(const std::vector<space::Candidate>& cands);
    // The spot check of one verification stage (verification.cpp): plan_spot_check draws one of the stage's
    // pairs (`plan`, placed by `pair_args`) and appends its runs to `tasks` (the candidate's knobs without
    // its patches at that pair's seed; where the equivalence check had to move its knobs, the patch set and
    // the same knobs without it there), returning its record (none without patches); judge_spot_check
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
    // Once seeds_not_reaching_job() says the job ignores its seed, no record keeps claiming a fresh one: the
    // stored equivalence checks and the verifications' copies and spot checks (`current`: the one being
    // finished, changed in place) say they ran at one seed.
    void retract_seed_claims(store::VerificationRow* current);
    std::vector<std::vector<std::string>> not_equivalent_patch_sets(); // every failed check's patch set
    std::vector<store::EquivalenceCheck> failed_equivalence_checks();  // the failed checks' records

    // The agent stage (agent_stage.cpp).
    struct AgentPatchIntake {
        std::string id;
        bool accepted = false;
        std::string reason;
    };
    fs::path agent_patch_file(const std::string& id) const;
    void load_agent_patches(Open mode); // at open: the accepted ones join the catalog, checked by hash
    // A call is owed now and allowed: after the doctor, after each search batch, or (space_exhausted) once
    // when the proposer has no candidate left, while calls and token budget remain.
    bool agent_due(bool space_exhausted = false);
    int consult_agent(const RunOptions& o, const std::string& trigger); // patches accepted
    nlohmann::json agent_request(int call, const std::string& trigger, const fs::path& tree);
    AgentPatchIntake take_agent_patch(const agent::ProposedPatch& p, int call, int index);

    // The agent's claims as the proposer's priors (search::PatchFacts::claim, knob_priors), discounted by
    // its calibration so far.
    void fill_agent_priors(search::ProposalContext& ctx);

  public:
    // What trials measured of a patch: the median over pairs of trials that differ by it alone.
    std::optional<AgentPatchEffect> measured_patch_effect(const std::string& patch_id);
    // The agent's calibration: its claims against what trials measured, the bank's (earlier campaigns on
    // hardware like this) and this campaign's.
    AgentCalibration agent_calibration();
    AgentPairs own_agent_pairs(); // this campaign's alone

  private:
    // The verdict of a patch set's run against the same knobs without it at one seed: state passed, failed
    // or incomplete (a run that did not complete says nothing about the math), the compared values and the
    // trial ids; a failed patch set run gets the typed violation not_equivalent.
    nlohmann::json judge_equivalence(const std::optional<store::TrialRow>& base,
                                     const std::optional<store::TrialRow>& cand, double tolerance);
    // [invariants] equivalence_tolerance, or loss_tolerance where a patch is tagged math_changing (said in
    // *math_changing).
    double equivalence_tolerance(const space::Candidate& c, bool* math_changing = nullptr) const;
    // A patch set that failed a spot check (verification.cpp) is recorded as a failed equivalence check:
    // never promoted, never proposed again.
    void record_not_equivalent(const space::Candidate& c, const nlohmann::json& check);
    // ablation.cpp: each promoted bundle of several changes, with each change removed in turn, A/B against
    // the bundle as far as the wall-time budget allows; the result in the verification's detail.
    void ablate(const RunOptions& o);
    void finish_ablation(std::int64_t batch_id);
    std::vector<double> reference_losses();
    // The loss rule ingest holds a batch's trials to (trial::assess); none for runs at a seed of their own.
    trial::LossCheck batch_loss_check(store::BatchKind batch_kind);
    TrialCostModel trial_cost_model();      // from the doctor and the one-at-a-time batches so far
    SearchWallPlan search_wall_plan(int q); // for a next search batch of q candidates
    fs::path estimate_sandbox(const space::Candidate& c);    // the build memory_estimate uses; empty: none
    std::map<std::string, std::optional<double>> estimates_; // by candidate and build
    std::map<std::string, fs::path> estimate_sandboxes_;     // by patch set, until the next batch builds
    double mde();
    // slow_stop_rule for the next batch: relative to its control, whose log is `control_log` (empty: none,
    // the incumbent's absolute step time).
    std::optional<trial::ManifestTask::SlowStop> search_slow_stop(const fs::path& control_log);
    // Each search trial's step time over its batch's control's (or the controls' median where that control
    // was a fluke: control_levels), kept in its measurements (control_ratio); every batch's again, as the
    // controls grow.
    void record_control_ratios(std::int64_t batch_id);
    // Empty, or a warning for people when the doctor's noise leaves only very large speed-ups promotable.
    std::string noise_warning();
    // A signal (o.stop) or a cancel written by another process (read from the store once a second at most).
    bool stopping(const RunOptions& o);
    void run_stages(const RunOptions& o);
    std::chrono::steady_clock::time_point cancel_checked_{};
    bool cancel_seen_ = false;
    scheduler::Scheduler& scheduler(const RunOptions& o); // chosen on first use (RunOptions::scheduler)
    void check_scheduler_change(const std::string& to);   // throws while a batch is open on another
    // The plugin's spool for `sched`'s jobs: RunOptions::spool, else discovered (slurm/plugstack.hpp), said
    // once per scheduler; empty when there is none.
    std::string plugin_spool(scheduler::Scheduler& sched, const RunOptions& o);
    // The MFU denominator from a calibration of the doctor's hardware (doctor.cpp): the plugin's allocation
    // records of its runs, or this host's for the local scheduler; nullopt when there is none.
    std::optional<verify::PeakFlops> calibration_peak(const std::vector<store::TrialRow>& doctor_runs);
    // The plugin's records of these runs' allocations (Slurm with a spool; empty otherwise).
    std::vector<node::AllocationRecord> allocation_records(const std::vector<store::TrialRow>& runs);
    // The doctor's nodes whose GPUs are more than 1.5x slower than the median node's (node::slow_gpu_nodes),
    // kept in the campaign (meta slow_nodes) and left out of every later array (slow_nodes()).
    void find_slow_nodes(const std::vector<store::TrialRow>& doctor_runs);
    std::vector<std::string> slow_nodes();
    // Those of them to keep this campaign's jobs off now (scheduler::nodes_to_avoid over the partition's
    // nodes).
    std::vector<std::string> nodes_to_avoid(scheduler::Scheduler& sched);
    // Whether a trial can be given a seed other than the contract's ([invariants] seed_env or seed_arg).
    bool can_seed() const;
    // A random seed none of `used` nor the doctor's (contract seed, seed + 1, ...) (equivalence checks, A/B
    // pairs): no logged loss at it exists to copy.
    long long fresh_seed(const std::set<long long>& used) const;
    std::map<std::string, std::string> plugin_spools_; // by scheduler name, once discovered
    void say(const RunOptions& o, const std::string& msg);

    fs::path dir_;
    std::vector<std::string> changed_inputs_;
    contract::Contract contract_;
    std::unique_ptr<store::CampaignStore> store_;
    std::vector<patch::PatchInfo> catalog_;
    std::unique_ptr<scheduler::Scheduler> scheduler_;
    std::unique_ptr<scheduler::Scheduler> submitted_job_scheduler_;
    // Where ingest finds the trials' evidence (batch.cpp): the plugin's spool (RunOptions::spool) and the
    // name of the scheduler whose records it reads; set by await_batch.
    std::string evidence_spool_;
    std::string evidence_scheduler_;
    std::vector<slurm::UserJob> user_jobs_; // jobs_not_ours, for ingest
};

// The knob settings (no patches) from `c`'s knobs toward the baseline's, where a patch set's equivalence is
// checked when the candidate's own knobs do not fit without it (Campaign::equivalence_site): each knob at the
// candidate's value, the baseline's, or (numeric and recompute knobs) one between; the feasible ones, `c`'s
// own first, then nearest first. The distance counts each knob's steps, weighted by what it does to memory:
// a micro-batch or recompute knob is what makes room (1 a step), gradient accumulation only compensates (0),
// any other knob (ranks, threads: what the candidate is about) 2 a step. Beyond 4096 settings: `c`'s knobs
// and the baseline's.
std::vector<space::Candidate> settings_toward_baseline(const space::Space& s, const space::Candidate& c);

// Which prior the memory model starts from, for people: the estimate command, the transformer formulas, or
// none.
std::string memory_prior_name(const contract::Contract& c);
// The transformer formulas' estimate of a candidate's peak per node ([memory.transformer]); nullopt without.
std::optional<double> transformer_memory_estimate(const contract::Contract& k, const space::Candidate& c);

// The batch manifest's "knobs": every environment name a task's "env" may set, with its allowed values as
// strings (null: any value), which the SPANK plugin's trial mode requires (docs/plugin.md). The space's knobs
// get their whole domain (null beyond kMaxManifestKnobValues values); the other names in the tasks' env (the
// contract's workload env, steps, seed and binary variables) get the values the tasks give them.
inline constexpr std::size_t kMaxManifestKnobValues = 4096;
trial::KnobDeclarations manifest_knobs(const space::Space& space,
                                       const std::vector<trial::ManifestTask>& tasks);

} // namespace infrarsi::campaign
