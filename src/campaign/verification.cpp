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
#include <map>
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
                        v.state = "skipped";
                        v.detail["reasons"] = json::array({why});
                        v.detail["wall_left_s"] = left;
                        v.detail["trial_s"] = m.trial_s();
                        v.id = store_->add_verification(v);
                        say(o, fmt::format("verification of {} skipped: {}", cand.describe(), why));
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
            tasks.push_back(
                {contract_.space.baseline(), TrialKind::VerifyBaseline, "A: baseline", 0, v.id, {}});
            tasks.push_back({cand, TrialKind::VerifyCandidate, "B: candidate", 0, v.id, {}});
        }
        say(o,
            fmt::format("verifying {} ({:.4f} s/step in search, baseline {:.4f}): {} interleaved A/B pairs",
                        cand.describe(), *t.step_time_s, base, pairs));
        v.batch_id = plan_batch("verify", tasks);
        store_->update_verification(v);
        submit_batch(v.batch_id, o);
        await_batch(v.batch_id, o);
    }
    // Which change of each promoted bundle carries its gain (ablation.cpp).
    ablate(o);
    // Run to its end (`infrarsi run`, or `infrarsi verify` after a --no-verify run): the campaign is done.
    if (!stopping(o)) store_->advance_stage(store::Stage::Done);
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
        if (t.measurements.contains("eval_loss") && t.measurements["eval_loss"].is_number())
            x.eval_loss = t.measurements["eval_loss"].get<double>();
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
    verify::EvalReference eval;
    if (auto b = store_->baseline()) {
        noise.cv_between = b->cv_between;
        noise.dof = std::max(0, b->completed - 1);
        eval = verify::eval_reference(b->eval_losses);
    }
    auto d = verify::decide(ab, reference_losses(), contract_, mde(), math_changing, noise, eval);
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

} // namespace infrarsi::campaign
