// The campaign: opening and locking it, its budget, and run(), the sequencer of the stages (doctor_stage.cpp,
// search_stage.cpp, verification_stage.cpp), which all run their trials through the batch runner
// (batch_runner.cpp).
#include "campaign/campaign.hpp"

#include "measure/statistics.hpp"
#include "patch/hash.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"
#include "util/install_paths.hpp"
#include "verify/verify.hpp"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <random>

namespace infrarsi::campaign {

using nlohmann::json;
using store::TrialKind;

namespace {

fs::path db_path(const fs::path& dir) {
    return dir / "campaign.db";
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
    // Its text as locked: a read-only open after the file was edited still describes what ran.
    s.set_meta("contract_text", read_regular_file(c.file.string(), {.max_bytes = 1u << 20}));
    s.set_meta("created", fmt::format("{:.3f}", store::now_seconds()));
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

Campaign::Campaign(const fs::path& dir, Open mode) : dir_(fs::absolute(dir).lexically_normal()) {
    if (!fs::exists(db_path(dir_)))
        throw Error("no campaign here", dir_.string(),
                    "a directory made by `infrarsi init CONTRACT --dir DIR`");
    store_ = std::make_unique<store::CampaignStore>(db_path(dir_).string());
    auto file = store_->meta("contract");
    if (!file)
        throw Error("the campaign store has no contract", db_path(dir_).string(),
                    "a store made by infrarsi init");
    // Read-only: the contract as it ran, kept at init (a campaign of an older release kept no text: the
    // file).
    const auto text = mode == Open::read_only ? store_->meta("contract_text") : std::nullopt;
    contract_ = text ? contract::load_text(*text, *file) : contract::load(*file);
    // Everything locked at init must be unchanged, or the campaign's measurements mean nothing.
    std::map<std::pair<std::string, std::string>, std::string> now;
    for (const auto& l : compute_locks(contract_))
        now[{l.kind, l.path}] = l.hash;
    std::vector<std::string> changed;
    for (const auto& l : store_->locks()) {
        auto it = now.find({l.kind, l.path});
        if (it == now.end() || it->second != l.hash) changed.push_back(l.kind + " " + l.path);
    }
    if (!changed.empty() && mode == Open::read_only) {
        changed_inputs_ = changed;
    } else if (!changed.empty()) {
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
    // The parts, each before those that see it.
    batches_ = std::make_unique<BatchRunner>(
        BatchRunner::Context{.dir = dir_, .contract = contract_, .store = *store_},
        static_cast<BatchRunner::Host&>(*this));
    doctor_ = std::make_unique<DoctorStage>(
        DoctorStage::Context{.dir = dir_, .contract = contract_, .store = *store_, .batches = *batches_},
        static_cast<DoctorStage::Host&>(*this));
    equivalence_ = std::make_unique<EquivalenceStage>(
        EquivalenceStage::Context{.contract = contract_, .store = *store_, .batches = *batches_},
        static_cast<EquivalenceStage::Host&>(*this));
    ablation_ = std::make_unique<AblationStage>(
        AblationStage::Context{.contract = contract_, .store = *store_, .batches = *batches_},
        static_cast<AblationStage::Host&>(*this));
    verification_ =
        std::make_unique<VerificationStage>(VerificationStage::Context{.contract = contract_,
                                                                       .store = *store_,
                                                                       .batches = *batches_,
                                                                       .doctor = *doctor_,
                                                                       .equivalence = *equivalence_,
                                                                       .ablation = *ablation_},
                                            static_cast<VerificationStage::Host&>(*this));
    agent_ = std::make_unique<AgentStage>(
        AgentStage::Context{.dir = dir_, .contract = contract_, .store = *store_, .catalog = catalog_},
        static_cast<AgentStage::Host&>(*this));
    agent_->load_patches(mode == Open::read_only, changed_inputs_);
    search_ = std::make_unique<SearchStage>(SearchStage::Context{.contract = contract_,
                                                                 .store = *store_,
                                                                 .catalog = catalog_,
                                                                 .batches = *batches_,
                                                                 .doctor = *doctor_,
                                                                 .equivalence = *equivalence_,
                                                                 .agent = *agent_},
                                            static_cast<SearchStage::Host&>(*this));
}

const patch::PatchInfo* Campaign::patch_info(const std::string& id) const {
    for (const auto& p : catalog_)
        if (p.id == id) return &p;
    return nullptr;
}

void Campaign::say(const RunOptions& o, const std::string& msg) {
    store_->log(msg);
    if (o.verbose && o.on_event) return o.on_event(msg);
    if (o.verbose) fmt::print("infrarsi: {}\n", msg);
    std::fflush(stdout);
}

void Campaign::doctor(const RunOptions& o) {
    doctor_->run(o);
}

void Campaign::search(const RunOptions& o) {
    search_->run(o);
}

void Campaign::verify(const RunOptions& o) {
    verification_->run(o);
    // With the stage, not after it: `infrarsi verify` ends here, and a stop that comes now would leave a
    // finished campaign, which nothing drives again, without its findings in the bank (recorded once).
    if (store_->stage() == store::Stage::Done) record_in_bank(o);
}

std::optional<std::string> Campaign::paused() {
    return doctor_->paused();
}

std::vector<std::string> Campaign::nodes_to_avoid(scheduler::Scheduler& sched) {
    return doctor_->nodes_to_avoid(sched);
}

std::vector<double> Campaign::reference_losses() {
    return doctor_->reference_losses();
}

void Campaign::take_submitted_output(const store::TrialRow& t, const slurm::JobRecord& rec) {
    doctor_->take_submitted_output(t, rec);
}

scheduler::Scheduler& Campaign::slurm_for_submitted_job() {
    return doctor_->slurm_for_submitted_job();
}

std::vector<store::EquivalenceCheck> Campaign::failed_equivalence_checks() {
    return equivalence_->failed_checks();
}

fs::path Campaign::baseline_tree() {
    return sandbox_cache().materialize({}).source;
}

patch::SandboxCache Campaign::sandbox_cache() const {
    patch::SandboxSpec spec;
    spec.source = contract_.workload.source;
    spec.build = contract_.workload.build;
    spec.protected_files = contract_.protected_files;
    spec.editable = contract_.editable;
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

scheduler::Scheduler& Campaign::scheduler(const RunOptions& o) {
    if (scheduler_) return *scheduler_;
    const auto kept = store_->meta("scheduler");
    std::string which = o.scheduler;
    if (kept && (which == "auto" || which == *kept))
        which = *kept;
    else
        check_scheduler_change(which);
    std::string why;
    scheduler_ = scheduler::make_scheduler(which, dir_ / "local-jobs", &why);
    // Kept once a batch has gone to it (BatchRunner::submit): a scheduler that never ran a batch binds
    // nothing.
    if (which == "auto") say(o, fmt::format("scheduler: {} ({})", scheduler_->name(), why));
    return *scheduler_;
}

std::string Campaign::plugin_spool(scheduler::Scheduler& sched, const RunOptions& o) {
    if (auto it = plugin_spools_.find(sched.name()); it != plugin_spools_.end()) return it->second;
    const auto found = sched.plugin_spool(o.spool);
    if (o.spool.empty() && sched.name() == "slurm")
        say(o, found.spool.empty()
                   ? fmt::format("no plugin spool found ({}): trial evidence from Slurm's accounting (1 s); "
                                 "--spool DIR names it",
                                 found.how)
                   : fmt::format("plugin spool {} ({})", found.spool, found.how));
    return plugin_spools_[sched.name()] = found.spool;
}

void Campaign::check_scheduler_change(const std::string& to) {
    const auto kept = store_->meta("scheduler");
    if (!kept || *kept == to) return;
    for (const auto& b : store_->batches())
        if (b.state == store::BatchState::Submitted)
            throw Error(fmt::format("batch {} is running on {}, job {}", b.id, *kept, b.job_id),
                        "--scheduler " + to, "--scheduler " + *kept + " until it has finished");
}

void Campaign::use_scheduler(std::unique_ptr<scheduler::Scheduler> s) {
    check_scheduler_change(s->name());
    scheduler_ = std::move(s);
}

BudgetUse Campaign::budget_use() {
    BudgetUse u;
    for (const auto& t : store_->trials()) {
        // A patch set that does not build costs a build here, no cluster time: recorded, not a trial.
        if (t.kind == TrialKind::Search && t.counted && t.outcome != trial::Outcome::BuildFailure) ++u.trials;
        u.node_hours += t.cost_node_s / 3600.0;
    }
    // From the first batch submitted to the end of the campaign (or now): a run that never reached a
    // scheduler costs no wall time, and a finished campaign's figure stops growing.
    if (const auto run = store_->campaign_run(); run.started)
        u.wall_s = run.ended.value_or(store::now_seconds()) - *run.started;
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
    for (const auto& b : store_->batches(store::BatchState::Finished)) {
        if (b.kind == store::BatchKind::Search || b.kind == store::BatchKind::Submitted || b.submitted <= 0 ||
            b.finished <= b.submitted)
            continue;
        int n = 0;
        for (const auto& t : store_->trials_of_batch(b.id))
            if (t.array_index >= 0) ++n;
        if (n > 0) overheads.push_back((b.finished - b.submitted) / n - m.steps_s());
    }
    if (!overheads.empty()) m.overhead_s = std::max(0.0, measure::median(overheads));
    return m;
}

double Campaign::wall_used_s() {
    return budget_use().wall_s;
}

bool Campaign::finished() {
    return store_->stage() == store::Stage::Done;
}

bool Campaign::stopping(const RunOptions& o) {
    if (o.stop && o.stop->load()) return true;
    if (cancel_seen_) return true;
    const auto now = std::chrono::steady_clock::now();
    if (now - cancel_checked_ >= std::chrono::seconds(1)) {
        cancel_checked_ = now;
        cancel_seen_ = cancelled().has_value();
    }
    return cancel_seen_;
}

std::optional<std::string> Campaign::cancelled() {
    return store_->campaign_run().cancelled;
}

void Campaign::request_cancel(const std::string& why) {
    if (cancelled()) return;
    store_->set_cancelled(why);
    store_->log("campaign cancelled: " + why);
}

void Campaign::cancel_running(const RunOptions& o) {
    const auto running = store_->batches(store::BatchState::Submitted);
    if (running.empty()) return;
    auto& sched = scheduler(o);
    for (const auto& b : running) {
        for (const auto& a : store_->arrays(b.id)) {
            if (a.job_id.empty()) continue;
            try {
                sched.cancel(a.job_id);
            } catch (const Error& e) { // gone already, or the scheduler does not answer: said, not fatal
                say(o, fmt::format("cancelling job {} of batch {}: {}", a.job_id, b.id, e.what()));
            }
        }
        // Until its tasks have ended (a few seconds: SIGTERM, then SIGKILL), so that none outlives the
        // campaign and the local scheduler reaps its children; bounded, a scheduler that is slow to say is
        // not waited for.
        for (const auto& a : store_->arrays(b.id))
            if (!a.job_id.empty()) try {
                    sched.wait(a.job_id, std::chrono::seconds(10), o.poll);
                } catch (const Error&) {
                }
        for (auto t : store_->trials_of_batch(b.id)) {
            if (t.state == store::TrialState::Finished) continue;
            t.state = store::TrialState::Finished;
            t.outcome = trial::Outcome::Cancelled;
            t.counted = false;
            t.detail = "the campaign was cancelled (infrarsi cancel)";
            store_->update_trial(t);
        }
        store_->set_batch_finished(b.id);
    }
    say(o, fmt::format("campaign cancelled: the jobs of {} running batch(es) cancelled", running.size()));
}

void Campaign::run(const RunOptions& o) {
    if (const auto why = cancelled()) {
        say(o, "campaign cancelled (" + *why + "): nothing to run");
        return;
    }
    run_stages(o);
    if (cancelled()) cancel_running(o);
}

void Campaign::run_stages(const RunOptions& o) {
    using store::Stage;
    say(o, fmt::format("trials run {} trial-exec, submitted with {} to {}", infrarsi_command().string(),
                       trial_script().string(), scheduler(o).description()));
    store_->advance_stage(Stage::Doctor);
    doctor(o);
    if (stopping(o) || paused()) return;
    if (auto b = store_->baseline()) {
        say(o, fmt::format("baseline {:.4f} s/step, minimum detectable effect {:.1f}%", b->median_step_s,
                           100 * b->minimum_detectable_effect));
        if (const auto warning = doctor_->noise_warning(); !warning.empty()) say(o, warning);
        // docs/contract.md: "`infrarsi run` logs the calibrated tolerance after the doctor"; it was only in
        // the store's events (DoctorStage::finish), never on the terminal or in the daemon's log.
        if (contract_.invariants.loss_mode == contract::LossMode::FinalEval && !b->eval_losses.empty()) {
            const auto ref = verify::eval_reference(b->eval_losses);
            say(o, fmt::format("final evaluation loss {:.6g} +- {:.3g} over {} baseline runs at different "
                               "seeds: a candidate's must lie within {:.3g}{}",
                               ref.mean, ref.sd, ref.runs, verify::eval_tolerance(ref, contract_.invariants),
                               ref.sd == 0.0 ? " (no spread: the floor loss_tolerance x |mean|)" : ""));
        }
        store_->advance_stage(Stage::Search);
    }
    seed_from_bank(o);
    search(o);
    if (stopping(o)) return;
    store_->advance_stage(Stage::Verification);
    // Without verification (--no-verify) the campaign stays at that stage: a later `verify`, or a daemon,
    // verifies it; verify() moves it to done when it has run to its end.
    if (o.verify) verify(o);
    if (stopping(o)) return;
    record_in_bank(o);
    say(o, o.verify ? "campaign done" : "campaign searched; verification not run (--no-verify)");
}

} // namespace infrarsi::campaign
