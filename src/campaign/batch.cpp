// The batch runner: plan a batch (sandboxes, store rows, manifest), submit it held and release it, await it,
// re-attach to it after a restart, and ingest what its trials left (trial::classify). It never calls a stage.
#include "campaign/campaign.hpp"

#include "measure/log_format.hpp"
#include "measure/statistics.hpp"
#include "scheduler/lost_tasks.hpp"
#include "slurm/user_jobs.hpp"
#include "trial/evidence.hpp"
#include "trial/job_files.hpp"
#include "trial/outcome.hpp"
#include "trial/proof.hpp"
#include "trial/result.hpp"
#include "util/error.hpp"
#include "util/file_digest.hpp"
#include "util/install_paths.hpp"
#include "util/sha256.hpp"
#include "verify/verify.hpp"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

namespace infrarsi::campaign {

using nlohmann::json;
using store::TrialKind;
using store::TrialRow;
using store::TrialState;

namespace {

// The job's last lines: from the end of its output only (a 2 GiB log is not read to find them).
std::string last_lines(const fs::path& file, std::size_t n) {
    std::istringstream in(trial::read_trial_output(file, 64u << 10).text);
    std::vector<std::string> lines;
    std::string line;
    while (std::getline(in, line)) {
        lines.push_back(line);
        if (lines.size() > n) lines.erase(lines.begin());
    }
    std::string s;
    for (const auto& l : lines)
        s += (s.empty() ? "" : " | ") + l;
    return s;
}

// A record's task: an array task's index; a plain job (the one a user submitted, kSubmittedBatch) is task
// 0; a record of several pending tasks ("12_[0-3]") is none.
std::optional<int> task_index(const slurm::JobRecord& r) {
    if (r.array_task_id) return r.array_task_id;
    if (r.job_id.find_first_of("_[") == std::string::npos) return 0;
    return std::nullopt;
}

// A file the job writes: bounded, non-blocking, never through a symlink (trial::read_trial_output).
std::string read_text(const fs::path& file) {
    return trial::read_trial_output(file).text;
}

std::string manifest_digest_key(std::int64_t batch_id) {
    return fmt::format("manifest_sha256.{}", batch_id);
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

std::int64_t Campaign::plan_batch(const std::string& kind, const std::vector<Task>& tasks,
                                  const std::vector<TaskPlacement>& placed) {
    if (!placed.empty() && placed.size() != tasks.size())
        throw Error("plan_batch: a placement per task or none", "", "one per task");
    const auto place = [&](std::size_t i) { return placed.empty() ? TaskPlacement{} : placed[i]; };
    auto cache = sandbox_cache();
    estimate_sandboxes_.clear(); // patch sets built now have their own estimate
    std::vector<patch::Sandbox> boxes;
    for (const auto& t : tasks) {
        contract_.space.check(t.candidate);
        boxes.push_back(cache.materialize(patch_set(t.candidate)));
    }

    // Array indices: the runnable tasks in array order. Trials whose sbatch-option knobs differ cannot share
    // an array job; the arrays of a batch run one after another. A search batch is grouped by option set (one
    // array per set); doctor and verification batches keep their order, so an array there is a run of
    // consecutive tasks with the same options and placement group (a verification's pair: its own arrays).
    std::vector<std::size_t> order;
    std::vector<std::vector<std::string>> options(tasks.size());
    for (std::size_t i = 0; i < tasks.size(); ++i) {
        options[i] = contract_.space.sbatch_options(tasks[i].candidate);
        if (boxes[i].state == patch::Sandbox::State::Ready) order.push_back(i);
    }
    if (kind == "search") {
        // The control's option set first (the control first in it): it starts with the first candidates.
        std::vector<std::string> first;
        for (std::size_t i = 0; i < tasks.size(); ++i)
            if (tasks[i].kind == TrialKind::SearchControl) first = options[i];
        std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
            return std::pair(options[a] != first, options[a]) < std::pair(options[b] != first, options[b]);
        });
    }
    std::vector<int> index_of(tasks.size(), -1);
    std::vector<store::ArrayRow> arrays;
    json placement = json::object(); // array seq -> ArrayJob::placement, for arrays that have one
    for (std::size_t k = 0; k < order.size(); ++k) {
        const std::size_t i = order[k];
        index_of[i] = static_cast<int>(k);
        // A verification pair is its own array(s), so it can be placed on its node.
        const bool new_pair = k > 0 && (place(i).group != place(order[k - 1]).group ||
                                        place(i).args != place(order[k - 1]).args);
        if (arrays.empty() || arrays.back().options != options[i] || new_pair) {
            arrays.push_back({.seq = static_cast<int>(arrays.size()),
                              .first_index = static_cast<int>(k),
                              .tasks = 0,
                              .options = options[i],
                              .job_id = {}});
            if (!place(i).args.empty()) placement[std::to_string(arrays.back().seq)] = place(i).args;
        }
        ++arrays.back().tasks;
    }

    // A search trial whose first timed steps are slower than the incumbent by more than max(MDE, 10%) cannot
    // be promoted: the wrapper stops it there (trial::Outcome::StoppedSlow) rather than run its other steps.
    store::Transaction tx(store_->db());
    const auto batch_id = store_->add_batch(kind, "");
    const fs::path bdir = dir_ / "batches" / std::to_string(batch_id);
    fs::path control_log; // the batch's control's, which its search trials are compared with as they run
    for (std::size_t i = 0; i < tasks.size(); ++i)
        if (tasks[i].kind == TrialKind::SearchControl && boxes[i].state == patch::Sandbox::State::Ready)
            control_log = bdir / std::to_string(index_of[i]) / "log.txt";
    const auto slow_stop = kind == "search" ? search_slow_stop(control_log) : std::nullopt;
    // A candidate measured before runs again to be measured again (the search's re-measure of a promising
    // one): it is not stopped early, least of all against its own earlier ratio slowed by the MDE.
    std::set<std::string> measured;
    if (slow_stop)
        for (const auto& t : store_->trials({.kinds = {TrialKind::Search}, .outcome = trial::Outcome::Ok}))
            measured.insert(t.candidate_key);
    fs::create_directories(bdir);
    trial::Manifest manifest;
    manifest.campaign = store_->meta("id").value_or("");
    manifest.batch = batch_id;
    manifest.kind = kind;
    manifest.metrics = contract_.metrics;
    int failed_index = 0;
    for (std::size_t i = 0; i < tasks.size(); ++i) {
        const auto& t = tasks[i];
        const auto& box = boxes[i];
        TrialRow row;
        row.batch_id = batch_id;
        row.kind = t.kind;
        row.candidate = t.candidate.to_json();
        row.candidate_key = t.candidate.key();
        row.sandbox = box.hash;
        row.reason = t.reason;
        row.attempt = t.attempt;
        row.verification_id = t.verification_id;
        if (box.state != patch::Sandbox::State::Ready) {
            row.array_index = --failed_index;
            row.id = store_->add_trial(row);
            row.state = TrialState::Finished;
            if (box.state == patch::Sandbox::State::BuildFailure) {
                row.outcome = trial::Outcome::BuildFailure;
            } else {
                row.outcome = trial::Outcome::ContractViolation;
                row.violation = box.state == patch::Sandbox::State::OutOfScope
                                    ? trial::Violation::OutOfScope
                                    : trial::Violation::ProtectedChanged;
            }
            row.detail = box.detail;
            row.result_path = box.log.string();
            store_->update_trial(row);
            continue;
        }
        row.array_index = index_of[i];
        const fs::path tdir = bdir / std::to_string(row.array_index);
        // Made now, not by the task's wrapper: a search trial that starts before its batch's control opens
        // the control's directory at its start (trial::execute), and would else fall back to the absolute
        // rule.
        fs::create_directories(tdir);
        row.result_path = (tdir / "result.json").string();
        row.id = store_->add_trial(row);
        std::map<std::string, std::string> vars{{"source", box.source.string()},
                                                {"build", box.build.string()},
                                                {"contract_dir", contract_.dir.string()}};
        trial::ManifestTask task;
        task.env = contract_.workload.env;
        for (const auto& [k, v] : contract_.space.environment(t.candidate))
            task.env[k] = v;
        // The doctor reads the baseline's NCCL transports from its output (nccl_check.cpp).
        if (t.kind == TrialKind::Doctor && contract::uses_nccl(contract_)) task.env["NCCL_DEBUG"] = "INFO";
        if (!contract_.invariants.steps_env.empty())
            task.env[contract_.invariants.steps_env] = std::to_string(contract_.invariants.steps);
        const long long seed = t.seed.value_or(contract_.invariants.seed);
        if (!contract_.invariants.seed_env.empty())
            task.env[contract_.invariants.seed_env] = std::to_string(seed);
        if (!contract_.workload.binary_env.empty())
            task.env[contract_.workload.binary_env] =
                contract::substitute({contract_.workload.binary}, vars)[0];
        if (!contract_.workload.command.empty()) {
            task.command = contract::substitute(contract_.workload.command, vars);
        } else {
            // A script inside the workload tree runs from the sandbox copy (patches may touch it).
            fs::path script = contract_.workload.sbatch_script;
            auto rel = fs::relative(script, contract_.workload.source);
            if (!rel.empty() && rel.native().rfind("..", 0) != 0) script = box.source / rel;
            task.command = {"bash", script.string()};
        }
        for (auto& a : contract::substitute(contract_.workload.args, vars))
            task.command.push_back(std::move(a));
        task.args = contract_.space.arguments(t.candidate);
        if (!contract_.invariants.seed_arg.empty())
            task.args.push_back(
                contract::substitute({contract_.invariants.seed_arg}, {{"", std::to_string(seed)}})[0]);
        task.sbatch_options = options[i];
        if (t.kind == TrialKind::Search && !measured.count(row.candidate_key)) task.stop_slow = slow_stop;
        task.index = static_cast<std::uint32_t>(row.array_index);
        task.trial_id = std::to_string(row.id);
        task.kind = store::to_string(t.kind);
        task.candidate = row.candidate;
        task.build = box.build.string();
        task.workdir = tdir.string();
        task.result = row.result_path;
        task.log = (tdir / "log.txt").string();
        manifest.tasks.push_back(std::move(task));
        fs::create_directories(tdir);
    }
    std::sort(manifest.tasks.begin(), manifest.tasks.end(),
              [](const trial::ManifestTask& a, const trial::ManifestTask& b) { return a.index < b.index; });
    for (const auto& a : arrays)
        store_->add_array(batch_id, a);
    if (!placement.empty()) store_->set_meta(fmt::format("placement.{}", batch_id), placement.dump());
    manifest.knobs = manifest_knobs(contract_.space, manifest.tasks);
    const fs::path mpath = bdir / "manifest.json";
    trial::write_manifest(mpath, manifest);
    store_->set_batch_manifest(batch_id, mpath.string());
    // The manifest lies in the campaign directory, where a trial could rewrite it: ingest compares the
    // settings each trial saw with this content only.
    store_->set_meta(manifest_digest_key(batch_id), sha256_file_hex(mpath));
    if (order.empty()) store_->set_batch_finished(batch_id);
    tx.commit();
    return batch_id;
}

void Campaign::mark_started(const std::string& scheduler_name) {
    if (!store_->meta("started")) store_->set_meta("started", fmt::format("{:.3f}", store::now_seconds()));
    if (!scheduler_name.empty() && !store_->meta("scheduler")) store_->set_meta("scheduler", scheduler_name);
}

void Campaign::submit_batch(std::int64_t batch_id, const RunOptions& o) {
    auto b = store_->batch(batch_id);
    if (b.state != "planned") return;
    if (b.kind == kSubmittedBatch) { // the user's job, submitted already: only its id was not recorded yet
        store_->set_array_submitted(batch_id, 0, store_->meta("tune_job_id").value_or(""));
        store_->set_batch_submitted(batch_id);
        mark_started("");
        return;
    }
    int runnable = 0;
    for (const auto& t : store_->trials_of_batch(batch_id))
        if (t.array_index >= 0) ++runnable;
    if (runnable == 0) {
        store_->set_batch_finished(batch_id);
        return;
    }
    const std::string name = fmt::format("infrarsi-{}-b{}", store_->meta("id").value_or("x"), batch_id);
    auto& sched = scheduler(o);
    // A scheduler that has run this campaign's batches and stops answering (slurmctld restarting) is waited
    // out, with a message now and then. One that never ran a batch of it is waited for first_answer_wait at
    // most: no Slurm here is an error said at once, with nothing charged to the budget, not a wait without
    // end.
    const bool ran_here = store_->meta("scheduler") == sched.name();
    const auto give_up = std::chrono::steady_clock::now() + o.first_answer_wait;
    for (int waited = 0;; ++waited) {
        std::string why;
        if (sched.reachable(&why)) break;
        if (!ran_here && std::chrono::steady_clock::now() >= give_up)
            throw Error(fmt::format("{} does not answer ({}), and no batch of this campaign ran on it yet",
                                    sched.name(), why),
                        "infrarsi run --scheduler " + sched.name(),
                        "a Slurm that answers `scontrol ping` on this host, or --scheduler local to run the "
                        "trials here");
        if (waited % 30 == 0) say(o, "waiting for " + sched.name() + " to answer: " + why);
        if (stopping(o)) return;
        std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    const auto& res = contract_.resources;
    const fs::path bdir = dir_ / "batches" / std::to_string(batch_id);
    // Each array is submitted held and its id stored before the next is submitted (a crash in between leaves
    // recorded held arrays and, at most, one held one that a later submit cancels by name), and all are
    // released once all are recorded. Each waits for the one before it, so the throttle holds across them.
    const auto arrays = store_->arrays(batch_id);
    const auto avoid = nodes_to_avoid(sched); // the doctor's slow nodes, where enough others remain
    std::string previous;
    for (const auto& a : arrays) {
        if (a.job_id.empty()) {
            scheduler::ArrayJob job;
            job.name = a.seq == 0 ? name : fmt::format("{}-a{}", name, a.seq);
            job.script = trial_script();
            job.first_index = a.first_index;
            job.tasks = a.tasks;
            job.after = previous;
            job.max_concurrent = b.kind == "search" ? res.max_concurrent : 1;
            job.output = (bdir / "slurm-%A_%a.out").string();
            job.workdir = bdir;
            job.env = {{"INFRARSI_MANIFEST", b.manifest}, {"INFRARSI_BIN", infrarsi_command().string()}};
            // The bank this run uses (--bank may differ from the environment's): hidden from the trial's
            // steps.
            if (!o.bank.empty()) job.env["INFRARSI_BANK"] = fs::absolute(o.bank).string();
            job.partition = res.partition;
            job.nodes = res.nodes;
            job.ntasks_per_node = res.ntasks_per_node;
            job.cpus_per_task = res.cpus_per_task;
            job.mem = res.mem;
            job.mem_bytes = res.mem_bytes;
            job.time_limit = res.time_limit;
            job.time_limit_s = res.time_limit_s;
            job.sbatch_args = res.sbatch_args;
            job.options = a.options;
            job.placement = scheduler::excluding(array_placement(batch_id, a.seq), avoid);
            const std::string id = sched.submit_held(job);
            store_->set_array_submitted(batch_id, a.seq, id); // recorded before it can run
            mark_started(sched.name());
            previous = id;
        } else {
            previous = a.job_id;
        }
    }
    store_->set_batch_submitted(batch_id);
    std::string ids;
    for (const auto& a : store_->arrays(batch_id)) {
        sched.release(a.job_id);
        ids += (ids.empty() ? "" : ", ") + a.job_id +
               (a.options.empty() ? "" : " (" + fmt::format("{}", fmt::join(a.options, " ")) + ")");
    }
    say(o, fmt::format("batch {} ({}, {} trials) submitted to {} as job array{} {}", batch_id, b.kind,
                       runnable, sched.name(), arrays.size() > 1 ? "s" : "", ids));
}

std::vector<std::string> Campaign::array_placement(std::int64_t batch_id, int seq) {
    const auto j = json::parse(store_->meta(fmt::format("placement.{}", batch_id)).value_or("{}"));
    const auto it = j.find(std::to_string(seq));
    return it == j.end() ? std::vector<std::string>{} : it->get<std::vector<std::string>>();
}

void Campaign::await_batch(std::int64_t batch_id, const RunOptions& o) {
    auto b = store_->batch(batch_id);
    if (b.state != "submitted") return;
    // The arrays in order: the local backend runs a job's tasks only while it is waited on, so this also
    // keeps its arrays one after another.
    std::vector<slurm::JobRecord> all;
    std::set<std::string> cancelled;
    auto& sched = b.kind == kSubmittedBatch ? slurm_for_submitted_job() : scheduler(o);
    evidence_spool_ = plugin_spool(sched, o);
    evidence_scheduler_ = sched.name();
    for (const auto& a : store_->arrays(batch_id)) {
        scheduler::LostTasks lost(a.first_index, a.tasks, o.lost_grace);
        std::vector<slurm::JobRecord> lost_records; // tasks the scheduler forgot, ended here
        for (;;) {
            if (stopping(o)) return;
            auto records = sched.wait(a.job_id, std::chrono::seconds(5), o.poll);
            // A task missing from the answer of a scheduler that answers, for longer than the grace, will
            // never end: it ends here, cancelled, and its candidate is re-queued (a search trial) like any
            // cancelled one. A scheduler that does not answer (slurmctld restarting) proves nothing.
            if (lost.any_missing(records)) {
                const bool answered = sched.reachable(nullptr);
                for (const int index : lost.observe(records, answered, std::chrono::steady_clock::now())) {
                    slurm::JobRecord r;
                    r.job_id = fmt::format("{}_{}", a.job_id, index);
                    r.array_job_id = a.job_id;
                    r.array_task_id = index;
                    r.state = slurm::JobState::Cancelled;
                    r.raw_state =
                        fmt::format("LOST (unknown to {} for {} s)", sched.name(), o.lost_grace.count());
                    say(o, fmt::format(
                               "job {}: {} no longer knows it (not queued, running or ended) after {} s; "
                               "its trial ends lost and is re-queued",
                               r.job_id, sched.name(), o.lost_grace.count()));
                    try {
                        sched.cancel(r.job_id); // should it come back, it must not run as well
                    } catch (const Error&) {
                    }
                    lost_records.push_back(std::move(r));
                }
            }
            // Held by its user after submit_batch released it: slurmctld restarted from state saved before
            // the release, which it has forgotten. Released again, or it would wait forever.
            if (std::any_of(records.begin(), records.end(), [](const slurm::JobRecord& r) {
                    return r.state == slurm::JobState::Pending && r.reason == "JobHeldUser";
                })) {
                say(o, fmt::format("job {} is held again (a release {} forgot): releasing it", a.job_id,
                                   sched.name()));
                try {
                    sched.release(a.job_id);
                } catch (const Error& e) {
                    say(o, e.what());
                }
            }
            for (const auto& r : lost_records)
                if (std::none_of(records.begin(), records.end(),
                                 [&](const slurm::JobRecord& x) { return task_index(x) == r.array_task_id; }))
                    records.push_back(r);
            int finished = 0;
            for (const auto& r : records) {
                if (slurm::is_finished(r.state) && task_index(r)) ++finished;
                // A task Slurm requeued (a contract with --requeue) whose relaunch failed is held until
                // someone releases it: cancel it, and the trial is re-queued (not counted) like any
                // cancelled one.
                const bool requeue_held = (r.state == slurm::JobState::Pending &&
                                           r.reason.find("requeued held") != std::string::npos) ||
                                          r.raw_state.rfind("REQUEUE_HOLD", 0) == 0;
                if (requeue_held && cancelled.insert(r.job_id).second) {
                    say(o,
                        fmt::format("job {}: Slurm requeued it and holds it ({}); cancelling it, its trial "
                                    "is re-queued",
                                    r.job_id, r.reason));
                    try {
                        sched.cancel(r.job_id);
                    } catch (const Error& e) {
                        say(o, e.what());
                    }
                }
            }
            if (finished >= a.tasks) {
                all.insert(all.end(), records.begin(), records.end());
                break;
            }
        }
    }
    user_jobs_ = jobs_not_ours(sched, batch_id);
    ingest(batch_id, all);
}

void Campaign::resume_open_batches(const RunOptions& o) {
    for (const auto& b : store_->batches()) {
        if (b.state == "finished") continue;
        // A batch planned by an older orchestrator: its trials will read the manifest with this reader.
        try {
            if (!b.manifest.empty() && trial::upgrade_manifest(b.manifest))
                say(o, fmt::format("batch {}: manifest rewritten as {}", b.id, trial::kManifestFormat));
        } catch (const Error& e) {
            say(o, fmt::format("batch {}: {}", b.id, e.what()));
        }
        if (b.state == "submitted" && b.kind != kSubmittedBatch) {
            // Released already, unless the process died right after recording the ids. A job Slurm has
            // forgotten (finished longer than MinJobAge ago) is read from accounting by await_batch.
            for (const auto& a : store_->arrays(b.id)) {
                try {
                    scheduler(o).release(a.job_id);
                } catch (const Error& e) {
                    say(o, fmt::format("batch {}: {}", b.id, e.what()));
                }
            }
            say(o, fmt::format("re-attaching to batch {} (job {})", b.id, b.job_id));
        }
        submit_batch(b.id, o);
        await_batch(b.id, o);
        if (stopping(o)) return;
    }
}

void Campaign::remove_job_files(store::TrialRow& t) {
    const auto mode = contract_.workload.keep_job_files;
    if (mode == contract::KeepJobFiles::All || t.array_index < 0) return;
    const fs::path rel = fs::path("batches") / std::to_string(t.batch_id) / std::to_string(t.array_index);
    try {
        const auto removed = trial::remove_job_files(dir_, rel, mode);
        if (removed.entries > 0) {
            t.measurements["job_files_removed"] = {{"entries", removed.entries}, {"bytes", removed.bytes}};
            store_->log(fmt::format("trial {}: {} of the job's files removed from {} ({:.1f} MiB; [workload] "
                                    "keep_job_files = \"{}\")",
                                    t.id, removed.entries, rel.string(), removed.bytes / 1048576.0,
                                    contract::keep_job_files_names.name(mode)));
        }
        if (!removed.left.empty())
            store_->log(
                fmt::format("trial {}: of the job's files, left: {}", t.id, fmt::join(removed.left, "; ")));
    } catch (const Error& e) {
        store_->log(fmt::format("trial {}: the job's files not removed: {}", t.id, e.what()));
    }
}

void Campaign::ingest(std::int64_t batch_id, const std::vector<slurm::JobRecord>& records) {
    auto b = store_->batch(batch_id);
    std::map<int, slurm::JobRecord> by_index;
    for (const auto& r : records)
        if (auto i = task_index(r)) by_index[*i] = r;
    const auto reference = reference_losses();
    const auto& inv = contract_.invariants;
    json requeue = json::parse(store_->meta("requeue").value_or("[]"));
    const trial::Limits limits{contract_.resources.mem, contract_.resources.mem_bytes,
                               contract_.resources.time_limit, inv.steps,
                               measure::describe(contract_.metrics)};
    // The manifest entries the trials were to run, as the orchestrator wrote them (its digest was stored
    // then): a manifest changed since, or unreadable, proves no trial's settings.
    std::optional<trial::Manifest> manifest;
    std::string manifest_problem;
    // A batch an older orchestrator planned has no digest, and its wrapper recorded no settings: not checked.
    const auto digest = store_->meta(manifest_digest_key(batch_id));
    if (b.kind != kSubmittedBatch && !b.manifest.empty() && digest) {
        try {
            if (sha256_file_hex(b.manifest) != *digest)
                manifest_problem = "the batch manifest was changed after the orchestrator wrote it";
            else
                manifest = trial::read_manifest(b.manifest);
        } catch (const Error& e) {
            manifest_problem = std::string("the batch manifest cannot be read: ") + e.what();
        }
    }
    const auto startup = trial::startup_from_json(json::parse(store_->meta("startup").value_or("null")));
    const json baseline_pace = json::parse(store_->meta("step_pace").value_or("{}"), nullptr, false);
    store::Transaction tx(store_->db());
    for (auto t : store_->trials_of_batch(batch_id)) {
        if (t.state != TrialState::Submitted) continue;
        auto it = by_index.find(t.array_index);
        if (it == by_index.end()) continue;
        const auto& rec = it->second;
        t.state = TrialState::Finished;
        t.node = rec.node_list;
        if (b.kind == kSubmittedBatch) {
            t.job_id = rec.job_id;
            take_submitted_output(t, rec);
        }
        // No result file (the wrapper died with the job: a node failure, a time limit): no wrapper wall time.
        // One that is not a result (the job can reach the file) counts as none, and the log says why.
        std::optional<trial::Result> result;
        FileDigest result_seen; // the bytes read, held against the evidence's digest below
        try {
            result = trial::read_result(t.result_path, &result_seen);
        } catch (const Error& e) {
            store_->log(fmt::format("trial {}: result ignored: {}", t.id, e.what()));
        }
        // The plugin's root-side record of this run, where it wrote one.
        const auto pe = trial::read_plugin_evidence(evidence_spool_, rec.job_id);
        const fs::path log = fs::path(t.result_path).parent_path() / "log.txt";
        // result.json and log.txt against their digests when the task ended (the plugin's, else the local
        // scheduler's as the trial's parent): files the job's user changed since say nothing of the trial (a
        // job it submitted, or a process that escaped it, rewrote them) and are refused. Evidence without
        // digests (an older record, Slurm's accounting alone) checks nothing here.
        std::string rewritten;
        {
            const auto& recorded_result = pe ? pe->result_file : rec.result_file;
            const auto& recorded_log = pe ? pe->log_file : rec.log_file;
            if (recorded_result)
                if (auto d = digest_difference(*recorded_result, result_seen); !d.empty())
                    rewritten = "result.json: " + d;
            if (recorded_log)
                if (auto d = digest_difference(*recorded_log,
                                               digest_file(log.string(), trial::kMaxDigestLogBytes));
                    !d.empty())
                    rewritten += (rewritten.empty() ? "" : "; ") + std::string("log.txt: ") + d;
            if (!rewritten.empty()) {
                store_->log(fmt::format("trial {}: files changed after it ended: {}", t.id, rewritten));
                result.reset();
            }
        }
        const double wall = result ? result->wall_s : 0.0;
        t.cost_node_s = (rec.elapsed_s > 0 ? rec.elapsed_s : wall) * contract_.resources.nodes;
        // The workload's output (the trial's log.txt, where srun-launched steps report too) and the batch
        // step's own output (Slurm's -o file, where slurmstepd reports for the batch step).
        const auto log_output = trial::read_trial_output(log);
        const std::string& log_text = log_output.text;
        const std::string job_output =
            b.manifest.empty()
                ? log_text
                : log_text + read_text(fs::path(b.manifest).parent_path() /
                                       fmt::format("slurm-{}.out", t.job_id)); // %A_%a: JOB_INDEX
        auto steps = result ? result->steps.steps : std::vector<measure::StepSample>{};
        auto evals = result ? result->steps.evals : std::vector<measure::EvalLoss>{};
        if (steps.empty() && rewritten.empty()) {
            // The wrapper may not have finished (killed with the job): read the steps the log has.
            // A log larger than what is read (its tail) has other line numbers than the times file's.
            const auto times =
                log_output.cut ? std::vector<double>{} : trial::read_line_times(trial::line_times_path(log));
            auto parsed = measure::parse_log(log_text, contract_.metrics, &times);
            steps = std::move(parsed.steps);
            evals = std::move(parsed.evals);
        }
        // Exactly the contract's steps, each once and in order; no line after the last step is taken.
        const std::string step_lines = trial::check_step_lines(steps, inv.steps);
        trial::keep_contract_steps(steps, inv.steps);
        // The evidence: the plugin's root-side record where it wrote one, else the scheduler's own record
        // (the local scheduler's is the trial's parent's; Slurm's accounting is root's, to the second).
        trial::TimingEvidence timing;
        std::optional<double> evidence_peak;
        json evidence;
        if (pe) {
            timing = {pe->elapsed_s, 0.01, "plugin (root, slurmstepd)"};
            evidence_peak = pe->memory_peak_bytes;
            evidence = trial::to_json(*pe);
        } else if (rec.elapsed_s > 0) {
            const bool local = evidence_scheduler_ == "local";
            timing = {rec.elapsed_s, local ? 0.01 : 1.0,
                      local ? "local scheduler (the trial's parent)" : "Slurm accounting"};
            evidence = {{"source", local ? "local parent" : "slurm accounting"},
                        {"elapsed_s", rec.elapsed_s},
                        {"exit_code", rec.exit_code},
                        {"signal", rec.exit_signal}};
            if (local && rec.max_rss_bytes) {
                evidence_peak = static_cast<double>(*rec.max_rss_bytes);
                evidence["memory_peak_bytes"] = *evidence_peak;
            }
            if (rec.result_file) evidence["result_file"] = to_json(*rec.result_file);
            if (rec.log_file) evidence["log_file"] = to_json(*rec.log_file);
        }
        const double reported_s = trial::reported_step_time_s(steps);
        const auto pace = trial::step_pace(steps);
        std::optional<measure::TrialSummary> summary;
        if (static_cast<int>(steps.size()) > inv.warmup_steps) {
            measure::StepLog log;
            log.steps = steps;
            summary = measure::summarize(log, inv.warmup_steps);
            t.step_time_s = summary->steady_step_s.estimate;
            t.step_time_lo = summary->steady_step_s.lo;
            t.step_time_hi = summary->steady_step_s.hi;
            t.cold_step_s = summary->cold_step_s;
            t.tokens_per_s = summary->tokens_per_s;
            t.mfu = summary->mfu;
            t.peak_memory_bytes = summary->peak_rss_bytes;
            if (!summary->losses.empty()) t.loss = summary->losses.back();
            t.measurements = {{"steady_samples", summary->steady_samples},
                              {"losses", summary->losses},
                              {"phases", summary->phases},
                              {"cold_step_s", summary->cold_step_s}};
            // MFU's parts as the job reports them: its model FLOPs per step, and the peak FLOP/s its own MFU
            // implies. Only the doctor's are used as a denominator (one per hardware: verify/mfu).
            if (const auto m = verify::reported_mfu_parts(steps, inv.warmup_steps)) {
                t.measurements["model_flops"] = m->model_flops_per_step;
                if (m->peak_flops > 0) t.measurements["peak_flops"] = m->peak_flops;
            }
        }
        // Kept with the trial (after the summary's measurements, which replace the object).
        t.measurements["reported_step_s"] = reported_s;
        // Each step as the job printed it, for the report's curves: its own step number (nanoGPT's iter,
        // counted from 0), its time and its loss; a trial stopped early keeps the steps it ran.
        if (!steps.empty()) {
            json numbers = json::array(), times = json::array(), losses = json::array();
            for (const auto& st : steps)
                numbers.push_back(st.step), times.push_back(st.step_time_s), losses.push_back(st.loss);
            t.measurements["step_numbers"] = numbers;
            t.measurements["step_times_s"] = times;
            if (!t.measurements.contains("losses")) t.measurements["losses"] = losses;
        }
        // When it ran (the scheduler's record): the report's timeline.
        if (const auto start = slurm::slurm_time_epoch(rec.start_time)) {
            t.measurements["started_at"] = *start;
            const auto end = slurm::slurm_time_epoch(rec.end_time);
            t.measurements["ended_at"] = rec.elapsed_s > 0 ? *start + rec.elapsed_s : end.value_or(*start);
        }
        if (pace) t.measurements["step_pace"] = *pace;
        if (!evidence.is_null()) t.measurements["evidence"] = evidence;
        if (result && !result->isolation.empty())
            t.measurements["isolation"] = {{"in_place", result->isolated}, {"detail", result->isolation}};
        // Jobs of the user submitted while this trial ran that the campaign did not submit: a warning on the
        // trial, not a violation (self_submitted.cpp says why).
        if (auto jobs = self_submitted_during(rec); !jobs.empty()) {
            t.measurements["self_submitted_jobs"] = jobs;
            store_->log(
                fmt::format("trial {}: {} job(s) of this user submitted while it ran that the campaign "
                            "did not submit (first: {})",
                            t.id, jobs.size(), jobs[0]["job"].get<std::string>()));
        }
        // Processes the workload left behind, killed by the wrapper before it wrote result.json.
        if (result && result->leftover_processes_killed > 0)
            t.measurements["leftover_processes_killed"] = result->leftover_processes_killed;
        // The peak checked against the limit: the evidence's where there is evidence (the job can write
        // result.json), else the job cgroup's the wrapper read (what Slurm enforces --mem on); the
        // accounting's MaxRSS and what the workload reported can only raise it.
        if (evidence_peak)
            t.peak_memory_bytes = std::max(t.peak_memory_bytes.value_or(0), *evidence_peak);
        else if (result && result->job_cgroup_peak_bytes)
            t.peak_memory_bytes = std::max(t.peak_memory_bytes.value_or(0), *result->job_cgroup_peak_bytes);
        if (rec.max_rss_bytes)
            t.peak_memory_bytes = std::max(t.peak_memory_bytes.value_or(0), double(*rec.max_rss_bytes));
        // With a per-GPU limit the memory that decides is the GPU's, as the job's step lines report it (its
        // allocator's peak), else as the wrapper's nvidia-smi samples saw it; the host's stays in the
        // measurements.
        if (contract_.resources.gpu_mem_bytes > 0) {
            if (t.peak_memory_bytes) t.measurements["host_peak_bytes"] = *t.peak_memory_bytes;
            t.peak_memory_bytes.reset();
            for (const auto& s : steps)
                if (s.peak_device_bytes)
                    t.peak_memory_bytes = std::max(t.peak_memory_bytes.value_or(0), *s.peak_device_bytes);
            if (t.peak_memory_bytes) {
                t.measurements["gpu_memory_source"] = "step lines";
            } else if (result && result->gpu_sampled_peak_bytes) {
                t.peak_memory_bytes = *result->gpu_sampled_peak_bytes;
                t.measurements["gpu_memory_source"] = "nvidia-smi samples";
            }
        }
        trial::Evidence e;
        e.record = &rec;
        if (!rewritten.empty()) e.rewritten_violation = rewritten;
        e.job_output = job_output;
        e.has_result = result.has_value();
        if (result && result->stopped_slow) e.stopped_slow = result->stopped_slow;
        e.steps = static_cast<int>(steps.size());
        e.summary = summary ? &*summary : nullptr;
        if (!step_lines.empty()) e.step_lines_violation = step_lines;
        // The settings the wrapper saw, against the entry the orchestrator wrote (the user's own job ran
        // without the wrapper).
        if (b.kind != kSubmittedBatch && result && digest) {
            std::string why = manifest_problem;
            if (why.empty() && manifest) {
                try {
                    why = trial::check_settings(result->settings,
                                                manifest->task(static_cast<std::uint32_t>(t.array_index)));
                } catch (const Error& err) {
                    why = err.what();
                }
            }
            if (!why.empty()) e.settings_violation = why;
        }
        // The job's step times against the evidence's elapsed time, less the doctor's startup (the doctor's
        // own runs are what measures it).
        if (t.kind != TrialKind::Doctor && startup && timing.elapsed_s > 0 &&
            (startup->source.empty() || startup->source == evidence.value("source", "")) &&
            static_cast<int>(steps.size()) >= inv.steps)
            if (auto why = trial::check_timing(reported_s, timing, *startup); !why.empty())
                e.timing_violation = why;
        // The job's step times against the time the trial wrapper saw pass between its step lines, held to
        // the baseline's pace: catches a slowed clock however short the run is against its start-up's noise.
        if (t.kind != TrialKind::Doctor && pace && !e.timing_violation && baseline_pace.is_object() &&
            baseline_pace.value("median", json()).is_number())
            if (auto why = trial::check_pace(*pace, baseline_pace["median"].get<double>()); !why.empty())
                e.timing_violation = why;
        // The final evaluation loss: the last one the job printed.
        std::optional<double> final_eval;
        if (!evals.empty()) {
            final_eval = evals.back().loss;
            t.measurements["eval_loss"] = *final_eval;
        }
        if (summary) t.measurements["excluded_steps"] = summary->excluded_steps;
        // An equivalence check's runs, and each A/B pair's where the contract can seed, are at a seed of
        // their own: they are compared with each other (equivalence.cpp, verify::decide), not with the
        // reference of the contract's seed.
        if (b.kind == "equivalence" || (b.kind == "verify" && can_seed())) {
        } else if (inv.loss_mode == contract::LossMode::FinalEval) {
            // Against the doctor's seeds, once the doctor has them (its own runs are what calibrates).
            if (const auto d = store_->baseline(); d && !d->eval_losses.empty() && e.steps >= inv.steps)
                if (auto why =
                        verify::check_eval_loss(verify::eval_reference(d->eval_losses), final_eval, inv);
                    !why.empty())
                    e.loss_violation = why;
        } else if (!reference.empty() && e.steps >= inv.steps) {
            std::vector<double> losses;
            for (const auto& s : steps)
                losses.push_back(s.loss);
            if (auto why = verify::check_loss(reference, losses, inv); !why.empty()) e.loss_violation = why;
        }
        const std::string tail = last_lines(log, 3);
        e.log_tail = tail;
        const auto verdict = trial::classify(e, limits);
        t.outcome = verdict.outcome;
        t.violation = verdict.violation;
        t.detail = verdict.detail;
        // The job the user submitted ran as the user runs it, without the contract's [workload] args (a short
        // run's step count, say): fewer step lines than a trial prints says it ran another run than the
        // trials, not that the baseline breaks the contract. Not a baseline run then, and no failure.
        if (b.kind == kSubmittedBatch && verdict.violation == trial::Violation::MissingSteps) {
            t.counted = false;
            store_->set_meta("submitted_job", "not adopted after it ran: " + verdict.detail +
                                                  " (it ran without the contract's [workload] args)");
        }
        // Censored: an OOM's peak is only known to exceed the limit of the memory that ran out, and says
        // nothing of the other's: a GPU's of the host's, a host's of the GPU's.
        const bool gpu_oom = verdict.log && verdict.log->signal == trial::LogSignal::GpuOom;
        const bool gpu_limit = contract_.resources.gpu_mem_bytes > 0;
        if (verdict.outcome == trial::Outcome::OutOfMemory && gpu_oom == gpu_limit)
            t.peak_memory_bytes =
                static_cast<double>(contract::modeled_memory_limit_bytes(contract_.resources));
        if (verdict.log) t.measurements["log_signal"] = trial::to_json(*verdict.log);
        // Read: what the job wrote beside its result and log (checkpoints) goes, or stays within the bound
        // of [workload] keep_job_files. Nothing reads the trial directory after this but its result and log.
        if (b.kind != kSubmittedBatch) remove_job_files(t);
        if (trial::says_nothing(verdict.outcome)) {
            t.counted = false;
            if (t.kind == TrialKind::Search)
                requeue.push_back({{"candidate", t.candidate},
                                   {"reason", "re-queued after " + store::outcome_name(t) + ": " + t.reason},
                                   {"attempt", t.attempt + 1}});
        }
        store_->update_trial(t);
        store_->log(fmt::format("trial {} ({}) {}: {}", t.id, store::to_string(t.kind),
                                store::outcome_name(t), t.detail));
    }
    store_->set_meta("requeue", requeue.dump());
    store_->set_batch_finished(batch_id);
    tx.commit();
    if (b.kind == "doctor") finish_doctor();
    if (b.kind == kNoiseRemeasureBatch) finish_doctor(batch_id);
    if (b.kind == "search") record_control_ratios(batch_id);
    if (b.kind == "equivalence") finish_equivalence(batch_id);
    if (b.kind == "ablation") finish_ablation(batch_id);
    if (b.kind == "verify") {
        std::set<std::int64_t> vids;
        for (const auto& t : store_->trials_of_batch(batch_id))
            if (t.verification_id) vids.insert(*t.verification_id);
        for (auto v : vids)
            finish_verification(v);
    }
}

} // namespace infrarsi::campaign
