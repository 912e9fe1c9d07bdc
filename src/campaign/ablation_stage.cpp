// The ablation stage: a promoted bundle of several changes (knob changes and patches) is run again with each
// change removed in turn (the knob back at its baseline value, the patch left out), in rounds of the bundle
// and each ablated variant, so the report says what carries the gain and the experience bank records each
// change's own measured effect (experience.cpp), never the bundle's speed-up credited to every part of it.
// A change's effect is the speed-up it adds to the rest of the bundle: the ablated variant's step time over
// the bundle's in the same round, with the interval verification uses (verify::speedup_interval). The
// wall-time budget cuts the rounds, then the changes; what was skipped is said in the result, which is
// kept in the verification's record (store::Ablation) (docs/orchestrator.md, "Ablation").
#include "campaign/ablation_stage.hpp"

#include "measure/statistics.hpp"
#include "trial/outcome.hpp"
#include "util/error.hpp"
#include "verify/verify.hpp"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>

namespace infrarsi::campaign {

using store::TrialKind;

namespace {

// The changes of `c` from the baseline, each with the candidate that leaves it out.
struct Component {
    store::AblationChange what;
    space::Candidate without;
};

std::vector<Component> components(const space::Space& space, const space::Candidate& c) {
    std::vector<Component> out;
    const auto base = space.baseline();
    for (const auto& [name, value] : c.knobs) {
        const auto it = base.knobs.find(name);
        if (it == base.knobs.end() || it->second == value) continue;
        Component k;
        k.what = {"knob", name, space::env_value(value), space::env_value(it->second), std::nullopt};
        k.without = c;
        k.without.knobs[name] = it->second;
        out.push_back(std::move(k));
    }
    for (const auto& id : c.patches) {
        Component p;
        p.what = {"patch", id, std::nullopt, std::nullopt, std::nullopt};
        p.without = c;
        p.without.patches.erase(std::find(p.without.patches.begin(), p.without.patches.end(), id));
        out.push_back(std::move(p));
    }
    return out;
}

std::string component_name(const store::AblationChange& w) {
    if (w.kind == "knobs") return w.name + " (together: a constraint ties them)";
    return w.kind == "knob"
               ? fmt::format("{}={} (baseline {})", w.name, w.value.value_or(""), w.baseline.value_or(""))
               : "+" + w.name;
}

} // namespace

namespace {

// One change: its effect is the bundle's, measured by verification.
store::Ablation single_change(const std::vector<Component>& parts, const store::VerificationRow& v) {
    store::Ablation a;
    a.state = "single";
    a.note = "one change: its effect is the verified speed-up";
    for (const auto& p : parts) {
        store::AblationComponent c;
        c.change = p.what;
        c.name = component_name(p.what);
        c.state = "measured";
        c.effect = v.speedup.value_or(0);
        c.lo = v.lo.value_or(0);
        c.hi = v.hi.value_or(0);
        c.carries = true;
        c.measured_by = "verification (the only change)";
        a.components.push_back(std::move(c));
    }
    return a;
}

// The changes that can be measured alone. Variants outside the space (a constraint ties the change to
// another) cannot run alone; the knobs that cannot are removed together, as one change, when that is in the
// space. What cannot run goes to `skipped`.
std::vector<Component> runnable_changes(const space::Space& space, const space::Candidate& cand,
                                        std::vector<Component> parts,
                                        std::vector<store::AblationSkip>& skipped) {
    std::vector<Component> runnable;
    std::vector<Component> tied;
    for (auto& p : parts) {
        const auto why = space.violation(p.without.knobs);
        if (!why.empty()) {
            skipped.push_back(
                {p.what, component_name(p.what), "the bundle without it alone is not in the space: " + why});
            if (p.what.kind == "knob") tied.push_back(p);
            continue;
        }
        runnable.push_back(std::move(p));
    }
    if (tied.size() >= 2) {
        Component g;
        g.without = cand;
        std::vector<std::string> names;
        std::string label;
        for (const auto& p : tied) {
            const auto& name = p.what.name;
            g.without.knobs[name] = space.baseline().knobs.at(name);
            names.push_back(name);
            label += (label.empty() ? "" : " ") + name + "=" + p.what.value.value_or("");
        }
        g.what = {"knobs", label, std::nullopt, std::nullopt, names};
        const auto why = space.violation(g.without.knobs);
        if (why.empty())
            runnable.push_back(std::move(g));
        else
            skipped.push_back(
                {g.what, component_name(g.what), "the bundle without them is not in the space: " + why});
    }
    return runnable;
}

// The wall-time budget (`left` seconds, trials of ~`trial_s`) cuts the rounds (at least 2, for an interval),
// then the changes from the last, which go to `skipped`.
void cut_to_budget(std::vector<Component>& runnable, int& rounds, double left, double trial_s,
                   std::vector<store::AblationSkip>& skipped) {
    auto fits = [&](std::size_t k, int r) { return trial_s <= 0 || r * (k + 1) * trial_s <= left; };
    while (rounds > 2 && !fits(runnable.size(), rounds))
        --rounds;
    while (!runnable.empty() && !fits(runnable.size(), rounds)) {
        skipped.push_back({runnable.back().what, component_name(runnable.back().what),
                           fmt::format("the wall-time budget: {:.0f} s left, ~{:.1f} s a trial",
                                       std::max(0.0, left), trial_s)});
        runnable.pop_back();
    }
}

// Rounds of the bundle and each variant.
std::vector<Task> ablation_tasks(const space::Candidate& cand, const std::vector<Component>& runnable,
                                 int rounds) {
    std::vector<Task> tasks;
    for (int r = 0; r < rounds; ++r) {
        // The bundle first in even rounds, last in odd ones, so no arm is always first.
        const Task bundle{
            cand, TrialKind::Ablation, fmt::format("ablation round {}: the bundle", r + 1), 0, {}, {}};
        if (r % 2 == 0) tasks.push_back(bundle);
        for (const auto& p : runnable)
            tasks.push_back({p.without,
                             TrialKind::Ablation,
                             fmt::format("ablation round {}: without {}", r + 1, component_name(p.what)),
                             0,
                             {},
                             {}});
        if (r % 2 == 1) tasks.push_back(bundle);
    }
    return tasks;
}

std::vector<store::AblationComponent> running_components(const std::vector<Component>& runnable) {
    std::vector<store::AblationComponent> out;
    for (const auto& p : runnable) {
        store::AblationComponent c;
        c.change = p.what;
        c.name = component_name(p.what);
        c.without = p.without.key();
        c.state = "running";
        out.push_back(std::move(c));
    }
    return out;
}

} // namespace

void AblationStage::run(const RunOptions& o) {
    for (auto v : c_.store.verifications()) {
        if (host_.stopping(o)) return;
        if (!v.promoted || v.detail.ablation) continue;
        const auto cand = space::Candidate::from_json(v.candidate);
        auto parts = components(c_.contract.space, cand);
        if (parts.size() < 2) {
            v.detail.ablation = single_change(parts, v);
            c_.store.update_verification(v);
            continue;
        }
        store::Ablation a;
        a.state = "done";
        auto runnable = runnable_changes(c_.contract.space, cand, std::move(parts), a.skipped);
        int rounds = std::max(2, c_.contract.repeats.verify);
        if (const double budget = c_.contract.budget.wall_time_s; budget > 0 && !runnable.empty()) {
            const auto m = host_.trial_cost_model();
            cut_to_budget(runnable, rounds, budget - host_.wall_used_s(), m.trial_s(), a.skipped);
        }
        if (runnable.empty()) {
            a.state = "skipped";
            v.detail.ablation = a;
            c_.store.update_verification(v);
            host_.say(o, fmt::format("ablation of {} skipped: no change could be measured", cand.describe()));
            continue;
        }
        const auto tasks = ablation_tasks(cand, runnable, rounds);
        a.components = running_components(runnable);
        a.state = "running";
        a.rounds = rounds;
        a.bundle = cand.key();
        host_.say(
            o, fmt::format("ablation of {}: {} rounds of the bundle and {} variants, each without one change",
                           cand.describe(), rounds, runnable.size()));
        const auto batch = c_.batches.plan(store::BatchKind::Ablation, tasks).id;
        a.batch_id = batch;
        v.detail.ablation = a;
        c_.store.update_verification(v);
        c_.batches.submit(batch, o);
        c_.batches.await(batch, o);
    }
}

AblationStage::AblationStage(Context c, Host& host) : c_(c), host_(host) {
    c_.batches.register_stage(store::BatchKind::Ablation,
                              {.finish = [this](std::int64_t batch_id) { finish(batch_id); }});
}

namespace {

bool usable(const store::TrialRow& t) {
    return t.step_time_s &&
           (t.outcome == trial::Outcome::Ok || t.violation == trial::Violation::LossInvariant);
}

// One change's effect from the ablation batch's trials (in id order: the order of the tasks, `per_round` a
// round): the bundle without it against the bundle, round by round.
void measure_change(store::AblationComponent& comp, const std::vector<store::TrialRow>& trials,
                    const std::string& bundle, std::size_t per_round, const verify::NoisePrior& noise) {
    const std::string without = comp.without.value_or("");
    std::vector<double> log_ratios;
    std::vector<store::AblationPair> pairs;
    std::string failure;
    int rounds = 0, without_oom = 0; // rounds run; of which the bundle without it ran out of memory
    std::vector<std::int64_t> oom_trials;
    for (std::size_t r = 0; (r + 1) * per_round <= trials.size(); ++r) {
        const store::TrialRow *b = nullptr, *w = nullptr;
        for (std::size_t i = r * per_round; i < (r + 1) * per_round; ++i) {
            if (trials[i].candidate_key == bundle) b = &trials[i];
            if (trials[i].candidate_key == without) w = &trials[i];
        }
        ++rounds;
        if (w && w->outcome == trial::Outcome::OutOfMemory) {
            ++without_oom;
            oom_trials.push_back(w->id);
        }
        if (w && !usable(*w) && failure.empty())
            failure = fmt::format("trial {}: {} {}", w->id, store::outcome_name(*w), w->detail);
        if (!b || !w || !usable(*b) || !usable(*w)) continue;
        log_ratios.push_back(std::log(*w->step_time_s / *b->step_time_s));
        pairs.push_back({b->id, w->id, *b->step_time_s, *w->step_time_s});
    }
    comp.pairs = pairs;
    if (log_ratios.empty() && rounds > 0 && without_oom == rounds) {
        // A memory saver: without it the bundle's settings do not fit. It carries the gain as the
        // settings it makes possible do; there is no time to compare with.
        comp.state = "required";
        comp.carries = true;
        comp.why = fmt::format("without it the bundle runs out of memory (trials {}: peak > the limit): "
                               "the bundle's settings need its saving",
                               fmt::join(oom_trials, ", "));
        return;
    }
    if (log_ratios.size() < 2) {
        comp.state = "unmeasured";
        comp.why = fmt::format("{} of the rounds completed{}", log_ratios.size(),
                               failure.empty() ? "" : ": " + failure);
        return;
    }
    const auto ci = verify::speedup_interval(log_ratios, noise, 0.95);
    comp.state = "measured";
    comp.effect = std::exp(ci.estimate);
    comp.lo = std::exp(ci.lo);
    comp.hi = std::exp(ci.hi);
    comp.carries = std::exp(ci.lo) > 1.0;
    comp.measured_by = "ablation: the bundle without it, against the bundle";
}

// The log's line: each change and its effect.
std::string ablation_summary(const store::Ablation& a) {
    std::string summary;
    for (const auto& comp : a.components)
        summary += fmt::format("{}{} {}", summary.empty() ? "" : "; ", comp.name,
                               comp.state == "measured"
                                   ? fmt::format("{:.3f}x [{:.3f}, {:.3f}]", *comp.effect, *comp.lo, *comp.hi)
                                   : comp.state);
    return summary;
}

} // namespace

void AblationStage::finish(std::int64_t batch_id) {
    std::optional<store::VerificationRow> row;
    for (const auto& x : c_.store.verifications())
        if (x.detail.ablation && x.detail.ablation->batch_id == batch_id) row = x;
    if (!row) return;
    auto v = *row;
    auto& a = *v.detail.ablation;
    const auto trials = c_.store.trials_of_batch(batch_id); // in id order: the order of the tasks
    const std::string bundle = a.bundle.value_or("");
    const std::size_t per_round = a.components.size() + 1;
    verify::NoisePrior noise;
    if (auto b = c_.store.baseline()) {
        noise.cv_between = b->cv_between;
        noise.dof = std::max(0, b->completed - 1);
    }
    for (auto& comp : a.components)
        measure_change(comp, trials, bundle, per_round, noise);
    a.state = "done";
    store::Transaction tx(c_.store.db());
    c_.store.update_verification(v);
    c_.store.log(fmt::format("ablation of {}: {}", space::Candidate::from_json(v.candidate).describe(),
                             ablation_summary(a)));
    tx.commit();
}

} // namespace infrarsi::campaign
