// The search stage (search_stage.hpp).
#include "campaign/search_stage.hpp"

#include "campaign/control.hpp"
#include "measure/statistics.hpp"
#include "util/error.hpp"
#include "verify/sequential.hpp"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <set>

namespace infrarsi::campaign {

namespace fs = std::filesystem;

using nlohmann::json;
using store::TrialKind;
using store::TrialRow;
using store::TrialState;

namespace {
// A control further than this many of the doctor's run-to-run standard deviations (or the MDE, if larger)
// from the campaign's other controls is a fluke of its run (record_control_ratios).
constexpr double kControlOutlierSds = 4;
} // namespace

std::optional<trial::ManifestTask::SlowStop> slow_stop_rule(double incumbent_step_s, double mde, int steps,
                                                            int warmup_steps) {
    const int timed = steps - std::max(0, warmup_steps);
    const int after = std::max(3, timed / 4);
    if (!(incumbent_step_s > 0) || !std::isfinite(incumbent_step_s) || 2 * after > timed) return std::nullopt;
    trial::ManifestTask::SlowStop rule;
    rule.step_s = incumbent_step_s * (1 + std::max(kMinStopMargin, mde));
    rule.skip_steps = std::max(0, warmup_steps);
    rule.after_steps = after;
    return rule;
}

SearchStage::SearchStage(Context c, Host& host) : c_(c), host_(host) {
    c_.batches.register_stage(
        store::BatchKind::Search,
        {
            .finish = [this](std::int64_t batch_id) { record_control_ratios(batch_id); },
            .concurrent = true,
            .control_needs_candidate = true,
            .slow_stop = [this](const fs::path& control_log) { return slow_stop(control_log); },
        });
}

std::optional<trial::ManifestTask::SlowStop> SearchStage::slow_stop(const fs::path& control_log) {
    if (control_log.empty()) {
        // No control in the batch (planned by hand): the incumbent's step time as measured, the fastest so
        // far over every step (the baseline's or a search trial's that ran every step).
        double best = 0;
        for (const auto& t : c_.store.trials({.kinds = {TrialKind::Search, TrialKind::Doctor},
                             .state = TrialState::Finished,
                             .outcome = trial::Outcome::Ok,
                             .counted = true}))
            if (t.step_time_s && *t.step_time_s > 0 && (best == 0 || *t.step_time_s < best))
                best = *t.step_time_s;
        return slow_stop_rule(best, c_.doctor.mde(), c_.contract.invariants.steps,
                              c_.contract.invariants.warmup_steps);
    }
    // Like against like: the incumbent is the best ratio to its own batch's control so far (the baseline's
    // is 1), and a trial is held to that ratio, slowed by the MDE, times the control running beside it.
    double best = 1;
    for (const auto& t : c_.store.trials({.kinds = {TrialKind::Search},
                         .state = TrialState::Finished,
                         .outcome = trial::Outcome::Ok,
                         .counted = true}))
        if (const auto r = control_ratio(t); r && *r > 0 && *r < best) best = *r;
    auto rule = slow_stop_rule(best, c_.doctor.mde(), c_.contract.invariants.steps,
                               c_.contract.invariants.warmup_steps);
    if (!rule) return rule;
    rule->control_ratio = rule->step_s;
    rule->control_log = control_log.string();
    // Where the wrapper cannot read the control (the plugin's view hides it): the last batch's control's step
    // time, measured under the search's conditions; none before the first control has run.
    double last_control = 0;
    for (const auto& t : c_.store.trials({.kinds = {TrialKind::SearchControl},
                         .state = TrialState::Finished,
                         .outcome = trial::Outcome::Ok}))
        if (t.step_time_s && *t.step_time_s > 0) last_control = *t.step_time_s;
    rule->step_s = rule->control_ratio * last_control;
    return rule;
}

void SearchStage::record_control_ratios(std::int64_t batch_id) {
    const auto trials = c_.store.trials_of_batch(batch_id);
    const auto control = std::find_if(trials.begin(), trials.end(),
                                      [](const TrialRow& t) { return t.kind == TrialKind::SearchControl; });
    if (control != trials.end() &&
        (control->outcome != trial::Outcome::Ok || !control->step_time_s || !(*control->step_time_s > 0)))
        c_.store.log(fmt::format("batch {}: its control (trial {}) ended {}: no ratios to it", batch_id,
                                 control->id, store::outcome_name(*control)));
    // Every batch's again: a control is judged against all the others, which grow with each batch. (The
    // doctor's runs are no level here: they ran alone, the controls beside their batch.)
    std::vector<TrialRow> controls;
    std::vector<double> runs;
    for (auto& c : c_.store.trials({.kinds = {TrialKind::SearchControl},
                   .state = TrialState::Finished,
                   .outcome = trial::Outcome::Ok}))
        if (c.step_time_s && *c.step_time_s > 0)
            runs.push_back(*c.step_time_s), controls.push_back(std::move(c));
    const auto baseline = c_.store.baseline();
    const double run_sd = baseline ? std::log1p(std::max(0.0, baseline->cv_between)) : 0.05;
    const double bound = std::max(kControlOutlierSds * run_sd, std::log1p(c_.doctor.mde()));
    const auto levels = control_levels(runs, bound);
    store::Transaction tx(c_.store.db());
    for (std::size_t i = 0; i < controls.size(); ++i) {
        const auto& c = controls[i];
        const auto [over, outlier] = levels[i];
        bool logged = false;
        for (auto t : c_.store.trials_of_batch(c.batch_id)) {
            if (t.kind != TrialKind::Search || !t.step_time_s || !(*t.step_time_s > 0)) continue;
            const trial::ControlRatio r{c.id, over, *t.step_time_s / over,
                                        outlier ? std::optional<double>(runs[i]) : std::nullopt};
            const auto& was = t.measurements.control;
            if (was && was->step_s == r.step_s && was->outlier_control_s == r.outlier_control_s) continue;
            if (outlier && !logged && !(was && was->outlier_control_s))
                c_.store.log(
                    fmt::format("batch {}: its control (trial {}) ran at {:.4f} s/step, {:+.0f}% from "
                                "the median of the campaign's {} controls ({:.4f}; more than {:.0f}% "
                                "is a fluke of that run): the batch's ratios are over that median",
                                c.batch_id, c.id, runs[i], 100 * (runs[i] / over - 1), runs.size(), over,
                                100 * std::expm1(bound)));
            logged = true;
            t.measurements.control = r;
            c_.store.update_trial(t);
        }
    }
    tx.commit();
}

SearchWallPlan SearchStage::wall_plan(int q) {
    SearchWallPlan p;
    const auto m = host_.trial_cost_model();
    // The next batch: as long as the search batches so far took (from the end of the batch before, so the
    // proposal and the builds count), else its waves of trials at the baseline's pace.
    std::vector<double> periods;
    double previous_end = 0;
    std::vector<store::BatchRow> done = c_.store.batches(store::BatchState::Finished);
    std::sort(done.begin(), done.end(), [](auto& a, auto& b) { return a.finished < b.finished; });
    for (const auto& b : done) {
        if (b.kind == store::BatchKind::Search && previous_end > 0)
            periods.push_back(b.finished - previous_end);
        previous_end = b.finished;
    }
    const int conc = std::max(1, c_.contract.resources.max_concurrent);
    p.next_batch_s = periods.empty()
                         ? std::ceil(double(std::max(q, 1) + 1) / conc) * m.trial_s() // + the control
                         : measure::median(periods);
    // Verification: the best verify_top distinct candidates faster than the baseline; the next batch may
    // add up to q of them.
    const auto baseline = c_.store.baseline();
    const double base = baseline ? baseline->median_step_s : 0.0;
    const auto baseline_key = c_.contract.space.baseline().key();
    std::set<std::string> faster, unchecked; // unchecked: with a patch set whose equivalence is not known
    double best = 0; // the search's best speed-up (over its control, else the baseline)
    for (const auto& t : c_.store.trials({.kinds = {TrialKind::Search}, .outcome = trial::Outcome::Ok}))
        if (const auto r = baseline_ratio(t, base); t.candidate_key != baseline_key && r && *r < 1) {
            faster.insert(t.candidate_key);
            best = std::max(best, 1 / *r);
            const auto c = space::Candidate::from_json(t.candidate);
            if (const auto eq = c.patches.empty() ? std::nullopt : c_.equivalence.record(c);
                !c.patches.empty() && (!eq || eq->state == "running"))
                unchecked.insert(t.candidate_key);
        }
    p.verify_candidates = std::min(c_.contract.repeats.verify_top, static_cast<int>(faster.size()) + q);
    // The next batch's candidates may each bring a patch set of its own when the space has patches.
    p.equivalence_checks =
        std::min(p.verify_candidates, static_cast<int>(unchecked.size()) + (c_.catalog.empty() ? 0 : q));
    // The pairs each is expected to take, its re-check's block included (verify::Design::planned_pairs): at
    // the doctor's noise, for the search's best speed-up, or for a 1.10x (the common real gain) before any;
    // never more than half the wall-time budget holds (a noisy doctor plans max_pairs: reserving them all
    // would end the search before its first batch, and nothing would be found to verify).
    const auto seq = verify::design(c_.contract);
    const double run_sd = baseline ? std::log1p(std::max(0.0, baseline->cv_between)) : 0.05;
    p.pairs = std::max(c_.contract.repeats.verify, seq.planned_pairs(run_sd, best > 1 ? best : 1.10));
    if (const double budget = c_.contract.budget.wall_time_s; budget > 0 && p.verify_candidates > 0) {
        const double per_pair = verification_wall_s(m, p.verify_candidates, 1);
        if (per_pair > 0)
            p.pairs = std::min(p.pairs, std::max(c_.contract.repeats.verify,
                                                 static_cast<int>(std::floor(budget / 2 / per_pair))));
    }
    p.verify_reserve_s = verification_wall_s(m, p.verify_candidates, p.pairs, p.equivalence_checks);
    return p;
}

namespace {

std::string wall_time_end(double budget, double used, const SearchWallPlan& plan, double trial_s) {
    return fmt::format(
        "search ends: wall-time budget {:.0f} s: {:.0f} s used; the next batch (~{:.0f} s) and "
        "the verification reserve (~{:.0f} s: {} candidates x {} A/B pairs x 2 trials, the "
        "re-check's included, and {} equivalence checks x 2 trials, trials of ~{:.1f} s) would "
        "pass it",
        budget, used, plan.next_batch_s, plan.verify_reserve_s, plan.verify_candidates, plan.pairs,
        plan.equivalence_checks, trial_s);
}

// What the contract says a proposal is held to: the smallest gain worth a trial (the rule's min_speedup), the
// memory limit the models weigh OOMs against, the time limit and the steps of a trial.
void set_contract_limits(search::ProposalContext& ctx, const contract::Contract& c) {
    ctx.min_gain = c.verify.min_speedup;
    ctx.memory_limit_bytes = static_cast<double>(contract::modeled_memory_limit_bytes(c.resources));
    ctx.time_limit_s = static_cast<double>(c.resources.time_limit_s);
    ctx.trial_steps = c.invariants.steps;
}

// A search batch's control: the baseline beside its candidates.
Task control_task(const space::Space& space) {
    Task t;
    t.candidate = space.baseline();
    t.kind = TrialKind::SearchControl;
    t.reason = "the batch's control: the baseline beside its candidates";
    return t;
}

bool contains_excluded(const space::Candidate& c, const std::vector<std::vector<std::string>>& excluded) {
    return std::any_of(excluded.begin(), excluded.end(), [&](const std::vector<std::string>& set) {
        return std::includes(c.patches.begin(), c.patches.end(), set.begin(), set.end());
    });
}

// A batch's first tasks, up to q: the re-queue, in its order (`dequeued`: the entries it gives, or drops as
// excluded now, which leave it once the batch is planned); then the experience bank's seeds, each once, with
// the bank's reason in the audit.
std::vector<Task> first_tasks(store::CampaignStore& store, int q,
                              const std::vector<std::vector<std::string>>& excluded,
                              const std::vector<store::BankSeed>& seeds,
                              std::vector<std::int64_t>& dequeued) {
    std::vector<Task> tasks;
    for (const auto& e : store.requeued()) {
        if (static_cast<int>(tasks.size()) >= q) break;
        dequeued.push_back(e.id);
        auto cand = space::Candidate::from_json(e.candidate);
        if (contains_excluded(cand, excluded)) continue;
        Task t;
        t.candidate = std::move(cand);
        t.reason = e.reason;
        t.attempt = e.attempt;
        tasks.push_back(t);
    }
    std::set<std::string> tried;
    for (const auto& t : store.trials())
        tried.insert(t.candidate_key);
    for (const auto& sd : seeds) {
        auto cand = space::Candidate::from_json(sd.candidate);
        if (static_cast<int>(tasks.size()) >= q || tried.count(cand.key()) ||
            contains_excluded(cand, excluded))
            continue;
        tasks.push_back({cand, TrialKind::Search, sd.reason, 0, {}, {}});
        tried.insert(cand.key());
    }
    return tasks;
}

// What the proposer learns from: the search's and the doctor's finished, counted trials. In a batch in which
// the baseline itself crashed or broke the contract, the failures say more about the infrastructure than
// about the candidates: marked so, and the feasibility model does not learn them.
std::vector<search::Observation> search_history(store::CampaignStore& store, const space::Space& space) {
    const auto finished = store.trials(
        {.kinds = {TrialKind::Search, TrialKind::Doctor}, .state = TrialState::Finished, .counted = true});
    const auto base_key = space.baseline().key();
    auto own_failure = [](const store::TrialRow& t) {
        return t.outcome == trial::Outcome::Crash || t.outcome == trial::Outcome::ContractViolation;
    };
    std::set<std::int64_t> baseline_failed;
    for (const auto& t : finished)
        if (t.candidate_key == base_key && own_failure(t)) baseline_failed.insert(t.batch_id);
    std::vector<search::Observation> history;
    for (const auto& t : finished) {
        search::Observation ob;
        ob.candidate = space::Candidate::from_json(t.candidate);
        ob.outcome = *t.outcome;
        ob.step_time_s = t.step_time_s;
        ob.peak_memory_bytes = t.peak_memory_bytes;
        ob.cost_node_s = t.cost_node_s;
        ob.violation = t.violation;
        ob.infrastructure = own_failure(t) && baseline_failed.count(t.batch_id) > 0;
        history.push_back(std::move(ob));
    }
    return history;
}

} // namespace

void SearchStage::run(const RunOptions& o) {
    c_.batches.resume_open(o);
    auto proposer = search::make_proposer(o.proposer);
    const auto baseline = c_.store.baseline();
    while (!host_.stopping(o)) {
        auto use = host_.budget_use();
        if (!use.exhausted.empty()) {
            if (c_.store.stage() < store::Stage::Verification)
                host_.say(o, "search ends: " + use.exhausted + " used");
            return;
        }
        const int q = std::min(c_.contract.budget.batch_size, c_.contract.budget.trials - use.trials);
        // Leave the wall time verification needs: stop before a batch that would eat into it.
        if (const double budget = c_.contract.budget.wall_time_s; budget > 0 && o.verify && baseline) {
            const auto plan = wall_plan(q);
            if (!plan.fits(use.wall_s, budget)) {
                host_.say(o, wall_time_end(budget, use.wall_s, plan, host_.trial_cost_model().trial_s()));
                return;
            }
        }
        // The agent, after the doctor and after each batch: its patches join the space before the proposal.
        if (c_.contract.agent.enabled()) {
            c_.agent.consult(o, c_.store.agent_calls().empty() ? "after_doctor" : "after_batch");
            if (host_.stopping(o)) return;
        }
        // Patch sets that failed their equivalence check: no candidate that contains one runs again.
        const auto excluded = c_.equivalence.not_equivalent_patch_sets();
        std::vector<std::int64_t> dequeued;
        const auto seeds = c_.store.campaign_run().bank_seeds.value_or(std::vector<store::BankSeed>{});
        std::vector<Task> tasks = first_tasks(c_.store, q, excluded, seeds, dequeued);
        search::ProposalContext ctx;
        ctx.space = &c_.contract.space;
        for (const auto& sd : seeds)
            ctx.seeds.push_back(space::Candidate::from_json(sd.candidate));
        for (const auto& p : c_.catalog)
            ctx.patches.push_back({p.id, p.tags, search::tag_claim(p.tags)});
        c_.agent.fill_priors(ctx);
        ctx.history = search_history(c_.store, c_.contract.space);
        for (const auto& t : tasks)
            ctx.history.push_back({t.candidate, trial::Outcome::Ok, {}, {}, 0});
        if (baseline) ctx.baseline_step_s = baseline->median_step_s;
        ctx.noise_floor = c_.doctor.mde();
        set_contract_limits(ctx, c_.contract);
        ctx.trial_overhead_s = host_.trial_cost_model().overhead_s;
        ctx.memory_estimate = [this](const space::Candidate& c) { return host_.memory_estimate(c); };
        ctx.excluded_patch_sets = excluded;
        ctx.q = q - static_cast<int>(tasks.size());
        ctx.seed = std::hash<std::string>{}(c_.store.meta("id").value_or("")) + c_.store.batches().size();
        if (ctx.q > 0) {
            for (auto& p : proposer->propose(ctx))
                tasks.push_back({p.candidate, TrialKind::Search, p.reason, 0, {}, {}});
            // Why regions are avoided, for the audit (the campaign log) and for people.
            for (const auto& note : proposer->notes()) {
                c_.store.log(note);
                host_.say(o, note);
            }
        }
        if (tasks.empty() && c_.contract.agent.enabled() && c_.agent.due(true) &&
            c_.agent.consult(o, "space_exhausted") > 0)
            continue; // new patches: propose again
        if (tasks.empty()) {
            const auto why = proposer->stop_reason();
            host_.say(o,
                      "search ends: " + (why.empty() ? "every candidate of the space has been tried" : why));
            return;
        }
        // The batch's control first: the baseline under the same conditions as its candidates (the same
        // concurrency, nodes spread the same way), which their comparisons and early stops are made with.
        tasks.insert(tasks.begin(), control_task(c_.contract.space));
        const auto planned = c_.batches.plan(store::BatchKind::Search, tasks);
        const auto id = planned.id;
        for (const auto e : dequeued)
            c_.store.dequeue(e);
        host_.say(o, fmt::format("batch {}: {} candidates and a control ({} of {} trials used){}", id,
                                 tasks.size() - 1, use.trials, c_.contract.budget.trials,
                                 planned.control_dropped ? "; none built, so its control does not run" : ""));
        c_.batches.submit(id, o);
        c_.batches.await(id, o);
    }
}

} // namespace infrarsi::campaign
