// The verification stage: interleaved A/B pairs of the best candidates against the baseline, and the
// decision (verify::decide) that promotes or rejects each.
#include "campaign/campaign.hpp"

#include "trial/outcome.hpp"
#include "util/error.hpp"
#include "verify/verify.hpp"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

namespace infrarsi::campaign {

using nlohmann::json;
using store::TrialKind;
using store::TrialRow;

void Campaign::verify(const RunOptions& o) {
    resume_open_batches(o);
    if (store_->stage() >= store::Stage::Done || stopping(o)) return;
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
    // The best verify_top candidates, not counting those whose patch set failed its equivalence check
    // (equivalence.cpp): a cheat that is fastest does not take a real change's place.
    std::map<std::string, bool> done; // candidate key -> rejected as not equivalent
    for (const auto& v : store_->verifications())
        done[v.candidate_key] = v.detail.value("not_equivalent", false);
    int slots = contract_.repeats.verify_top;
    // A candidate the wall-time budget leaves no room for: recorded as skipped, with why.
    auto skip_for_budget = [&](store::VerificationRow& v, const space::Candidate& cand,
                               const std::string& why, double left, double trial_s) {
        v.state = "skipped";
        v.detail["reasons"] = json::array({why});
        v.detail["wall_left_s"] = left;
        v.detail["trial_s"] = trial_s;
        v.id = store_->add_verification(v);
        say(o, fmt::format("verification of {} skipped: {}", cand.describe(), why));
    };
    for (const auto& t : ranked) {
        if (stopping(o)) return;
        if (slots <= 0) break;
        if (auto it = done.find(t.candidate_key); it != done.end()) {
            slots -= !it->second;
            continue;
        }
        auto cand = space::Candidate::from_json(t.candidate);
        store::VerificationRow v;
        v.candidate_key = t.candidate_key;
        v.candidate = t.candidate;
        v.state = "running";
        v.detail = {{"search_trial", t.id}};
        if (!cand.patches.empty()) {
            auto eq = equivalence_record(cand);
            if (!eq || (*eq)["state"] == "running") {
                // Its wall time (one run of the patch set, one of the baseline) comes out of the budget too.
                if (const double budget = contract_.budget.wall_time_s; budget > 0) {
                    const auto m = trial_cost_model();
                    const double left = budget - budget_use().wall_s;
                    if (affordable_pairs(m, left, contract_.repeats.verify + 1) <
                        std::min(3, contract_.repeats.verify + 1)) {
                        const auto why = fmt::format(
                            "not verified: the wall-time budget ({:.0f} s) has {:.0f} s left, and its patch "
                            "set's equivalence check and 2 A/B pairs need ~{:.0f} s (~{:.1f} s a trial)",
                            budget, std::max(0.0, left), 6 * m.trial_s(), m.trial_s());
                        skip_for_budget(v, cand, why, left, m.trial_s());
                        --slots;
                        continue;
                    }
                }
                eq = run_equivalence(cand, o);
                if (!eq) return; // stopped
            }
            v.detail["equivalence"] = *eq;
            if ((*eq)["state"] != "passed") {
                const bool failed = (*eq)["state"] == "failed";
                v.state = "done";
                v.detail["not_equivalent"] = failed;
                v.detail["reasons"] = json::array({fmt::format(
                    "patch set {} {} the equivalence check apart from knobs: {}",
                    fmt::format("{}", fmt::join((*eq)["patches"].get<std::vector<std::string>>(), "+")),
                    failed ? "failed" : "did not complete", (*eq)["reason"].get<std::string>())});
                v.id = store_->add_verification(v);
                store_->log(fmt::format("not promoted {}: {}", cand.describe(),
                                        v.detail["reasons"][0].get<std::string>()));
                say(o, fmt::format("{}: {}", cand.describe(), v.detail["reasons"][0].get<std::string>()));
                slots -= !failed;
                continue;
            }
        }
        --slots;
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
                skip_for_budget(v, cand, why, left, m.trial_s());
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
        v.detail["pairs_planned"] = pairs;
        v.id = store_->add_verification(v);
        say(o, fmt::format("verifying {} ({:.4f} s/step in search, baseline {:.4f}): {} A/B pairs in "
                           "counterbalanced order, each pair on one node",
                           cand.describe(), *t.step_time_s, base, pairs));
        run_verification_stage(v, false, o);
    }
    // A first stage that promoted is re-checked in a fresh allocation before it is final (also after a
    // restart between the two).
    for (auto v : store_->verifications()) {
        if (stopping(o)) return;
        if (v.state != "recheck" || v.detail.contains("recheck")) continue;
        run_verification_stage(v, true, o);
    }
    // Which change of each promoted bundle carries its gain (ablation.cpp).
    ablate(o);
    // Run to its end (`infrarsi run`, or `infrarsi verify` after a --no-verify run): the campaign is done.
    if (!stopping(o)) store_->advance_stage(store::Stage::Done);
}

void Campaign::run_verification_stage(store::VerificationRow& v, bool recheck, const RunOptions& o) {
    auto cand = space::Candidate::from_json(v.candidate);
    int pairs = v.detail.value("pairs_planned", contract_.repeats.verify);
    if (recheck) {
        if (const double budget = contract_.budget.wall_time_s; budget > 0) {
            const auto m = trial_cost_model();
            const double left = budget - budget_use().wall_s;
            pairs = affordable_pairs(m, left, pairs);
            if (pairs < 2) {
                // Not final without its re-check: not promoted, and said why.
                v.state = "done";
                v.promoted = false;
                v.detail["reproduced"] = false;
                v.detail["recheck"] = {{"skipped", true}};
                auto reasons = v.detail.value("reasons", json::array());
                reasons.push_back(fmt::format("not re-checked: the wall-time budget has {:.0f} s left, and 2 "
                                              "A/B pairs need ~{:.0f} s",
                                              std::max(0.0, left), 4 * m.trial_s()));
                v.detail["reasons"] = reasons;
                store_->update_verification(v);
                say(o,
                    fmt::format("{} not promoted: {}", cand.describe(), reasons.back().get<std::string>()));
                return;
            }
        }
    }
    // Where the pairs run: the nodes the partition has now but the doctor's slow ones, spread round-robin;
    // the re-check on the nodes the first stage did not use, where there are any.
    auto nodes = scheduler(o).nodes(contract_.resources.partition);
    if (const auto slow = scheduler::nodes_to_avoid(slow_nodes(), nodes, contract_.resources.nodes);
        !slow.empty())
        std::erase_if(nodes, [&](const std::string& n) {
            return std::find(slow.begin(), slow.end(), n) != slow.end();
        });
    if (recheck) {
        std::set<std::string> used;
        for (const auto& p : v.detail.value("pairs", json::array()))
            for (const auto& n : p.value("nodes", std::vector<std::string>{}))
                used.insert(n);
        std::vector<std::string> fresh;
        for (const auto& n : nodes)
            if (!used.count(n)) fresh.push_back(n);
        if (static_cast<int>(fresh.size()) >= std::max(1, contract_.resources.nodes)) nodes = fresh;
    }
    const auto placed = verify::spread_pairs(pairs, nodes, contract_.resources.nodes);
    // The order of each pair: counterbalanced, shuffled by a seed drawn now and recorded.
    const std::uint64_t seed = std::random_device{}();
    const auto orders = verify::counterbalanced_orders(pairs, seed);
    std::mt19937_64 rng(std::random_device{}());
    // Each pair at a seed of its own, drawn now, both its runs at it: no loss the candidate could have
    // memorized from an earlier run exists at it (the contract's seed only where the job cannot be seeded).
    std::set<long long> used;
    for (const auto& r : json::parse(store_->meta("equivalence").value_or("[]")))
        if (r.contains("seed")) used.insert(r["seed"].get<long long>());
    for (const auto& x : store_->verifications())
        for (const auto* stage : {&x.detail, x.detail.contains("recheck") ? &x.detail["recheck"] : nullptr})
            if (stage)
                for (const auto& p : stage->value("plan", json::array()))
                    if (p.contains("seed")) used.insert(p["seed"].get<long long>());
    json plan = json::array();
    std::vector<Task> tasks;
    std::vector<TaskPlacement> where;
    std::vector<std::vector<std::string>> pair_args;
    for (int i = 0; i < pairs; ++i) {
        const auto order = orders[i];
        std::vector<std::string> placement;
        std::vector<std::string> on;
        if (!placed.empty()) {
            on = placed[i];
            placement.push_back("--nodelist=" + fmt::format("{}", fmt::join(on, ",")));
        }
        std::optional<long long> pair_seed;
        if (can_seed()) used.insert(*(pair_seed = fresh_seed(used)));
        Task a{contract_.space.baseline(), TrialKind::VerifyBaseline, "A: baseline", 0, v.id, pair_seed};
        Task b{cand, TrialKind::VerifyCandidate, "B: candidate", 0, v.id, pair_seed};
        if (recheck) a.reason += " (re-check)", b.reason += " (re-check)";
        if (order == verify::PairOrder::AB)
            tasks.push_back(a), tasks.push_back(b);
        else
            tasks.push_back(b), tasks.push_back(a);
        where.push_back({i, placement});
        where.push_back({i, placement});
        pair_args.push_back(placement);
        plan.push_back({{"pair", i + 1}, {"order", verify::to_string(order)}, {"nodes", on}});
        if (pair_seed) plan.back()["seed"] = *pair_seed;
    }
    // The spot check of a candidate with patches: one pair, drawn now at random, also runs the candidate's
    // knobs without its patches at that pair's seed, and the pair's candidate run must print the same losses
    // (finish_verification). The patch set cannot tell the run that is checked from the others: it is an A/B
    // pair like them, so one that computes honestly only when it guesses it is being checked (the equivalence
    // run, told apart by a run count it keeps outside the campaign) is caught in the pairs it cheats in.
    // Where the knobs do not fit without the patches: at the equivalence check's knobs (equivalence.cpp).
    const json spot = plan_spot_check(cand, v.id, plan, pair_args, tasks, where);
    const auto batch = plan_batch("verify", tasks, where);
    json stage = {{"batch", batch}, {"order_seed", seed}, {"plan", plan}};
    if (!spot.is_null()) stage["spot_check"] = spot;
    if (recheck) {
        v.detail["recheck"] = stage;
    } else {
        v.batch_id = batch;
        v.detail["order_seed"] = seed;
        v.detail["plan"] = plan;
        if (!spot.is_null()) v.detail["spot_check"] = spot;
    }
    store_->update_verification(v);
    submit_batch(batch, o);
    await_batch(batch, o);
}

void Campaign::finish_verification(std::int64_t vid) {
    store::VerificationRow v;
    for (const auto& x : store_->verifications())
        if (x.id == vid) v = x;
    const bool recheck = v.state == "recheck";
    if (recheck && !v.detail.contains("recheck")) return; // its batch was planned, not yet recorded here
    const std::int64_t batch_id = recheck ? v.detail["recheck"]["batch"].get<std::int64_t>() : v.batch_id;
    const json plan = recheck ? v.detail["recheck"]["plan"] : v.detail.value("plan", json::array());
    auto trials = store_->trials({.verification_id = vid});
    std::erase_if(trials, [&](const TrialRow& t) { return t.batch_id != batch_id; });
    std::sort(trials.begin(), trials.end(), [](const TrialRow& x, const TrialRow& y) { return x.id < y.id; });
    // The spot check's run (the candidate's knobs without its patches) is not one of the pairs.
    std::optional<TrialRow> twin;
    std::erase_if(trials, [&](const TrialRow& t) {
        if (t.kind != TrialKind::EquivalenceBaseline) return false;
        twin = t;
        return true;
    });
    const auto& inv = contract_.invariants;
    auto arm = [&](const TrialRow& t, bool first) {
        verify::Arm x;
        // A broken loss invariant is verification's to judge (it reports it as such), so such a run is kept.
        x.ok = t.outcome == trial::Outcome::Ok || t.violation == trial::Violation::LossInvariant;
        x.step_s = t.step_time_s.value_or(0);
        if (t.measurements.contains("losses")) x.losses = t.measurements["losses"].get<std::vector<double>>();
        if (t.measurements.contains("eval_loss") && t.measurements["eval_loss"].is_number())
            x.eval_loss = t.measurements["eval_loss"].get<double>();
        x.peak_memory_bytes = t.peak_memory_bytes;
        if (static_cast<int>(x.losses.size()) < inv.steps) x.ok = false;
        x.node = t.node;
        x.first = first;
        return x;
    };
    // Trials were planned two a pair, each pair's in the order it ran.
    std::vector<std::pair<verify::Arm, verify::Arm>> ab;
    std::vector<TrialRow> candidate_runs; // each pair's candidate run, by pair
    json pairs = json::array();
    for (std::size_t i = 0; i + 1 < trials.size(); i += 2) {
        const auto& t1 = trials[i];
        const auto& t2 = trials[i + 1];
        const bool ab_order = t1.kind == TrialKind::VerifyBaseline;
        const TrialRow& ta = ab_order ? t1 : t2;
        const TrialRow& tb = ab_order ? t2 : t1;
        candidate_runs.push_back(tb);
        ab.emplace_back(arm(ta, ab_order), arm(tb, !ab_order));
        const bool seeded = i / 2 < plan.size() && plan[i / 2].contains("seed");
        ab.back().first.at_reference_seed = ab.back().second.at_reference_seed = !seeded;
        json p = {{"pair", i / 2 + 1},
                  {"order", ab_order ? "AB" : "BA"},
                  {"baseline_trial", ta.id},
                  {"candidate_trial", tb.id},
                  {"baseline_step_s", ab.back().first.step_s},
                  {"candidate_step_s", ab.back().second.step_s},
                  {"baseline_node", ta.node},
                  {"candidate_node", tb.node},
                  {"same_node", !ta.node.empty() && ta.node == tb.node}};
        if (i / 2 < plan.size()) p["nodes"] = plan[i / 2].value("nodes", json::array());
        if (seeded) p["seed"] = plan[i / 2]["seed"];
        pairs.push_back(p);
    }
    auto cand = space::Candidate::from_json(v.candidate);
    bool math_changing = false;
    for (const auto& id : cand.patches)
        if (const auto* p = patch_info(id); p && p->has_tag("math_changing")) math_changing = true;
    verify::NoisePrior noise;
    verify::EvalReference eval;
    if (auto b = store_->baseline()) {
        noise.cv_between = b->cv_between;
        noise.dof = std::max(0, b->completed - 1);
        eval = verify::eval_reference(b->eval_losses);
    }
    auto d = verify::decide(ab, reference_losses(), contract_, mde(), math_changing, noise, eval);
    // The spot check's verdict: a failure is a patch set that is not the same math in the runs it was
    // measured in (never promoted, never proposed again); one that did not complete promotes nothing.
    json& stage = recheck ? v.detail["recheck"] : v.detail;
    if (stage.contains("spot_check"))
        judge_spot_check(stage["spot_check"], batch_id, cand, twin, candidate_runs, d, v);
    if (v.detail.contains("budget_note")) {
        d.evidence.push_back(v.detail["budget_note"].get<std::string>());
        if (!d.promoted) d.reasons.push_back(v.detail["budget_note"].get<std::string>());
    }
    if (recheck) {
        // The final decision: the first stage's, kept only when the re-check promotes too.
        verify::Decision first;
        first.promoted = true;
        first.speedup = v.speedup.value_or(0);
        first.lo = v.lo.value_or(0);
        first.hi = v.hi.value_or(0);
        first.evidence = v.detail.value("evidence", std::vector<std::string>{});
        const auto fin = verify::reproduce(first, d);
        v.detail["recheck"]["pairs"] = pairs;
        v.detail["recheck"]["speedup"] = d.speedup;
        v.detail["recheck"]["ci"] = {d.lo, d.hi};
        v.detail["recheck"]["reasons"] = d.reasons;
        v.detail["recheck"]["evidence"] = d.evidence;
        v.detail["recheck"]["nodes"] = d.nodes;
        v.detail["reproduced"] = d.promoted;
        v.detail["reasons"] = fin.reasons;
        v.detail["evidence"] = fin.evidence;
        v.state = "done";
        v.promoted = fin.promoted;
        store::Transaction tx(store_->db());
        store_->update_verification(v);
        if (fin.promoted) store_->add_promotion(v.id, v.candidate_key, v.speedup.value_or(0));
        store_->log(fin.promoted ? fmt::format("promoted {}: {:.3f}x [{:.3f}, {:.3f}], reproduced in a fresh "
                                               "allocation ({:.3f}x)",
                                               cand.describe(), first.speedup, first.lo, first.hi, d.speedup)
                                 : fmt::format("not promoted {}: {}", cand.describe(),
                                               fin.reasons.empty() ? "" : fin.reasons[0]));
        tx.commit();
        return;
    }
    // MFU with one denominator (the doctor's or the contract's) and the baseline's model FLOPs: the
    // baseline's at this verification's baseline step time (geometric mean of its complete runs), the
    // candidate's at that step time over the speed-up.
    if (const auto b = store_->baseline(); b && b->peak_flops && b->model_flops_per_step && d.speedup > 0) {
        double logs = 0;
        int n = 0;
        for (const auto& [x, y] : ab)
            if (x.ok && x.step_s > 0) logs += std::log(x.step_s), ++n;
        if (n > 0) {
            const auto m = verify::compare_mfu(*b->model_flops_per_step, *b->peak_flops, b->peak_flops_source,
                                               std::exp(logs / n), d.speedup);
            v.detail["mfu"] = {{"peak_flops", m.peak_flops},
                               {"peak_flops_source", m.peak_source},
                               {"model_flops_per_step", m.model_flops_per_step},
                               {"baseline_step_s", m.baseline_step_s},
                               {"candidate_step_s", m.candidate_step_s},
                               {"baseline", m.baseline},
                               {"candidate", m.candidate}};
        }
    }
    // A first stage that promotes is not final: it waits for its re-check (verify()).
    v.state = d.promoted ? "recheck" : "done";
    v.promoted = false;
    v.speedup = d.speedup;
    v.lo = d.lo;
    v.hi = d.hi;
    v.detail["pairs"] = pairs;
    v.detail["reasons"] = d.reasons;
    v.detail["evidence"] = d.evidence;
    v.detail["order_effect"] = d.order_effect;
    v.detail["mde"] = mde();
    store::Transaction tx(store_->db());
    store_->update_verification(v);
    store_->log(d.promoted ? fmt::format("{}: {:.3f}x [{:.3f}, {:.3f}]; re-checking in a fresh allocation",
                                         cand.describe(), d.speedup, d.lo, d.hi)
                           : fmt::format("not promoted {}: {}", cand.describe(),
                                         d.reasons.empty() ? "" : d.reasons[0]));
    tx.commit();
}

} // namespace infrarsi::campaign
