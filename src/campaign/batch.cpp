// The batch runner: plan a batch (sandboxes, store rows, manifest), submit it held and release it, await it,
// re-attach to it after a restart, and ingest what its trials left (trial::classify). It never calls a stage.
#include "campaign/campaign.hpp"

#include "measure/log_format.hpp"
#include "measure/statistics.hpp"
#include "trial/outcome.hpp"
#include "trial/result.hpp"
#include "util/error.hpp"
#include "util/install_paths.hpp"
#include "verify/verify.hpp"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <set>
#include <thread>

namespace infrarsi::campaign {

using nlohmann::json;
using store::TrialKind;
using store::TrialRow;
using store::TrialState;

namespace {

std::string last_lines(const fs::path& file, std::size_t n) {
    std::ifstream in(file);
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

std::string read_text(const fs::path& file) {
    std::ifstream in(file);
    return {std::istreambuf_iterator<char>(in), {}};
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

std::int64_t Campaign::plan_batch(const std::string& kind, const std::vector<Task>& tasks) {
    auto cache = sandbox_cache();
    estimate_sandboxes_.clear(); // patch sets built now have their own estimate
    std::vector<patch::Sandbox> boxes;
    for (const auto& t : tasks) {
        contract_.space.check(t.candidate);
        boxes.push_back(cache.materialize(patch_set(t.candidate)));
    }

    store::Transaction tx(store_->db());
    const auto batch_id = store_->add_batch(kind, "");
    const fs::path bdir = dir_ / "batches" / std::to_string(batch_id);
    fs::create_directories(bdir);
    trial::Manifest manifest;
    manifest.campaign = store_->meta("id").value_or("");
    manifest.batch = batch_id;
    manifest.kind = kind;
    manifest.metrics = contract_.metrics;
    int next_index = 0, failed_index = 0;
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
                row.violation = trial::Violation::ProtectedChanged;
            }
            row.detail = box.detail;
            row.result_path = box.log.string();
            store_->update_trial(row);
            continue;
        }
        row.array_index = next_index++;
        const fs::path tdir = bdir / std::to_string(row.array_index);
        row.result_path = (tdir / "result.json").string();
        row.id = store_->add_trial(row);
        std::map<std::string, std::string> vars{{"source", box.source.string()},
                                                {"build", box.build.string()},
                                                {"contract_dir", contract_.dir.string()}};
        trial::ManifestTask task;
        task.env = contract_.workload.env;
        for (const auto& [k, v] : contract_.space.environment(t.candidate))
            task.env[k] = v;
        if (!contract_.invariants.steps_env.empty())
            task.env[contract_.invariants.steps_env] = std::to_string(contract_.invariants.steps);
        if (!contract_.invariants.seed_env.empty())
            task.env[contract_.invariants.seed_env] = std::to_string(contract_.invariants.seed);
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
    manifest.knobs = manifest_knobs(contract_.space, manifest.tasks);
    const fs::path mpath = bdir / "manifest.json";
    trial::write_manifest(mpath, manifest);
    store_->set_batch_manifest(batch_id, mpath.string());
    if (next_index == 0) store_->set_batch_finished(batch_id);
    tx.commit();
    return batch_id;
}

void Campaign::submit_batch(std::int64_t batch_id, const RunOptions& o) {
    auto b = store_->batch(batch_id);
    if (b.state != "planned") return;
    int runnable = 0;
    for (const auto& t : store_->trials_of_batch(batch_id))
        if (t.array_index >= 0) ++runnable;
    if (runnable == 0) {
        store_->set_batch_finished(batch_id);
        return;
    }
    const std::string name = fmt::format("infrarsi-{}-b{}", store_->meta("id").value_or("x"), batch_id);
    auto& sched = scheduler(o);
    // A scheduler not answering for a while is waited out, with a message now and then.
    for (int waited = 0;; ++waited) {
        std::string why;
        if (sched.reachable(&why)) break;
        if (waited % 30 == 0) say(o, "waiting for " + sched.name() + " to answer: " + why);
        if (stopping(o)) return;
        std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    const auto& res = contract_.resources;
    scheduler::ArrayJob job;
    job.name = name;
    job.script = trial_script();
    job.tasks = runnable;
    job.max_concurrent = b.kind == "search" ? res.max_concurrent : 1;
    const fs::path bdir = dir_ / "batches" / std::to_string(batch_id);
    job.output = (bdir / "slurm-%A_%a.out").string();
    job.workdir = bdir;
    job.env = {{"INFRARSI_MANIFEST", b.manifest}, {"INFRARSI_BIN", infrarsi_command().string()}};
    job.partition = res.partition;
    job.nodes = res.nodes;
    job.ntasks_per_node = res.ntasks_per_node;
    job.cpus_per_task = res.cpus_per_task;
    job.mem = res.mem;
    job.mem_bytes = res.mem_bytes;
    job.time_limit = res.time_limit;
    job.time_limit_s = res.time_limit_s;
    job.sbatch_args = res.sbatch_args;
    const std::string id = sched.submit_held(job);
    store_->set_batch_submitted(batch_id, id); // recorded before it can run
    sched.release(id);
    say(o, fmt::format("batch {} ({}, {} trials) submitted to {} as job array {}", batch_id, b.kind, runnable,
                       sched.name(), id));
}

void Campaign::await_batch(std::int64_t batch_id, const RunOptions& o) {
    auto b = store_->batch(batch_id);
    if (b.state != "submitted") return;
    std::size_t runnable = 0;
    for (const auto& t : store_->trials_of_batch(batch_id))
        if (t.array_index >= 0) ++runnable;
    std::set<std::string> cancelled;
    while (!stopping(o)) {
        auto records = scheduler(o).wait(b.job_id, std::chrono::seconds(5), o.poll);
        std::size_t finished = 0;
        for (const auto& r : records) {
            if (slurm::is_finished(r.state) && r.array_task_id) ++finished;
            // A task Slurm requeued (a contract with --requeue) whose relaunch failed is held until someone
            // releases it: cancel it, and the trial is re-queued (not counted) like any cancelled one.
            const bool requeue_held = (r.state == slurm::JobState::Pending &&
                                       r.reason.find("requeued held") != std::string::npos) ||
                                      r.raw_state.rfind("REQUEUE_HOLD", 0) == 0;
            if (requeue_held && cancelled.insert(r.job_id).second) {
                say(o, fmt::format("job {}: Slurm requeued it and holds it ({}); cancelling it, its trial is "
                                   "re-queued",
                                   r.job_id, r.reason));
                try {
                    scheduler(o).cancel(r.job_id);
                } catch (const Error& e) {
                    say(o, e.what());
                }
            }
        }
        if (finished >= runnable) {
            ingest(batch_id, records);
            return;
        }
    }
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
        if (b.state == "submitted") {
            // Released already, unless the process died right after recording the id. A job Slurm has
            // forgotten (finished longer than MinJobAge ago) is read from accounting by await_batch.
            try {
                scheduler(o).release(b.job_id);
            } catch (const Error& e) {
                say(o, fmt::format("batch {}: {}", b.id, e.what()));
            }
            say(o, fmt::format("re-attaching to batch {} (job {})", b.id, b.job_id));
        }
        submit_batch(b.id, o);
        await_batch(b.id, o);
        if (stopping(o)) return;
    }
}

void Campaign::ingest(std::int64_t batch_id, const std::vector<slurm::JobRecord>& records) {
    auto b = store_->batch(batch_id);
    std::map<int, slurm::JobRecord> by_index;
    for (const auto& r : records)
        if (r.array_task_id) by_index[*r.array_task_id] = r;
    const auto reference = reference_losses();
    const auto& inv = contract_.invariants;
    json requeue = json::parse(store_->meta("requeue").value_or("[]"));
    const trial::Limits limits{contract_.resources.mem, contract_.resources.mem_bytes,
                               contract_.resources.time_limit, inv.steps,
                               measure::describe(contract_.metrics)};
    store::Transaction tx(store_->db());
    for (auto t : store_->trials_of_batch(batch_id)) {
        if (t.state != TrialState::Submitted) continue;
        auto it = by_index.find(t.array_index);
        if (it == by_index.end()) continue;
        const auto& rec = it->second;
        t.state = TrialState::Finished;
        t.node = rec.node_list;
        // No result file (the wrapper died with the job: a node failure, a time limit): no wrapper wall time.
        // One that is not a result (the job can reach the file) counts as none, and the log says why.
        std::optional<trial::Result> result;
        try {
            result = trial::read_result(t.result_path);
        } catch (const Error& e) {
            store_->log(fmt::format("trial {}: result ignored: {}", t.id, e.what()));
        }
        const double wall = result ? result->wall_s : 0.0;
        t.cost_node_s = (rec.elapsed_s > 0 ? rec.elapsed_s : wall) * contract_.resources.nodes;
        // The workload's output (the trial's log.txt, where srun-launched steps report too) and the batch
        // step's own output (Slurm's -o file, where slurmstepd reports for the batch step).
        const fs::path log = fs::path(t.result_path).parent_path() / "log.txt";
        const std::string log_text = read_text(log);
        const std::string job_output =
            log_text + read_text(fs::path(b.manifest).parent_path() /
                                 fmt::format("slurm-{}_{}.out", b.job_id, t.array_index));
        auto steps = result ? result->steps.steps : std::vector<measure::StepSample>{};
        if (steps.empty()) {
            // The wrapper may not have finished (killed with the job): read the steps the log has.
            const auto times = trial::read_line_times(trial::line_times_path(log));
            steps = measure::parse_log(log_text, contract_.metrics, &times).steps;
        }
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
        }
        if (rec.max_rss_bytes)
            t.peak_memory_bytes = std::max(t.peak_memory_bytes.value_or(0), double(*rec.max_rss_bytes));
        trial::Evidence e;
        e.record = &rec;
        e.job_output = job_output;
        e.has_result = result.has_value();
        e.steps = static_cast<int>(steps.size());
        e.summary = summary ? &*summary : nullptr;
        if (!reference.empty() && e.steps >= inv.steps) {
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
        // Censored: a host OOM's peak is only known to exceed the limit. A GPU's says nothing of the host's.
        const bool gpu_oom = verdict.log && verdict.log->signal == trial::LogSignal::GpuOom;
        if (verdict.outcome == trial::Outcome::OutOfMemory && !gpu_oom)
            t.peak_memory_bytes = static_cast<double>(contract_.resources.mem_bytes);
        if (verdict.log) t.measurements["log_signal"] = trial::to_json(*verdict.log);
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
    if (b.kind == "verify") {
        std::set<std::int64_t> vids;
        for (const auto& t : store_->trials_of_batch(batch_id))
            if (t.verification_id) vids.insert(*t.verification_id);
        for (auto v : vids)
            finish_verification(v);
    }
}

} // namespace infrarsi::campaign
