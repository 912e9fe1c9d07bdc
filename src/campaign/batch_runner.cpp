// The batch runner (batch_runner.hpp): plan, submit, await, resume and ingest a batch; what a finished batch
// means is its stage's (BatchStage::finish).
#include "campaign/batch_runner.hpp"

#include "scheduler/lost_tasks.hpp"
#include "slurm/user_jobs.hpp"
#include "space/rendering.hpp"
#include "trial/job_files.hpp"
#include "trial/outcome.hpp"
#include "trial/proof.hpp"
#include "util/error.hpp"
#include "util/install_paths.hpp"
#include "util/sha256.hpp"
#include "verify/verify.hpp"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <set>
#include <thread>

namespace infrarsi::campaign {

namespace fs = std::filesystem;

using nlohmann::json;
using store::TrialKind;
using store::TrialRow;
using store::TrialState;

namespace {

// A record's task: an array task's index; a plain job (the one a user submitted, BatchKind::Submitted) is
// task 0; a record of several pending tasks ("12_[0-3]") is none.
std::optional<int> task_index(const slurm::JobRecord& r) {
    if (r.array_task_id) return r.array_task_id;
    if (r.job_id.find_first_of("_[") == std::string::npos) return 0;
    return std::nullopt;
}

// The batch step's own output (Slurm's -o file, %A_%a: JOB_INDEX); none for the user's own job.
fs::path slurm_output(const store::BatchRow& b, const store::TrialRow& t) {
    if (b.manifest.empty()) return {};
    return fs::path(b.manifest).parent_path() / fmt::format("slurm-{}.out", t.job_id);
}

// The manifest entries a batch's trials were to run, as the orchestrator wrote them (its digest was stored
// then): a manifest changed since, or unreadable, proves no trial's settings. A batch an older orchestrator
// planned has no digest, and its wrapper recorded no settings: not checked.
struct ManifestProof {
    bool checked = false;
    std::optional<trial::Manifest> manifest;
    std::string problem;
};

ManifestProof manifest_proof(const store::BatchRow& b, const std::optional<std::string>& digest) {
    ManifestProof p;
    p.checked = digest.has_value();
    if (b.manifest.empty() || !digest) return p;
    try {
        if (sha256_file_hex(b.manifest) != *digest)
            p.problem = "the batch manifest was changed after the orchestrator wrote it";
        else
            p.manifest = trial::read_manifest(b.manifest);
    } catch (const Error& e) {
        p.problem = std::string("the batch manifest cannot be read: ") + e.what();
    }
    return p;
}

} // namespace

trial::KnobDeclarations manifest_knobs(const space::Space& space,
                                       const std::vector<trial::ManifestTask>& tasks) {
    trial::KnobDeclarations knobs;
    std::set<std::string> knob_envs;
    for (const auto& k : space.knobs) {
        if (k.env.empty()) continue;
        knob_envs.insert(k.env);
        if (k.size() > kMaxManifestKnobValues) {
            knobs[k.env] = std::nullopt; // too many to list: any value (the orchestrator checked it)
            continue;
        }
        std::vector<std::string> values;
        for (const auto& v : k.domain())
            values.push_back(space::env_value(v));
        knobs[k.env] = std::move(values);
    }
    // The names the contract fixes (workload env, steps, seed, binary): the values this batch gives them.
    std::map<std::string, std::set<std::string>> fixed;
    for (const auto& t : tasks)
        for (const auto& [name, value] : t.env)
            if (!knob_envs.count(name)) fixed[name].insert(value);
    for (const auto& [name, values] : fixed)
        knobs[name] = std::vector<std::string>(values.begin(), values.end());
    return knobs;
}

namespace {

// A batch's array jobs: the runnable tasks in array order, each one's array index (-1: not runnable), the
// arrays, and the placement of those that have one (array seq -> ArrayJob::placement).
struct ArrayPlan {
    std::vector<std::size_t> order;
    std::vector<int> index_of;
    std::vector<store::ArrayRow> arrays;
    json placement = json::object();
};

// Trials whose sbatch-option knobs differ cannot share an array job; the arrays of a batch run one after
// another. A concurrent (search) batch is grouped by option set, one array per set, the control's set first
// (the control first in it: it starts with the first candidates); doctor and verification batches keep
// their order, so an array there is a run of consecutive tasks with the same options and placement group (a
// verification's pair: its own arrays, so it can be placed on its node).
ArrayPlan plan_arrays(const std::vector<Task>& tasks, const std::vector<char>& runnable,
                      const std::vector<std::vector<std::string>>& options, bool concurrent,
                      const std::vector<TaskPlacement>& placed) {
    const auto place = [&](std::size_t i) { return placed.empty() ? TaskPlacement{} : placed[i]; };
    ArrayPlan plan;
    for (std::size_t i = 0; i < tasks.size(); ++i)
        if (runnable[i]) plan.order.push_back(i);
    if (concurrent) {
        std::vector<std::string> first;
        for (std::size_t i = 0; i < tasks.size(); ++i)
            if (tasks[i].kind == TrialKind::SearchControl) first = options[i];
        std::stable_sort(plan.order.begin(), plan.order.end(), [&](std::size_t a, std::size_t b) {
            return std::pair(options[a] != first, options[a]) < std::pair(options[b] != first, options[b]);
        });
    }
    plan.index_of.assign(tasks.size(), -1);
    for (std::size_t k = 0; k < plan.order.size(); ++k) {
        const std::size_t i = plan.order[k];
        plan.index_of[i] = static_cast<int>(k);
        const bool new_pair = k > 0 && (place(i).group != place(plan.order[k - 1]).group ||
                                        place(i).args != place(plan.order[k - 1]).args);
        if (plan.arrays.empty() || plan.arrays.back().options != options[i] || new_pair) {
            plan.arrays.push_back({.seq = static_cast<int>(plan.arrays.size()),
                                   .first_index = static_cast<int>(k),
                                   .tasks = 0,
                                   .options = options[i],
                                   .job_id = {}});
            if (!place(i).args.empty())
                plan.placement[std::to_string(plan.arrays.back().seq)] = place(i).args;
        }
        ++plan.arrays.back().tasks;
    }
    return plan;
}

// A trial whose sandbox did not become ready, finished as it is recorded: a build failure, or a contract
// violation (a patch out of its scope or touching a protected file).
void finish_unbuilt(TrialRow& row, const patch::Sandbox& box) {
    row.state = TrialState::Finished;
    if (box.state == patch::Sandbox::State::BuildFailure) {
        row.outcome = trial::Outcome::BuildFailure;
    } else {
        row.outcome = trial::Outcome::ContractViolation;
        row.violation = box.state == patch::Sandbox::State::OutOfScope ? trial::Violation::OutOfScope
                                                                       : trial::Violation::ProtectedChanged;
    }
    row.detail = box.detail;
    row.result_path = box.log.string();
}

// What the wrapper runs for one task: the candidate's environment and arguments (space::render) with the
// contract's fixed settings (steps, seed, binary; NCCL's transports for the doctor), and the command: the
// contract's, or its script, from the sandbox's copy when it lies in the workload tree (patches may touch
// it).
trial::ManifestTask manifest_task(const contract::Contract& contract, const Task& t,
                                  const patch::Sandbox& box, const space::Rendering& job) {
    const std::map<std::string, std::string> vars{{"source", box.source.string()},
                                                  {"build", box.build.string()},
                                                  {"contract_dir", contract.dir.string()}};
    const auto& inv = contract.invariants;
    trial::ManifestTask task;
    task.env = job.environment;
    if (t.kind == TrialKind::Doctor && contract::uses_nccl(contract)) task.env["NCCL_DEBUG"] = "INFO";
    if (!inv.steps_env.empty()) task.env[inv.steps_env] = std::to_string(inv.steps);
    const long long seed = t.seed.value_or(inv.seed);
    if (!inv.seed_env.empty()) task.env[inv.seed_env] = std::to_string(seed);
    if (!contract.workload.binary_env.empty())
        task.env[contract.workload.binary_env] = contract::substitute({contract.workload.binary}, vars)[0];
    if (!contract.workload.command.empty()) {
        task.command = contract::substitute(contract.workload.command, vars);
    } else {
        fs::path script = contract.workload.sbatch_script;
        auto rel = fs::relative(script, contract.workload.source);
        if (!rel.empty() && rel.native().rfind("..", 0) != 0) script = box.source / rel;
        task.command = {"bash", script.string()};
    }
    for (auto& a : contract::substitute(contract.workload.args, vars))
        task.command.push_back(std::move(a));
    task.args = job.arguments;
    if (!inv.seed_arg.empty())
        task.args.push_back(contract::substitute({inv.seed_arg}, {{"", std::to_string(seed)}})[0]);
    task.sbatch_options = job.sbatch_options;
    return task;
}

// Where a runnable task's trial `row` (stored, with its array index) runs and leaves its files: its trial
// directory `tdir`.
void address_task(trial::ManifestTask& task, const TrialRow& row, const patch::Sandbox& box,
                  const fs::path& tdir) {
    task.index = static_cast<std::uint32_t>(row.array_index);
    task.trial_id = std::to_string(row.id);
    task.kind = store::to_string(row.kind);
    task.candidate = row.candidate;
    task.build = box.build.string();
    task.workdir = tdir.string();
    task.result = row.result_path;
    task.log = (tdir / "log.txt").string();
}

// A batch whose control (TrialKind::SearchControl) is there to compare its candidates with, none of which
// built, runs no control (BatchStage::control_needs_candidate): the control is taken out of `tasks` and
// `boxes`. Whether it was.
bool drop_lone_control(std::vector<Task>& tasks, std::vector<patch::Sandbox>& boxes) {
    for (std::size_t i = 0; i < tasks.size(); ++i)
        if (tasks[i].kind == TrialKind::Search && boxes[i].state == patch::Sandbox::State::Ready)
            return false;
    bool dropped = false;
    for (std::size_t i = tasks.size(); i-- > 0;)
        if (tasks[i].kind == TrialKind::SearchControl) {
            tasks.erase(tasks.begin() + static_cast<std::ptrdiff_t>(i));
            boxes.erase(boxes.begin() + static_cast<std::ptrdiff_t>(i));
            dropped = true;
        }
    return dropped;
}

// A task's trial as the batch records it, before it has an array index.
TrialRow planned_row(std::int64_t batch_id, const Task& t, const patch::Sandbox& box) {
    TrialRow row;
    row.batch_id = batch_id;
    row.kind = t.kind;
    row.candidate = t.candidate.to_json();
    row.candidate_key = t.candidate.key();
    row.sandbox = box.hash;
    row.reason = t.reason;
    row.attempt = t.attempt;
    row.verification_id = t.verification_id;
    return row;
}

// The batch's plan recorded: its arrays and their placement, and its manifest written (its tasks in array
// order, the knobs it may set) with its digest. The manifest lies in the campaign directory, where a trial
// could rewrite it: ingest compares the settings each trial saw with this content only. A batch with nothing
// runnable is finished at once.
void record_plan(store::CampaignStore& store, const space::Space& space, std::int64_t batch_id,
                 const ArrayPlan& plan, trial::Manifest& manifest, const fs::path& mpath) {
    std::sort(manifest.tasks.begin(), manifest.tasks.end(),
              [](const trial::ManifestTask& a, const trial::ManifestTask& b) { return a.index < b.index; });
    for (const auto& a : plan.arrays)
        store.add_array(batch_id, a);
    if (!plan.placement.empty()) store.set_batch_placement(batch_id, plan.placement.dump());
    manifest.knobs = manifest_knobs(space, manifest.tasks);
    trial::write_manifest(mpath, manifest);
    store.set_batch_manifest(batch_id, mpath.string(), sha256_file_hex(mpath));
    if (plan.order.empty()) store.set_batch_finished(batch_id);
}

} // namespace

const BatchStage& BatchRunner::stage(store::BatchKind kind) const {
    static const BatchStage none;
    const auto it = stages_.find(kind);
    return it == stages_.end() ? none : it->second;
}

BatchRunner::Planned BatchRunner::plan(store::BatchKind kind, std::vector<Task> tasks,
                                       const std::vector<TaskPlacement>& placed) {
    if (!placed.empty() && placed.size() != tasks.size())
        throw Error("BatchRunner::plan: a placement per task or none", "", "one per task");
    auto cache = host_.sandbox_cache();
    host_.sandboxes_built(); // patch sets built now have their own estimate
    std::vector<patch::Sandbox> boxes;
    for (const auto& t : tasks) {
        c_.contract.space.check(t.candidate);
        boxes.push_back(cache.materialize(host_.patch_set(t.candidate)));
    }
    const auto& stage = this->stage(kind);
    Planned planned;
    planned.control_dropped = stage.control_needs_candidate && drop_lone_control(tasks, boxes);
    // Each task's candidate as its job gets it (space::render): the environment, arguments, sbatch options.
    std::vector<space::Rendering> job(tasks.size());
    std::vector<std::vector<std::string>> options(tasks.size());
    std::vector<char> runnable(tasks.size());
    for (std::size_t i = 0; i < tasks.size(); ++i) {
        job[i] = space::render(c_.contract.space, tasks[i].candidate, c_.contract.workload.env);
        options[i] = job[i].sbatch_options;
        runnable[i] = boxes[i].state == patch::Sandbox::State::Ready;
    }
    const auto plan = plan_arrays(tasks, runnable, options, stage.concurrent, placed);

    // A search trial whose first timed steps are slower than the incumbent by more than max(MDE, 10%) cannot
    // be promoted: the wrapper stops it there (trial::Outcome::StoppedSlow) rather than run its other steps.
    store::Transaction tx(c_.store.db());
    const auto batch_id = c_.store.add_batch(kind, "");
    const fs::path bdir = c_.dir / "batches" / std::to_string(batch_id);
    fs::path control_log; // the batch's control's, which its search trials are compared with as they run
    for (std::size_t i = 0; i < tasks.size(); ++i)
        if (tasks[i].kind == TrialKind::SearchControl && runnable[i])
            control_log = bdir / std::to_string(plan.index_of[i]) / "log.txt";
    const auto slow_stop = stage.slow_stop ? stage.slow_stop(control_log) : std::nullopt;
    // A candidate measured before runs again to be measured again (the search's re-measure of a promising
    // one): it is not stopped early, least of all against its own earlier ratio slowed by the MDE.
    std::set<std::string> measured;
    if (slow_stop)
        for (const auto& t : c_.store.trials({.kinds = {TrialKind::Search}, .outcome = trial::Outcome::Ok}))
            measured.insert(t.candidate_key);
    fs::create_directories(bdir);
    trial::Manifest manifest;
    manifest.campaign = c_.store.meta("id").value_or("");
    manifest.batch = batch_id;
    manifest.kind = store::to_string(kind);
    manifest.metrics = c_.contract.metrics;
    int failed_index = 0;
    for (std::size_t i = 0; i < tasks.size(); ++i) {
        const auto& t = tasks[i];
        TrialRow row = planned_row(batch_id, t, boxes[i]);
        if (!runnable[i]) {
            row.array_index = --failed_index;
            row.id = c_.store.add_trial(row);
            finish_unbuilt(row, boxes[i]);
            c_.store.update_trial(row);
            continue;
        }
        row.array_index = plan.index_of[i];
        const fs::path tdir = bdir / std::to_string(row.array_index);
        // Made now, not by the task's wrapper: a search trial that starts before its batch's control opens
        // the control's directory at its start (trial::execute), and would else fall back to the absolute
        // rule.
        fs::create_directories(tdir);
        row.result_path = (tdir / "result.json").string();
        row.id = c_.store.add_trial(row);
        auto task = manifest_task(c_.contract, t, boxes[i], job[i]);
        if (t.kind == TrialKind::Search && !measured.count(row.candidate_key)) task.stop_slow = slow_stop;
        address_task(task, row, boxes[i], tdir);
        manifest.tasks.push_back(std::move(task));
    }
    record_plan(c_.store, c_.contract.space, batch_id, plan, manifest, bdir / "manifest.json");
    tx.commit();
    planned.id = batch_id;
    return planned;
}

void BatchRunner::mark_started(const std::string& scheduler_name) {
    c_.store.mark_started(store::now_seconds());
    if (!scheduler_name.empty() && !c_.store.meta("scheduler"))
        c_.store.set_meta("scheduler", scheduler_name);
}

namespace {

// What the batch runner says, through Host::say.
using Tell = std::function<void(const std::string&)>;

// A scheduler that has run this campaign's batches (`ran_here`) and stops answering (slurmctld restarting) is
// waited out, with a message now and then. One that never ran a batch of it is waited for first_answer_wait
// at most: no Slurm here is an error said at once, with nothing charged to the budget, not a wait without
// end. False when stopped while waiting.
bool wait_for_answer(scheduler::Scheduler& sched, bool ran_here, const RunOptions& o, const Tell& tell,
                     const std::function<bool()>& stopping) {
    const auto give_up = std::chrono::steady_clock::now() + o.first_answer_wait;
    for (int waited = 0;; ++waited) {
        std::string why;
        if (sched.reachable(&why)) return true;
        if (!ran_here && std::chrono::steady_clock::now() >= give_up)
            throw Error(fmt::format("{} does not answer ({}), and no batch of this campaign ran on it yet",
                                    sched.name(), why),
                        "infrarsi run --scheduler " + sched.name(),
                        "a Slurm that answers `scontrol ping` on this host, or --scheduler local to run the "
                        "trials here");
        if (waited % 30 == 0) tell("waiting for " + sched.name() + " to answer: " + why);
        if (stopping()) return false;
        std::this_thread::sleep_for(std::chrono::seconds(1));
    }
}

// The resources every array of a batch asks for: the contract's.
void ask_for_resources(scheduler::ArrayJob& job, const contract::Resources& res) {
    job.partition = res.partition;
    job.nodes = res.nodes;
    job.ntasks_per_node = res.ntasks_per_node;
    job.cpus_per_task = res.cpus_per_task;
    job.mem = res.mem;
    job.mem_bytes = res.mem_bytes;
    job.time_limit = res.time_limit;
    job.time_limit_s = res.time_limit_s;
    job.sbatch_args = res.sbatch_args;
}

// Releases a batch's arrays, each recorded; their ids (and options) for people.
std::string release_arrays(scheduler::Scheduler& sched, const std::vector<store::ArrayRow>& arrays) {
    std::string ids;
    for (const auto& a : arrays) {
        sched.release(a.job_id);
        ids += (ids.empty() ? "" : ", ") + a.job_id +
               (a.options.empty() ? "" : " (" + fmt::format("{}", fmt::join(a.options, " ")) + ")");
    }
    return ids;
}

} // namespace

void BatchRunner::submit(std::int64_t batch_id, const RunOptions& o) {
    auto b = c_.store.batch(batch_id);
    if (b.state != store::BatchState::Planned) return;
    if (b.kind ==
        store::BatchKind::Submitted) { // the user's job, submitted already: only its id was not recorded yet
        c_.store.set_array_submitted(batch_id, 0, c_.store.meta("tune_job_id").value_or(""));
        c_.store.set_batch_submitted(batch_id);
        mark_started("");
        return;
    }
    int runnable = 0;
    for (const auto& t : c_.store.trials_of_batch(batch_id))
        if (t.array_index >= 0) ++runnable;
    if (runnable == 0) {
        c_.store.set_batch_finished(batch_id);
        return;
    }
    const std::string name = fmt::format("infrarsi-{}-b{}", c_.store.meta("id").value_or("x"), batch_id);
    auto& sched = host_.scheduler(o);
    const bool ran_here = c_.store.meta("scheduler") == sched.name();
    if (!wait_for_answer(
            sched, ran_here, o, [&](const std::string& m) { host_.say(o, m); },
            [&] { return host_.stopping(o); }))
        return;
    const auto& res = c_.contract.resources;
    const fs::path bdir = c_.dir / "batches" / std::to_string(batch_id);
    // Each array is submitted held and its id stored before the next is submitted (a crash in between leaves
    // recorded held arrays and, at most, one held one that a later submit cancels by name), and all are
    // released once all are recorded. Each waits for the one before it, so the throttle holds across them.
    const auto arrays = c_.store.arrays(batch_id);
    const auto avoid = host_.nodes_to_avoid(sched); // the doctor's slow nodes, where enough others remain
    std::string previous;
    for (const auto& a : arrays) {
        if (!a.job_id.empty()) {
            previous = a.job_id;
            continue;
        }
        scheduler::ArrayJob job;
        job.name = a.seq == 0 ? name : fmt::format("{}-a{}", name, a.seq);
        job.script = trial_script();
        job.first_index = a.first_index;
        job.tasks = a.tasks;
        job.after = previous;
        job.max_concurrent = stage(b.kind).concurrent ? res.max_concurrent : 1;
        job.output = (bdir / "slurm-%A_%a.out").string();
        job.workdir = bdir;
        job.env = {{"INFRARSI_MANIFEST", b.manifest}, {"INFRARSI_BIN", infrarsi_command().string()}};
        // The bank this run uses (--bank may differ from the environment's): hidden from the trial's steps.
        if (!o.bank.empty()) job.env["INFRARSI_BANK"] = fs::absolute(o.bank).string();
        ask_for_resources(job, res);
        job.options = a.options;
        job.placement = scheduler::excluding(array_placement(batch_id, a.seq), avoid);
        const std::string id = sched.submit_held(job);
        c_.store.set_array_submitted(batch_id, a.seq, id); // recorded before it can run
        mark_started(sched.name());
        previous = id;
    }
    c_.store.set_batch_submitted(batch_id);
    const std::string ids = release_arrays(sched, c_.store.arrays(batch_id));
    host_.say(o, fmt::format("batch {} ({}, {} trials) submitted to {} as job array{} {}", batch_id,
                             store::to_string(b.kind), runnable, sched.name(), arrays.size() > 1 ? "s" : "",
                             ids));
}

std::vector<std::string> BatchRunner::array_placement(std::int64_t batch_id, int seq) {
    const auto b = c_.store.batch(batch_id);
    const auto j = json::parse(b.placement.empty() ? "{}" : b.placement);
    const auto it = j.find(std::to_string(seq));
    return it == j.end() ? std::vector<std::string>{} : it->get<std::vector<std::string>>();
}

namespace {

// A task missing from the answer of a scheduler that answers, for longer than the grace, will never end: it
// ends here, cancelled, and its candidate is re-queued (a search trial) like any cancelled one. A scheduler
// that does not answer (slurmctld restarting) proves nothing. Returns the records of the tasks it ended now.
std::vector<slurm::JobRecord> end_lost_tasks(scheduler::Scheduler& sched, scheduler::LostTasks& lost,
                                             const std::vector<slurm::JobRecord>& records,
                                             const std::string& job_id, std::chrono::seconds grace,
                                             const Tell& tell) {
    std::vector<slurm::JobRecord> ended;
    if (!lost.any_missing(records)) return ended;
    const bool answered = sched.reachable(nullptr);
    for (const int index : lost.observe(records, answered, std::chrono::steady_clock::now())) {
        slurm::JobRecord r;
        r.job_id = fmt::format("{}_{}", job_id, index);
        r.array_job_id = job_id;
        r.array_task_id = index;
        r.state = slurm::JobState::Cancelled;
        r.raw_state = fmt::format("LOST (unknown to {} for {} s)", sched.name(), grace.count());
        tell(fmt::format("job {}: {} no longer knows it (not queued, running or ended) after {} s; its trial "
                         "ends lost and is re-queued",
                         r.job_id, sched.name(), grace.count()));
        try {
            sched.cancel(r.job_id); // should it come back, it must not run as well
        } catch (const Error&) {
        }
        ended.push_back(std::move(r));
    }
    return ended;
}

// Held by its user after submit released it: slurmctld restarted from state saved before the release,
// which it has forgotten. Released again, or it would wait forever.
void release_held_again(scheduler::Scheduler& sched, const std::vector<slurm::JobRecord>& records,
                        const std::string& job_id, const Tell& tell) {
    if (std::none_of(records.begin(), records.end(), [](const slurm::JobRecord& r) {
            return r.state == slurm::JobState::Pending && r.reason == "JobHeldUser";
        }))
        return;
    tell(fmt::format("job {} is held again (a release {} forgot): releasing it", job_id, sched.name()));
    try {
        sched.release(job_id);
    } catch (const Error& e) {
        tell(e.what());
    }
}

// A task Slurm requeued (a contract with --requeue) whose relaunch failed is held until someone releases it:
// cancel it (once: `cancelled`), and the trial is re-queued (not counted) like any cancelled one.
void cancel_requeue_held(scheduler::Scheduler& sched, const std::vector<slurm::JobRecord>& records,
                         std::set<std::string>& cancelled, const Tell& tell) {
    for (const auto& r : records) {
        const bool requeue_held =
            (r.state == slurm::JobState::Pending && r.reason.find("requeued held") != std::string::npos) ||
            r.raw_state.rfind("REQUEUE_HOLD", 0) == 0;
        if (!requeue_held || !cancelled.insert(r.job_id).second) continue;
        tell(fmt::format("job {}: Slurm requeued it and holds it ({}); cancelling it, its trial is re-queued",
                         r.job_id, r.reason));
        try {
            sched.cancel(r.job_id);
        } catch (const Error& e) {
            tell(e.what());
        }
    }
}

int finished_tasks(const std::vector<slurm::JobRecord>& records) {
    int finished = 0;
    for (const auto& r : records)
        if (slurm::is_finished(r.state) && task_index(r)) ++finished;
    return finished;
}

} // namespace

void BatchRunner::await(std::int64_t batch_id, const RunOptions& o) {
    auto b = c_.store.batch(batch_id);
    if (b.state != store::BatchState::Submitted) return;
    // The arrays in order: the local backend runs a job's tasks only while it is waited on, so this also
    // keeps its arrays one after another.
    std::vector<slurm::JobRecord> all;
    std::set<std::string> cancelled;
    auto& sched =
        b.kind == store::BatchKind::Submitted ? host_.slurm_for_submitted_job() : host_.scheduler(o);
    evidence_.spool = host_.plugin_spool(sched, o);
    evidence_.scheduler = sched.name();
    const Tell tell = [&](const std::string& m) { host_.say(o, m); };
    for (const auto& a : c_.store.arrays(batch_id)) {
        scheduler::LostTasks lost(a.first_index, a.tasks, o.lost_grace);
        std::vector<slurm::JobRecord> lost_records; // tasks the scheduler forgot, ended here
        for (;;) {
            if (host_.stopping(o)) return;
            auto records = sched.wait(a.job_id, std::chrono::seconds(5), o.poll);
            for (auto& r : end_lost_tasks(sched, lost, records, a.job_id, o.lost_grace, tell))
                lost_records.push_back(std::move(r));
            release_held_again(sched, records, a.job_id, tell);
            for (const auto& r : lost_records)
                if (std::none_of(records.begin(), records.end(),
                                 [&](const slurm::JobRecord& x) { return task_index(x) == r.array_task_id; }))
                    records.push_back(r);
            const int finished = finished_tasks(records);
            cancel_requeue_held(sched, records, cancelled, tell);
            if (finished >= a.tasks) {
                all.insert(all.end(), records.begin(), records.end());
                break;
            }
        }
    }
    user_jobs_ = jobs_not_ours(sched, batch_id);
    ingest(batch_id, all);
}

void BatchRunner::resume_open(const RunOptions& o) {
    for (const auto& b : c_.store.batches()) {
        if (b.state == store::BatchState::Finished) continue;
        // A batch planned by an older orchestrator: its trials will read the manifest with this reader.
        try {
            if (!b.manifest.empty() && trial::upgrade_manifest(b.manifest))
                host_.say(o, fmt::format("batch {}: manifest rewritten as {}", b.id, trial::kManifestFormat));
        } catch (const Error& e) {
            host_.say(o, fmt::format("batch {}: {}", b.id, e.what()));
        }
        if (b.state == store::BatchState::Submitted && b.kind != store::BatchKind::Submitted) {
            // Released already, unless the process died right after recording the ids. A job Slurm has
            // forgotten (finished longer than MinJobAge ago) is read from accounting by await.
            for (const auto& a : c_.store.arrays(b.id)) {
                try {
                    host_.scheduler(o).release(a.job_id);
                } catch (const Error& e) {
                    host_.say(o, fmt::format("batch {}: {}", b.id, e.what()));
                }
            }
            host_.say(o, fmt::format("re-attaching to batch {} (job {})", b.id, b.job_id));
        }
        submit(b.id, o);
        await(b.id, o);
        if (host_.stopping(o)) return;
    }
}

void BatchRunner::remove_job_files(store::TrialRow& t) {
    const auto mode = c_.contract.workload.keep_job_files;
    if (mode == contract::KeepJobFiles::All || t.array_index < 0) return;
    const fs::path rel = fs::path("batches") / std::to_string(t.batch_id) / std::to_string(t.array_index);
    try {
        const auto removed = trial::remove_job_files(c_.dir, rel, mode);
        if (removed.entries > 0) {
            t.measurements.job_files_removed = trial::JobFilesRemoved{removed.entries, removed.bytes};
            c_.store.log(
                fmt::format("trial {}: {} of the job's files removed from {} ({:.1f} MiB; [workload] "
                            "keep_job_files = \"{}\")",
                            t.id, removed.entries, rel.string(), removed.bytes / 1048576.0,
                            contract::keep_job_files_names.name(mode)));
        }
        if (!removed.left.empty())
            c_.store.log(
                fmt::format("trial {}: of the job's files, left: {}", t.id, fmt::join(removed.left, "; ")));
    } catch (const Error& e) {
        c_.store.log(fmt::format("trial {}: the job's files not removed: {}", t.id, e.what()));
    }
}

trial::LossCheck BatchRunner::loss_check(store::BatchKind kind) {
    if (stage(kind).own_seeds) return {};
    const auto& inv = c_.contract.invariants;
    if (inv.loss_mode == contract::LossMode::FinalEval) {
        // Against the doctor's seeds, once the doctor has them (its own runs are what calibrates).
        const auto d = c_.store.baseline();
        if (!d || d->eval_losses.empty()) return {};
        return [ref = verify::eval_reference(d->eval_losses), &inv](const std::vector<double>&,
                                                                    std::optional<double> final_eval) {
            return verify::check_eval_loss(ref, final_eval, inv);
        };
    }
    auto reference = host_.reference_losses();
    if (reference.empty()) return {};
    return
        [reference = std::move(reference), &inv](const std::vector<double>& losses, std::optional<double>) {
            return verify::check_loss(reference, losses, inv);
        };
}

void BatchRunner::settle(store::TrialRow& t, const trial::TrialRecord& r, bool submitted) {
    store::record_assessment(t, r);
    // The job the user submitted ran as the user runs it, without the contract's [workload] args (a short
    // run's step count, say): fewer step lines than a trial prints says it ran another run than the
    // trials, not that the baseline breaks the contract. Not a baseline run then, and no failure.
    if (submitted && r.violation == trial::Violation::MissingSteps) {
        t.counted = false;
        c_.store.set_submitted_job("not adopted after it ran: " + r.detail +
                                   " (it ran without the contract's [workload] args)");
    }
    // Read: what the job wrote beside its result and log (checkpoints) goes, or stays within the bound
    // of [workload] keep_job_files. Nothing reads the trial directory after this but its result and log.
    if (!submitted) remove_job_files(t);
    if (trial::says_nothing(r.outcome)) {
        t.counted = false;
        if (t.kind == TrialKind::Search)
            c_.store.requeue({.candidate = t.candidate,
                              .reason = "re-queued after " + store::outcome_name(t) + ": " + t.reason,
                              .attempt = t.attempt + 1});
    }
}

void BatchRunner::ingest(std::int64_t batch_id, const std::vector<slurm::JobRecord>& records) {
    auto b = c_.store.batch(batch_id);
    std::map<int, slurm::JobRecord> by_index;
    for (const auto& r : records)
        if (auto i = task_index(r)) by_index[*i] = r;
    const bool submitted = b.kind == store::BatchKind::Submitted;
    const auto proof =
        submitted
            ? ManifestProof{}
            : manifest_proof(b, b.manifest_sha256.empty() ? std::nullopt : std::optional(b.manifest_sha256));
    // The doctor's startup and step pace, which later trials' step times are checked against.
    const auto run = c_.store.campaign_run();
    const auto startup = run.startup;         // none: not measured, the timing check is off
    const auto baseline_pace = run.step_pace; // none before the doctor measured it
    const auto losses = loss_check(b.kind);
    store::Transaction tx(c_.store.db());
    for (auto t : c_.store.trials_of_batch(batch_id)) {
        if (t.state != TrialState::Submitted) continue;
        auto it = by_index.find(t.array_index);
        if (it == by_index.end()) continue;
        const auto& rec = it->second;
        t.state = TrialState::Finished;
        t.node = rec.node_list;
        if (submitted) {
            t.job_id = rec.job_id;
            host_.take_submitted_output(t, rec);
        }
        const auto jobs = self_submitted_during(rec);
        const auto r = trial::assess({
            .contract = c_.contract,
            .record = rec,
            .result_path = t.result_path,
            .slurm_output = slurm_output(b, t),
            .evidence_spool = evidence_.spool,
            .local_scheduler = evidence_.scheduler == "local",
            .doctor = t.kind == TrialKind::Doctor,
            .check_settings = proof.checked,
            .manifest = proof.manifest ? &*proof.manifest : nullptr,
            .manifest_problem = proof.problem,
            .array_index = static_cast<std::uint32_t>(t.array_index),
            .startup = startup,
            .baseline_pace = baseline_pace,
            .loss_check = losses,
            .self_submitted = jobs,
        });
        for (const auto& note : r.notes)
            c_.store.log(fmt::format("trial {}: {}", t.id, note));
        // Jobs of the user submitted while this trial ran that the campaign did not submit: a warning on the
        // trial, not a violation (self_submitted.cpp says why).
        if (!jobs.empty())
            c_.store.log(
                fmt::format("trial {}: {} job(s) of this user submitted while it ran that the campaign "
                            "did not submit (first: {})",
                            t.id, jobs.size(), jobs[0].job));
        settle(t, r, submitted);
        c_.store.update_trial(t);
        c_.store.log(fmt::format("trial {} ({}) {}: {}", t.id, store::to_string(t.kind),
                                 store::outcome_name(t), t.detail));
    }
    c_.store.set_batch_finished(batch_id);
    tx.commit();
    if (const auto& finish = stage(b.kind).finish) finish(batch_id);
}

} // namespace infrarsi::campaign
