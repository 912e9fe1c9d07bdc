#include "campaign/campaign.hpp"

#include "campaign/experience.hpp"

#include "measure/noise.hpp"
#include "measure/statistics.hpp"
#include "patch/hash.hpp"
#include "patch/sandbox.hpp"
#include "trial/outcome.hpp"
#include "util/error.hpp"
#include "util/install_paths.hpp"
#include "util/process.hpp"
#include "verify/verify.hpp"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <set>
#include <thread>

namespace infrarsi::campaign {

using nlohmann::json;
using store::TrialKind;
using store::TrialRow;
using store::TrialState;

json manifest_knobs(const space::Space& space, const json& tasks) {
    json knobs = json::object();
    std::set<std::string> knob_envs;
    for (const auto& k : space.knobs) {
        if (k.env.empty()) continue;
        knob_envs.insert(k.env);
        const long long span = k.kind == space::KnobKind::Integer
                                   ? (k.max - k.min) / std::max(1LL, k.step) + 1
                                   : static_cast<long long>(kMaxManifestKnobValues);
        if (span > static_cast<long long>(kMaxManifestKnobValues)) {
            knobs[k.env] = nullptr; // too many to list: any value (the orchestrator checked it)
            continue;
        }
        json values = json::array();
        for (const auto& v : k.domain())
            values.push_back(space::env_value(v));
        knobs[k.env] = values;
    }
    // The names the contract fixes (workload env, steps, seed, binary): the values this batch gives them.
    std::map<std::string, std::set<std::string>> fixed;
    for (const auto& t : tasks)
        for (const auto& [name, value] : t.at("env").items())
            if (!knob_envs.count(name)) fixed[name].insert(value.get<std::string>());
    for (const auto& [name, values] : fixed)
        knobs[name] = json(std::vector<std::string>(values.begin(), values.end()));
    return knobs;
}

double TrialCostModel::steps_s() const {
    const int warm = std::clamp(warmup_steps, 0, std::max(steps, 0));
    return warm * std::max(cold_step_s, step_s) + (std::max(steps, 0) - warm) * step_s;
}

double TrialCostModel::trial_s() const {
    return std::max(0.0, steps_s() + std::max(0.0, overhead_s));
}

double verification_wall_s(const TrialCostModel& m, int candidates, int pairs) {
    return std::max(0, candidates) * std::max(0, pairs) * 2 * m.trial_s();
}

int affordable_pairs(const TrialCostModel& m, double wall_left_s, int pairs) {
    const double pair_s = 2 * m.trial_s();
    if (pair_s <= 0) return pairs;
    if (wall_left_s <= 0) return 0;
    return static_cast<int>(std::min<double>(pairs, std::floor(wall_left_s / pair_s)));
}

namespace {

fs::path db_path(const fs::path& dir) {
    return dir / "campaign.db";
}

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

std::vector<store::Lock> compute_locks(const contract::Contract& c) {
    std::vector<store::Lock> locks;
    locks.push_back({"contract", c.file.string(), patch::hash_file(c.file)});
    locks.push_back({"tree", c.workload.source.string(), patch::hash_tree(c.workload.source)});
    for (const auto& p : c.protected_files)
        locks.push_back({"protected", p, patch::hash_file(c.workload.source / p)});
    if (!c.patch_catalog.empty())
        locks.push_back({"catalog", c.patch_catalog.string(), patch::hash_file(c.patch_catalog)});
    return locks;
}

std::string read_text(const fs::path& file) {
    std::ifstream in(file);
    return {std::istreambuf_iterator<char>(in), {}};
}

json opt(const std::optional<double>& v) {
    return v ? json(*v) : json();
}

std::vector<measure::StepSample> steps_of(const json& result) {
    std::vector<measure::StepSample> steps;
    if (result.contains("steps"))
        for (const auto& s : result["steps"])
            steps.push_back(measure::step_from_json(s));
    return steps;
}

} // namespace

void Campaign::init(const fs::path& contract_file, const fs::path& dir) {
    if (fs::exists(db_path(dir)))
        throw Error("a campaign already exists here", db_path(dir).string(), "a new directory (--dir)");
    auto c = contract::load(contract_file);
    fs::create_directories(dir);
    store::CampaignStore s(db_path(dir).string());
    store::Transaction tx(s.db());
    std::random_device rd;
    s.set_meta("id", fmt::format("{:08x}", rd()));
    s.set_meta("name", c.name);
    s.set_meta("contract", c.file.string());
    s.set_meta("created", fmt::format("{:.3f}", store::now_seconds()));
    s.set_meta("state", "initialized");
    for (const auto& l : compute_locks(c))
        s.add_lock(l);
    if (!c.patch_catalog.empty()) {
        auto catalog = patch::load_catalog(c.patch_catalog);
        for (const auto& id : c.patch_candidates)
            if (std::none_of(catalog.begin(), catalog.end(), [&](auto& p) { return p.id == id; }))
                throw Error("patch candidate '" + id + "' is not in the catalog", c.file.string(),
                            "ids from " + c.patch_catalog.string());
        for (const auto& p : catalog) {
            const auto& want = c.patch_candidates;
            if (!want.empty() && std::find(want.begin(), want.end(), p.id) == want.end()) continue;
            auto d = patch::check_scope(p, c.editable, c.protected_files);
            json info = {{"description", p.description},
                         {"tags", p.tags},
                         {"touches", p.touches},
                         {"declared_touches", p.declared_touches},
                         {"file", p.file.string()}};
            s.put_patch({p.id, d.accepted, d.reason, info});
            s.log(d.accepted ? "patch " + p.id + " accepted"
                             : "patch " + p.id + " refused before any run: " + d.reason);
        }
    }
    s.log("campaign initialized from " + c.file.string());
    tx.commit();
}

Campaign::Campaign(const fs::path& dir) : dir_(fs::absolute(dir).lexically_normal()) {
    if (!fs::exists(db_path(dir_)))
        throw Error("no campaign here", dir_.string(),
                    "a directory made by `infrarsi init CONTRACT --dir DIR`");
    store_ = std::make_unique<store::CampaignStore>(db_path(dir_).string());
    auto file = store_->meta("contract");
    if (!file)
        throw Error("the campaign store has no contract", db_path(dir_).string(),
                    "a store made by infrarsi init");
    contract_ = contract::load(*file);
    // Everything locked at init must be unchanged, or the campaign's measurements mean nothing.
    std::map<std::pair<std::string, std::string>, std::string> now;
    for (const auto& l : compute_locks(contract_))
        now[{l.kind, l.path}] = l.hash;
    std::vector<std::string> changed;
    for (const auto& l : store_->locks()) {
        auto it = now.find({l.kind, l.path});
        if (it == now.end() || it->second != l.hash) changed.push_back(l.kind + " " + l.path);
    }
    if (!changed.empty()) {
        std::string list;
        for (const auto& c : changed)
            list += (list.empty() ? "" : ", ") + c;
        throw Error(
            "locked inputs changed since init: " + list, dir_.string(),
            "the contract, baseline tree and protected files as they were at init (restore them, or start "
            "a new campaign with `infrarsi init`)");
    }
    if (!contract_.patch_catalog.empty()) catalog_ = patch::load_catalog(contract_.patch_catalog);
    for (const auto& p : store_->patches())
        if (p.accepted) contract_.space.patches.push_back(p.id);
    std::sort(contract_.space.patches.begin(), contract_.space.patches.end());
}

const patch::PatchInfo* Campaign::patch_info(const std::string& id) const {
    for (const auto& p : catalog_)
        if (p.id == id) return &p;
    return nullptr;
}

void Campaign::say(const RunOptions& o, const std::string& msg) {
    store_->log(msg);
    if (o.verbose) fmt::print("infrarsi: {}\n", msg);
    std::fflush(stdout);
}

patch::SandboxCache Campaign::sandbox_cache() const {
    patch::SandboxSpec spec;
    spec.source = contract_.workload.source;
    spec.build = contract_.workload.build;
    spec.protected_files = contract_.protected_files;
    for (const auto& l : store_->locks()) {
        if (l.kind == "tree") spec.tree_hash = l.hash;
        if (l.kind == "protected") spec.protected_hashes[l.path] = l.hash;
    }
    return patch::SandboxCache(dir_ / "sandboxes", spec);
}

std::vector<const patch::PatchInfo*> Campaign::patch_set(const space::Candidate& c) const {
    std::vector<const patch::PatchInfo*> ps;
    for (const auto& id : c.patches) {
        const auto* p = patch_info(id);
        if (!p)
            throw Error("unknown patch '" + id + "'", contract_.patch_catalog.string(), "a catalog entry");
        ps.push_back(p);
    }
    return ps;
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
    json manifest = {{"version", 1},
                     {"campaign", store_->meta("id").value_or("")},
                     {"batch", batch_id},
                     {"kind", kind},
                     {"step_prefix", contract_.invariants.step_prefix},
                     {"summary_prefix", contract_.invariants.summary_prefix},
                     {"tasks", json::array()}};
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
        json env = contract_.workload.env;
        for (const auto& [k, v] : contract_.space.environment(t.candidate))
            env[k] = v;
        if (!contract_.invariants.steps_env.empty())
            env[contract_.invariants.steps_env] = std::to_string(contract_.invariants.steps);
        if (!contract_.invariants.seed_env.empty())
            env[contract_.invariants.seed_env] = std::to_string(contract_.invariants.seed);
        if (!contract_.workload.binary_env.empty())
            env[contract_.workload.binary_env] = contract::substitute({contract_.workload.binary}, vars)[0];
        std::vector<std::string> command;
        if (!contract_.workload.command.empty()) {
            command = contract::substitute(contract_.workload.command, vars);
        } else {
            // A script inside the workload tree runs from the sandbox copy (patches may touch it).
            fs::path script = contract_.workload.sbatch_script;
            auto rel = fs::relative(script, contract_.workload.source);
            if (!rel.empty() && rel.native().rfind("..", 0) != 0) script = box.source / rel;
            command = {"bash", script.string()};
        }
        manifest["tasks"].push_back({{"index", row.array_index},
                                     {"trial_id", row.id},
                                     {"kind", store::to_string(t.kind)},
                                     {"candidate", row.candidate},
                                     {"env", env},
                                     {"command", command},
                                     {"build", box.build.string()},
                                     {"workdir", tdir.string()},
                                     {"result", row.result_path},
                                     {"log", (tdir / "log.txt").string()}});
        fs::create_directories(tdir);
    }
    manifest["knobs"] = manifest_knobs(contract_.space, manifest["tasks"]);
    const fs::path mpath = bdir / "manifest.json";
    {
        std::ofstream out(bdir / "manifest.json.tmp");
        out << manifest.dump(1) << "\n";
    }
    fs::rename(bdir / "manifest.json.tmp", mpath);
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

scheduler::Scheduler& Campaign::scheduler(const RunOptions& o) {
    if (scheduler_) return *scheduler_;
    const auto kept = store_->meta("scheduler");
    std::string which = o.scheduler;
    if (kept && (which == "auto" || which == *kept)) {
        which = *kept;
    } else if (kept) {
        for (const auto& b : store_->batches())
            if (b.state == "submitted")
                throw Error(fmt::format("batch {} is running on {}, job {}", b.id, *kept, b.job_id),
                            "--scheduler " + which, "--scheduler " + *kept + " until it has finished");
    }
    std::string why;
    scheduler_ = scheduler::make_scheduler(which, dir_ / "local-jobs", &why);
    store_->set_meta("scheduler", scheduler_->name());
    if (which == "auto") say(o, fmt::format("scheduler: {} ({})", scheduler_->name(), why));
    return *scheduler_;
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
                               contract_.resources.time_limit, inv.steps, inv.step_prefix};
    store::Transaction tx(store_->db());
    for (auto t : store_->trials_of_batch(batch_id)) {
        if (t.state != TrialState::Submitted) continue;
        auto it = by_index.find(t.array_index);
        if (it == by_index.end()) continue;
        const auto& rec = it->second;
        t.state = TrialState::Finished;
        t.node = rec.node_list;
        json result;
        if (std::ifstream in(t.result_path); in) {
            try {
                result = json::parse(in);
            } catch (const json::exception&) {
            }
        }
        // No result file (the wrapper died with the job: a node failure, a time limit): no wrapper wall time.
        const double wall = result.is_object() ? result.value("wall_s", 0.0) : 0.0;
        t.cost_node_s = (rec.elapsed_s > 0 ? rec.elapsed_s : wall) * contract_.resources.nodes;
        // The workload's output (the trial's log.txt, where srun-launched steps report too) and the batch
        // step's own output (Slurm's -o file, where slurmstepd reports for the batch step).
        const fs::path log = fs::path(t.result_path).parent_path() / "log.txt";
        const std::string log_text = read_text(log);
        const std::string job_output =
            log_text + read_text(fs::path(b.manifest).parent_path() /
                                 fmt::format("slurm-{}_{}.out", b.job_id, t.array_index));
        auto steps = steps_of(result);
        if (steps.empty()) {
            // The wrapper may not have finished (killed with the job): read the steps the log has.
            steps = measure::parse_step_log(log_text, inv.step_prefix, inv.summary_prefix).steps;
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
        e.has_result = !result.is_null();
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
        // Censored: an OOM's peak is only known to exceed the limit.
        if (verdict.outcome == trial::Outcome::OutOfMemory)
            t.peak_memory_bytes = static_cast<double>(contract_.resources.mem_bytes);
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

std::vector<double> Campaign::reference_losses() {
    auto d = store_->baseline();
    return d ? d->reference_losses : std::vector<double>{};
}

double Campaign::mde() {
    // Before the doctor has measured the noise, 5%.
    auto d = store_->baseline();
    return d ? d->minimum_detectable_effect : 0.05;
}

fs::path Campaign::estimate_sandbox(const space::Candidate& c) {
    std::string set;
    for (const auto& id : c.patches)
        set += id + "\n";
    if (auto it = estimate_sandboxes_.find(set); it != estimate_sandboxes_.end()) return it->second;
    fs::path box;
    if (!c.patches.empty()) {
        std::optional<patch::Sandbox> built;
        try {
            built = sandbox_cache().find(patch_set(c));
        } catch (const Error&) {
        }
        if (built && built->state == patch::Sandbox::State::Ready) box = built->source.parent_path();
    }
    if (box.empty()) {
        auto doctor_trials = store_->trials({.kinds = {TrialKind::Doctor}});
        if (doctor_trials.empty()) return {};
        box = dir_ / "sandboxes" / doctor_trials[0].sandbox;
    }
    estimate_sandboxes_[set] = box;
    return box;
}

std::optional<double> Campaign::memory_estimate(const space::Candidate& c) {
    if (contract_.memory_estimate.empty()) return std::nullopt;
    const fs::path box = estimate_sandbox(c);
    if (box.empty()) return std::nullopt;
    const std::string cache_key = c.key() + "@" + box.filename().string();
    if (auto it = estimates_.find(cache_key); it != estimates_.end()) return it->second;
    ProcessOptions po;
    po.env = contract_.workload.env;
    for (const auto& [k, v] : contract_.space.environment(c))
        po.env[k] = v;
    po.timeout = std::chrono::seconds(60);
    auto argv = contract::substitute(
        contract_.memory_estimate, {{"build", (box / "build").string()}, {"source", (box / "src").string()}});
    std::optional<double> est;
    try {
        auto r = run_process(argv, po);
        auto brace = r.out.find('{');
        if (r.ok() && brace != std::string::npos) {
            auto j = json::parse(r.out.substr(brace), nullptr, false);
            if (j.is_object() && j.contains("estimated_peak_bytes"))
                est = j["estimated_peak_bytes"].get<double>();
        }
    } catch (const Error&) {
    }
    estimates_[cache_key] = est;
    return est;
}

void Campaign::finish_doctor() {
    auto trials = store_->trials({.kinds = {TrialKind::Doctor}, .state = TrialState::Finished});
    std::vector<double> medians, within, colds, tps, mfus, peaks;
    std::vector<std::vector<double>> losses;
    std::map<std::string, std::vector<double>> phases;
    json runs = json::array();
    std::string failures;
    const auto& inv = contract_.invariants;
    for (const auto& t : trials) {
        runs.push_back({{"trial", t.id},
                        {"node", t.node},
                        {"outcome", store::outcome_name(t)},
                        {"step_s", opt(t.step_time_s)},
                        {"cold_step_s", opt(t.cold_step_s)},
                        {"detail", t.detail}});
        bool complete = (t.outcome == trial::Outcome::Ok || t.outcome == trial::Outcome::ContractViolation) &&
                        t.step_time_s && t.measurements.contains("losses") &&
                        static_cast<int>(t.measurements["losses"].size()) >= inv.steps;
        if (!complete) {
            failures += fmt::format("{}trial {}: {} {}", failures.empty() ? "" : "; ", t.id,
                                    store::outcome_name(t), t.detail);
            continue;
        }
        medians.push_back(*t.step_time_s);
        auto samples = t.measurements["steady_samples"].get<std::vector<double>>();
        double mu = measure::mean(samples);
        within.push_back(mu > 0 ? measure::stddev(samples) / mu : 0);
        colds.push_back(t.cold_step_s.value_or(0));
        if (t.tokens_per_s) tps.push_back(*t.tokens_per_s);
        if (t.mfu) mfus.push_back(*t.mfu);
        if (t.peak_memory_bytes) peaks.push_back(*t.peak_memory_bytes);
        losses.push_back(t.measurements["losses"].get<std::vector<double>>());
        for (const auto& [k, v] : t.measurements["phases"].items())
            phases[k].push_back(v.get<double>());
    }
    if (medians.size() < 2)
        throw Error(fmt::format("the baseline completed only {} of {} doctor runs: {}", medians.size(),
                                trials.size(), failures),
                    dir_.string(), "a baseline that runs (check the contract's resources and command)");
    auto noise = measure::calibrate(medians, within, contract_.repeats.verify);
    store::Baseline d;
    d.repeats = static_cast<int>(trials.size());
    d.completed = static_cast<int>(medians.size());
    d.runs = runs;
    d.median_step_s = noise.median_step_s;
    d.cold_step_s = measure::median(colds);
    d.cold_overhead = noise.median_step_s > 0 ? d.cold_step_s / noise.median_step_s : 0;
    d.cv_between = noise.cv_between;
    d.cv_within = noise.cv_within;
    d.minimum_detectable_effect = noise.minimum_detectable_effect;
    d.comparison_repeats = noise.comparison_repeats;
    for (const auto& [k, v] : phases)
        d.phases[k] = measure::median(v);
    d.tokens_per_s = measure::median(tps);
    d.reference_losses = verify::reference_losses(losses);
    if (!mfus.empty()) d.mfu = measure::median(mfus);
    if (!peaks.empty()) d.peak_memory_bytes = *std::max_element(peaks.begin(), peaks.end());
    store_->put_baseline(d);
    store_->log(fmt::format("doctor: baseline {:.4f} s/step, cold {:.4f} s, noise CV {:.2f}% between runs, "
                            "minimum detectable effect {:.2f}%",
                            noise.median_step_s, measure::median(colds), 100 * noise.cv_between,
                            100 * noise.minimum_detectable_effect));
}

void Campaign::doctor(const RunOptions& o) {
    resume_open_batches(o);
    if (store_->baseline() || stopping(o)) return;
    if (store_->batches().empty() || std::none_of(store_->batches().begin(), store_->batches().end(),
                                                  [](auto& b) { return b.kind == "doctor"; })) {
        std::vector<Task> tasks(static_cast<std::size_t>(contract_.repeats.doctor));
        for (auto& t : tasks) {
            t.candidate = contract_.space.baseline();
            t.kind = TrialKind::Doctor;
            t.reason = "baseline repeat for noise calibration";
        }
        say(o, fmt::format("doctor: building the baseline and running it {} times", tasks.size()));
        auto id = plan_batch("doctor", tasks);
        for (const auto& t : store_->trials_of_batch(id))
            if (t.array_index < 0)
                throw Error("the baseline does not build: " + t.detail, t.result_path,
                            "a baseline that builds");
        submit_batch(id, o);
        await_batch(id, o);
    }
}

Campaign::BudgetUse Campaign::budget_use() {
    BudgetUse u;
    for (const auto& t : store_->trials()) {
        // A patch set that does not build costs a build here, no cluster time: recorded, not a trial.
        if (t.kind == TrialKind::Search && t.counted && t.outcome != trial::Outcome::BuildFailure) ++u.trials;
        u.node_hours += t.cost_node_s / 3600.0;
    }
    if (auto s = store_->meta("started")) u.wall_s = store::now_seconds() - std::stod(*s);
    const auto& b = contract_.budget;
    if (u.trials >= b.trials)
        u.exhausted = fmt::format("trial budget ({} trials)", b.trials);
    else if (b.node_hours > 0 && u.node_hours >= b.node_hours)
        u.exhausted = fmt::format("node-hour budget ({})", b.node_hours);
    else if (b.wall_time_s > 0 && u.wall_s >= b.wall_time_s)
        u.exhausted = "wall-time budget";
    return u;
}

TrialCostModel Campaign::trial_cost_model() {
    TrialCostModel m;
    m.steps = contract_.invariants.steps;
    m.warmup_steps = contract_.invariants.warmup_steps;
    auto d = store_->baseline();
    if (!d) return m;
    m.step_s = d->median_step_s;
    m.cold_step_s = d->cold_step_s;
    // The overhead per trial: the wall time of the one-at-a-time batches (doctor, verification: what
    // verification will look like) shared among their trials, less the steps. The median over batches, so
    // one batch that waited out an orchestrator outage does not dominate.
    std::vector<double> overheads;
    for (const auto& b : store_->batches("finished")) {
        if (b.kind == "search" || b.submitted <= 0 || b.finished <= b.submitted) continue;
        int n = 0;
        for (const auto& t : store_->trials_of_batch(b.id))
            if (t.array_index >= 0) ++n;
        if (n > 0) overheads.push_back((b.finished - b.submitted) / n - m.steps_s());
    }
    if (!overheads.empty()) m.overhead_s = std::max(0.0, measure::median(overheads));
    return m;
}

SearchWallPlan Campaign::search_wall_plan(int q) {
    SearchWallPlan p;
    const auto m = trial_cost_model();
    // The next batch: as long as the search batches so far took (from the end of the batch before, so the
    // proposal and the builds count), else its waves of trials at the baseline's pace.
    std::vector<double> periods;
    double previous_end = 0;
    std::vector<store::BatchRow> done = store_->batches("finished");
    std::sort(done.begin(), done.end(), [](auto& a, auto& b) { return a.finished < b.finished; });
    for (const auto& b : done) {
        if (b.kind == "search" && previous_end > 0) periods.push_back(b.finished - previous_end);
        previous_end = b.finished;
    }
    const int conc = std::max(1, contract_.resources.max_concurrent);
    p.next_batch_s =
        periods.empty() ? std::ceil(double(std::max(q, 1)) / conc) * m.trial_s() : measure::median(periods);
    // Verification: the best verify_top distinct candidates faster than the baseline; the next batch may
    // add up to q of them.
    const auto baseline = store_->baseline();
    const double base = baseline ? baseline->median_step_s : 0.0;
    const auto baseline_key = contract_.space.baseline().key();
    std::set<std::string> faster;
    for (const auto& t : store_->trials({.kinds = {TrialKind::Search}, .outcome = trial::Outcome::Ok}))
        if (t.candidate_key != baseline_key && t.step_time_s && *t.step_time_s < base)
            faster.insert(t.candidate_key);
    p.verify_candidates = std::min(contract_.repeats.verify_top, static_cast<int>(faster.size()) + q);
    p.verify_reserve_s = verification_wall_s(m, p.verify_candidates, contract_.repeats.verify);
    return p;
}

void Campaign::search(const RunOptions& o) {
    resume_open_batches(o);
    auto proposer = search::make_proposer(o.proposer);
    const auto baseline = store_->baseline();
    while (!stopping(o)) {
        auto use = budget_use();
        if (!use.exhausted.empty()) {
            if (store_->meta("search_done") != "1") say(o, "search ends: " + use.exhausted + " used");
            store_->set_meta("search_done", "1");
            return;
        }
        const int q = std::min(contract_.budget.batch_size, contract_.budget.trials - use.trials);
        // Leave the wall time verification needs: stop before a batch that would eat into it.
        if (const double budget = contract_.budget.wall_time_s; budget > 0 && o.verify && baseline) {
            const auto plan = search_wall_plan(q);
            if (!plan.fits(use.wall_s, budget)) {
                const auto m = trial_cost_model();
                say(o, fmt::format(
                           "search ends: wall-time budget {:.0f} s: {:.0f} s used; the next batch (~{:.0f} "
                           "s) and the verification reserve (~{:.0f} s: {} candidates x {} A/B pairs x 2 "
                           "trials of ~{:.1f} s) would pass it",
                           budget, use.wall_s, plan.next_batch_s, plan.verify_reserve_s,
                           plan.verify_candidates, contract_.repeats.verify, m.trial_s()));
                store_->set_meta("search_done", "1");
                return;
            }
        }
        std::vector<Task> tasks;
        json requeue = json::parse(store_->meta("requeue").value_or("[]"));
        while (!requeue.empty() && static_cast<int>(tasks.size()) < q) {
            Task t;
            t.candidate = space::Candidate::from_json(requeue[0]["candidate"]);
            t.reason = requeue[0]["reason"].get<std::string>();
            t.attempt = requeue[0]["attempt"].get<int>();
            tasks.push_back(t);
            requeue.erase(requeue.begin());
        }
        // Seeds from the experience bank go first, each once, with the bank's reason in the audit.
        json seeds = json::parse(store_->meta("bank_seeds").value_or("[]"));
        std::set<std::string> tried;
        for (const auto& t : store_->trials())
            tried.insert(t.candidate_key);
        for (const auto& sd : seeds) {
            auto cand = space::Candidate::from_json(sd["candidate"]);
            if (static_cast<int>(tasks.size()) >= q || tried.count(cand.key())) continue;
            tasks.push_back({cand, TrialKind::Search, sd["reason"].get<std::string>(), 0, {}});
            tried.insert(cand.key());
        }
        search::ProposalContext ctx;
        ctx.space = &contract_.space;
        for (const auto& sd : seeds)
            ctx.seeds.push_back(space::Candidate::from_json(sd["candidate"]));
        for (const auto& p : catalog_)
            ctx.patches.push_back({p.id, p.tags});
        for (const auto& t : store_->trials({.kinds = {TrialKind::Search, TrialKind::Doctor},
                             .state = TrialState::Finished,
                             .counted = true})) {
            search::Observation ob;
            ob.candidate = space::Candidate::from_json(t.candidate);
            ob.outcome = *t.outcome;
            ob.step_time_s = t.step_time_s;
            ob.peak_memory_bytes = t.peak_memory_bytes;
            ob.cost_node_s = t.cost_node_s;
            ctx.history.push_back(std::move(ob));
        }
        for (const auto& t : tasks)
            ctx.history.push_back({t.candidate, trial::Outcome::Ok, {}, {}, 0});
        if (baseline) ctx.baseline_step_s = baseline->median_step_s;
        ctx.noise_floor = mde();
        ctx.memory_limit_bytes = static_cast<double>(contract_.resources.mem_bytes);
        ctx.memory_estimate = [this](const space::Candidate& c) { return memory_estimate(c); };
        ctx.q = q - static_cast<int>(tasks.size());
        ctx.seed = std::hash<std::string>{}(store_->meta("id").value_or("")) + store_->batches().size();
        if (ctx.q > 0)
            for (auto& p : proposer->propose(ctx))
                tasks.push_back({p.candidate, TrialKind::Search, p.reason, 0, {}});
        if (tasks.empty()) {
            say(o, "search ends: every candidate of the space has been tried");
            store_->set_meta("search_done", "1");
            return;
        }
        auto id = plan_batch("search", tasks);
        store_->set_meta("requeue", requeue.dump());
        say(o, fmt::format("batch {}: {} candidates ({} of {} trials used)", id, tasks.size(), use.trials,
                           contract_.budget.trials));
        submit_batch(id, o);
        await_batch(id, o);
    }
}

void Campaign::verify(const RunOptions& o) {
    resume_open_batches(o);
    if (store_->meta("verify_done") == "1" || stopping(o)) return;
    const auto baseline = store_->baseline();
    const double base = baseline ? baseline->median_step_s : 0.0;
    const auto baseline_key = contract_.space.baseline().key();
    // The best distinct candidates that were faster than the baseline in the search.
    std::map<std::string, TrialRow> best;
    for (const auto& t : store_->trials({.kinds = {TrialKind::Search}, .outcome = trial::Outcome::Ok})) {
        if (t.candidate_key == baseline_key || !t.step_time_s || *t.step_time_s >= base) continue;
        auto it = best.find(t.candidate_key);
        if (it == best.end() || *t.step_time_s < *it->second.step_time_s) best[t.candidate_key] = t;
    }
    std::vector<TrialRow> ranked;
    for (auto& [k, t] : best)
        ranked.push_back(t);
    std::sort(ranked.begin(), ranked.end(), [](auto& a, auto& b) { return *a.step_time_s < *b.step_time_s; });
    if (static_cast<int>(ranked.size()) > contract_.repeats.verify_top)
        ranked.resize(contract_.repeats.verify_top);
    std::set<std::string> done;
    for (const auto& v : store_->verifications())
        done.insert(v.candidate_key);
    for (const auto& t : ranked) {
        if (stopping(o)) return;
        if (done.count(t.candidate_key)) continue;
        auto cand = space::Candidate::from_json(t.candidate);
        store::VerificationRow v;
        v.candidate_key = t.candidate_key;
        v.candidate = t.candidate;
        v.state = "running";
        v.detail = {{"search_trial", t.id}};
        // The wall-time budget covers verification: run the pairs that fit, at least 2 (an interval needs
        // them), else skip the candidate and say so.
        int pairs = contract_.repeats.verify;
        if (const double budget = contract_.budget.wall_time_s; budget > 0) {
            const auto m = trial_cost_model();
            const double left = budget - budget_use().wall_s;
            pairs = affordable_pairs(m, left, contract_.repeats.verify);
            if (pairs < std::min(2, contract_.repeats.verify)) {
                const auto why =
                    fmt::format("not verified: the wall-time budget ({:.0f} s) has {:.0f} s left, and {} A/B "
                                "pairs need ~{:.0f} s (2 at least, ~{:.1f} s a trial)",
                                budget, std::max(0.0, left), contract_.repeats.verify,
                                verification_wall_s(m, 1, contract_.repeats.verify), m.trial_s());
                v.state = "skipped";
                v.detail["reasons"] = json::array({why});
                v.detail["wall_left_s"] = left;
                v.detail["trial_s"] = m.trial_s();
                v.id = store_->add_verification(v);
                say(o, fmt::format("verification of {} skipped: {}", cand.describe(), why));
                continue;
            }
            if (pairs < contract_.repeats.verify) {
                v.detail["budget_note"] = fmt::format(
                    "verification cut to {} of {} A/B pairs by the wall-time budget ({:.0f} s left, "
                    "~{:.0f} s a pair)",
                    pairs, contract_.repeats.verify, left, 2 * m.trial_s());
                say(o, fmt::format("{}: {}", cand.describe(), v.detail["budget_note"].get<std::string>()));
            }
        }
        v.id = store_->add_verification(v);
        std::vector<Task> tasks;
        for (int i = 0; i < pairs; ++i) {
            tasks.push_back({contract_.space.baseline(), TrialKind::VerifyBaseline, "A: baseline", 0, v.id});
            tasks.push_back({cand, TrialKind::VerifyCandidate, "B: candidate", 0, v.id});
        }
        say(o,
            fmt::format("verifying {} ({:.4f} s/step in search, baseline {:.4f}): {} interleaved A/B pairs",
                        cand.describe(), *t.step_time_s, base, pairs));
        v.batch_id = plan_batch("verify", tasks);
        store_->update_verification(v);
        submit_batch(v.batch_id, o);
        await_batch(v.batch_id, o);
    }
    if (!stopping(o)) store_->set_meta("verify_done", "1");
}

void Campaign::finish_verification(std::int64_t vid) {
    store::VerificationRow v;
    for (const auto& x : store_->verifications())
        if (x.id == vid) v = x;
    auto trials = store_->trials({.verification_id = vid});
    std::vector<verify::Arm> a, b;
    json pairs = json::array();
    const auto& inv = contract_.invariants;
    auto arm = [&](const TrialRow& t) {
        verify::Arm x;
        // A broken loss invariant is verification's to judge (it reports it as such), so such a run is kept.
        x.ok = t.outcome == trial::Outcome::Ok || t.violation == trial::Violation::LossInvariant;
        x.step_s = t.step_time_s.value_or(0);
        if (t.measurements.contains("losses")) x.losses = t.measurements["losses"].get<std::vector<double>>();
        x.peak_memory_bytes = t.peak_memory_bytes;
        if (static_cast<int>(x.losses.size()) < inv.steps) x.ok = false;
        return x;
    };
    std::vector<std::int64_t> ids_a, ids_b;
    for (const auto& t : trials) {
        if (t.kind == TrialKind::VerifyBaseline)
            a.push_back(arm(t)), ids_a.push_back(t.id);
        else
            b.push_back(arm(t)), ids_b.push_back(t.id);
    }
    std::vector<std::pair<verify::Arm, verify::Arm>> ab;
    for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
        ab.emplace_back(a[i], b[i]);
        pairs.push_back({{"baseline_trial", ids_a[i]},
                         {"candidate_trial", ids_b[i]},
                         {"baseline_step_s", a[i].step_s},
                         {"candidate_step_s", b[i].step_s}});
    }
    auto cand = space::Candidate::from_json(v.candidate);
    bool math_changing = false;
    for (const auto& id : cand.patches)
        if (const auto* p = patch_info(id); p && p->has_tag("math_changing")) math_changing = true;
    verify::NoisePrior noise;
    if (auto b = store_->baseline()) {
        noise.cv_between = b->cv_between;
        noise.dof = std::max(0, b->completed - 1);
    }
    auto d = verify::decide(ab, reference_losses(), contract_, mde(), math_changing, noise);
    if (v.detail.contains("budget_note")) {
        d.evidence.push_back(v.detail["budget_note"].get<std::string>());
        if (!d.promoted) d.reasons.push_back(v.detail["budget_note"].get<std::string>());
    }
    v.state = "done";
    v.promoted = d.promoted;
    v.speedup = d.speedup;
    v.lo = d.lo;
    v.hi = d.hi;
    v.detail["pairs"] = pairs;
    v.detail["reasons"] = d.reasons;
    v.detail["evidence"] = d.evidence;
    v.detail["mde"] = mde();
    store::Transaction tx(store_->db());
    store_->update_verification(v);
    if (d.promoted) store_->add_promotion(v.id, v.candidate_key, d.speedup);
    store_->log(
        d.promoted
            ? fmt::format("promoted {}: {:.3f}x [{:.3f}, {:.3f}]", cand.describe(), d.speedup, d.lo, d.hi)
            : fmt::format("not promoted {}: {}", cand.describe(), d.reasons.empty() ? "" : d.reasons[0]));
    tx.commit();
}

bool Campaign::finished() {
    return store_->meta("state") == "done";
}

void Campaign::run(const RunOptions& o) {
    if (!store_->meta("started")) store_->set_meta("started", fmt::format("{:.3f}", store::now_seconds()));
    store_->set_meta("state", "running");
    say(o, fmt::format("trials run {} trial-exec, submitted with {} to {}", infrarsi_command().string(),
                       trial_script().string(), scheduler(o).name()));
    doctor(o);
    if (stopping(o)) return;
    if (auto b = store_->baseline())
        say(o, fmt::format("baseline {:.4f} s/step, minimum detectable effect {:.1f}%", b->median_step_s,
                           100 * b->minimum_detectable_effect));
    // The bank's seeds are looked up once, after the doctor has re-baselined on this hardware, and kept
    // in the store so a restarted campaign proposes the same ones.
    if (!o.bank.empty() && !store_->meta("bank_seeds")) {
        bank::ExperienceBank b(o.bank);
        const auto here = campaign_hardware(*this, o.spool);
        const auto known = b.match_hardware(here); // with or without findings for this workload
        store_->set_meta("bank_hardware", known.dump());
        auto seeds = seeds_from_bank(b, *this, here);
        json list = json::array();
        for (const auto& sd : seeds) {
            list.push_back({{"candidate", sd.candidate.to_json()},
                            {"reason", sd.reason},
                            {"weight", sd.weight},
                            {"hypothesis", sd.hypothesis},
                            {"provenance", sd.provenance}});
            say(o, "seed: " + sd.candidate.describe() + ": " + sd.reason);
        }
        store_->set_meta("bank_seeds", list.dump());
        store_->set_meta("bank", o.bank);
        say(o, fmt::format("experience bank {}: {}; {} seeds for this hardware", o.bank,
                           bank::describe_match(known), seeds.size()));
    }
    search(o);
    if (stopping(o)) return;
    if (o.verify) verify(o);
    if (stopping(o)) return;
    store_->set_meta("state", "done");
    if (!o.bank.empty() && store_->meta("bank_ingested") != "1") {
        bank::ExperienceBank b(o.bank);
        auto r = ingest_into_bank(b, *this, o.spool);
        store_->set_meta("bank_ingested", "1");
        say(o,
            fmt::format("experience bank {}: {} findings added, {} already known", o.bank, r.added, r.known));
    }
    say(o, "campaign done");
}

} // namespace infrarsi::campaign
