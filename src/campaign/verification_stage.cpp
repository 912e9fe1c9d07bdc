// The verification stage (verification_stage.hpp).
#include "campaign/verification_stage.hpp"

#include "campaign/control.hpp"

#include "trial/outcome.hpp"
#include "util/error.hpp"
#include "verify/robust.hpp"
#include "verify/sequential.hpp"
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
using store::VerificationState;

namespace {
// The search's distinct candidates faster than the baseline, like against like, as the search's plan counts
// them (baseline_ratio: against the control beside it in its batch, else the doctor's baseline); each by its
// best trial, ranked by that ratio, so that a batch run under load does not lose to one run on a quiet host
// by its raw step times.
std::vector<TrialRow> ranked_by_ratio(store::CampaignStore& st, const std::string& baseline_key,
                                      double base) {
    std::map<std::string, std::pair<double, TrialRow>> best;
    for (const auto& t : st.trials({.kinds = {TrialKind::Search}, .outcome = trial::Outcome::Ok})) {
        const auto r = baseline_ratio(t, base);
        if (t.candidate_key == baseline_key || !r || *r >= 1) continue;
        auto it = best.find(t.candidate_key);
        if (it == best.end() || *r < it->second.first) best[t.candidate_key] = {*r, t};
    }
    std::vector<std::pair<double, TrialRow>> by_ratio;
    for (auto& [k, rt] : best)
        by_ratio.push_back(rt);
    std::stable_sort(by_ratio.begin(), by_ratio.end(), [](auto& a, auto& b) { return a.first < b.first; });
    std::vector<TrialRow> ranked;
    for (auto& [r, t] : by_ratio)
        ranked.push_back(std::move(t));
    return ranked;
}

// Why the wall-time budget has no room for a patch set's equivalence check and its first A/B pairs; nothing
// where it has.
std::optional<std::string> no_room_for_equivalence(const TrialCostModel& m, double budget, double left,
                                                   int verify_pairs) {
    if (affordable_pairs(m, left, verify_pairs + 1) >= std::min(3, verify_pairs + 1)) return std::nullopt;
    return fmt::format("not verified: the wall-time budget ({:.0f} s) has {:.0f} s left, and its patch "
                       "set's equivalence check and 2 A/B pairs need ~{:.0f} s (~{:.1f} s a trial)",
                       budget, std::max(0.0, left), 6 * m.trial_s(), m.trial_s());
}

// Why the wall-time budget has no room for one block of A/B pairs; nothing where it has.
std::optional<std::string> no_room_for_block(const TrialCostModel& m, double budget, double left) {
    if (affordable_pairs(m, left, verify::Design::kBlock) >= verify::Design::kBlock) return std::nullopt;
    return fmt::format(
        "not verified: the wall-time budget ({:.0f} s) has {:.0f} s left, and a block of {} A/B "
        "pairs needs ~{:.0f} s (~{:.1f} s a trial)",
        budget, std::max(0.0, left), verify::Design::kBlock,
        verification_wall_s(m, 1, verify::Design::kBlock), m.trial_s());
}
} // namespace

namespace {

// The candidates verified already, each with whether it was rejected as not equivalent.
std::map<std::string, bool> verified_candidates(store::CampaignStore& st) {
    std::map<std::string, bool> done;
    for (const auto& v : st.verifications())
        done[v.candidate_key] = v.detail.not_equivalent;
    return done;
}

store::VerificationRow new_verification(const TrialRow& search_trial) {
    store::VerificationRow v;
    v.candidate_key = search_trial.candidate_key;
    v.candidate = search_trial.candidate;
    v.state = VerificationState::Running;
    v.detail.search_trial = search_trial.id;
    return v;
}

// A candidate the wall-time budget leaves no room for: recorded as skipped, with why; returns the line that
// says so.
std::string skip_for_budget(store::CampaignStore& st, store::VerificationRow& v, const space::Candidate& cand,
                            const std::string& why, double left, double trial_s) {
    v.state = VerificationState::Skipped;
    v.detail.reasons = {why};
    v.detail.wall_left_s = left;
    v.detail.trial_s = trial_s;
    v.id = st.add_verification(v);
    return fmt::format("verification of {} skipped: {}", cand.describe(), why);
}

// A candidate whose patch set's equivalence check `eq` did not pass (failed, or did not complete): recorded
// decided, not promoted; returns why.
std::string record_not_passed(store::CampaignStore& st, store::VerificationRow& v,
                              const space::Candidate& cand, const store::EquivalenceCheck& eq) {
    const bool failed = eq.state == "failed";
    v.state = VerificationState::Done;
    v.detail.not_equivalent = failed;
    v.detail.reasons = {fmt::format("patch set {} {} the equivalence check apart from knobs: {}",
                                    fmt::format("{}", fmt::join(eq.patches, "+")),
                                    failed ? "failed" : "did not complete", eq.reason.value_or(""))};
    v.id = st.add_verification(v);
    st.log(fmt::format("not promoted {}: {}", cand.describe(), v.detail.reasons[0]));
    return v.detail.reasons[0];
}

// A verification that runs: its sequence's design, recorded.
void start_verification(store::CampaignStore& st, store::VerificationRow& v, const verify::Design& seq) {
    v.detail.max_pairs = seq.max_pairs;
    v.detail.alpha = seq.alpha / seq.candidates;
    v.detail.min_speedup = seq.min_speedup;
    v.id = st.add_verification(v);
}

// The campaign's end: stage done, and when it ended.
void mark_done(store::CampaignStore& st) {
    st.advance_stage(store::Stage::Done);
    st.mark_ended(store::now_seconds());
}

// `t`: its search trial, said as the search compared it (over its batch's control where it has one).
std::string verifying(const space::Candidate& cand, const store::TrialRow& t, double base,
                      const verify::Design& seq) {
    const auto over = control_ratio(t);
    return fmt::format(
        "verifying {} ({:.4f} s/step in search, {}): blocks of {} A/B pairs (one in "
        "each order, each pair on one node) until decided, at most {}; promoted when the "
        "one-sided lower bound of the speed-up (error {:.2g} over all its looks) exceeds {:.3f} "
        "twice, the second time in a fresh allocation",
        cand.describe(), t.step_time_s.value_or(0),
        over ? fmt::format("{:.3f} of its batch's control", *over) : fmt::format("baseline {:.4f}", base),
        verify::Design::kBlock, seq.max_pairs, seq.alpha / seq.candidates, 1 + seq.min_speedup);
}

} // namespace

void VerificationStage::run(const RunOptions& o) {
    c_.batches.resume_open(o);
    if (c_.store.stage() >= store::Stage::Done || host_.stopping(o)) return;
    const auto baseline = c_.store.baseline();
    const double base = baseline ? baseline->median_step_s : 0.0;
    // Sequences left mid-way (a restart): on with them first, block by block.
    for (const auto& x : c_.store.verifications())
        if ((x.state == VerificationState::Running || x.state == VerificationState::Recheck) &&
            !run_sequence(x.id, o))
            return;
    // The distinct candidates faster than the baseline in the search, best first.
    const auto ranked = ranked_by_ratio(c_.store, c_.contract.space.baseline().key(), base);
    // The best verify_top candidates, not counting those whose patch set failed its equivalence check
    // (equivalence_stage.cpp): a cheat that is fastest does not take a real change's place.
    const auto done = verified_candidates(c_.store); // candidate key -> rejected as not equivalent
    int slots = c_.contract.repeats.verify_top;
    // A candidate the wall-time budget leaves no room for (`no_room`: why, from the cost model, the budget
    // and what is left of it): skipped, with why. True when skipped.
    auto skipped_for_budget = [&](store::VerificationRow& v, const space::Candidate& cand,
                                  const auto& no_room) {
        const double budget = c_.contract.budget.wall_time_s;
        if (budget <= 0) return false;
        const auto m = host_.trial_cost_model();
        const double left = budget - host_.wall_used_s();
        const std::optional<std::string> why = no_room(m, budget, left);
        if (why) host_.say(o, skip_for_budget(c_.store, v, cand, *why, left, m.trial_s()));
        return why.has_value();
    };
    for (const auto& t : ranked) {
        if (host_.stopping(o)) return;
        if (slots <= 0) break;
        if (auto it = done.find(t.candidate_key); it != done.end()) {
            slots -= !it->second;
            continue;
        }
        auto cand = space::Candidate::from_json(t.candidate);
        auto v = new_verification(t);
        if (!cand.patches.empty()) {
            auto eq = c_.equivalence.record(cand);
            if (!eq || eq->state == "running") {
                // Its wall time (one run of the patch set, one of the baseline) comes out of the budget too.
                if (skipped_for_budget(v, cand, [&](const TrialCostModel& m, double budget, double left) {
                        return no_room_for_equivalence(m, budget, left, c_.contract.repeats.verify);
                    })) {
                    --slots;
                    continue;
                }
                eq = c_.equivalence.run(cand, o);
                if (!eq) return; // stopped
            }
            v.detail.equivalence = *eq;
            if (eq->state != "passed") {
                host_.say(o,
                          fmt::format("{}: {}", cand.describe(), record_not_passed(c_.store, v, cand, *eq)));
                slots -= eq->state != "failed";
                continue;
            }
        }
        --slots;
        // The wall-time budget covers verification: one block (2 A/B pairs) at least, else skip the
        // candidate and say so.
        const auto seq = verify::design(c_.contract);
        if (skipped_for_budget(v, cand, no_room_for_block)) continue;
        start_verification(c_.store, v, seq);
        host_.say(o, verifying(cand, t, base, seq));
        if (!run_sequence(v.id, o)) return;
    }
    // A first stage that promoted goes on in a fresh allocation before it is final (also after a restart
    // between the two).
    for (const auto& x : c_.store.verifications())
        if (x.state == VerificationState::Recheck && !run_sequence(x.id, o)) return;
    // Which change of each promoted bundle carries its gain (ablation_stage.hpp).
    c_.ablation.run(o);
    // Run to its end (`infrarsi run`, or `infrarsi verify` after a --no-verify run): the campaign is done.
    if (host_.stopping(o)) return;
    mark_done(c_.store);
}

bool VerificationStage::run_sequence(std::int64_t vid, const RunOptions& o) {
    bool judged_once = false;
    for (;;) {
        if (host_.stopping(o)) return false;
        std::optional<store::VerificationRow> v;
        for (const auto& x : c_.store.verifications())
            if (x.id == vid) v = x;
        if (!v || (v->state != VerificationState::Running && v->state != VerificationState::Recheck))
            return true;
        const bool recheck = v->state == VerificationState::Recheck;
        const store::Recheck none;
        const auto& rc = v->detail.recheck ? *v->detail.recheck : none;
        const store::VerificationStage& stage =
            recheck ? static_cast<const store::VerificationStage&>(rc) : v->detail.first;
        if (recheck && rc.skipped) return true;
        // The stage's last block: awaited if it has not finished (a stop between submit and ingest); judged
        // if it finished without its look recorded.
        std::optional<std::int64_t> last;
        if (!stage.blocks.empty())
            last = stage.blocks.back();
        else if (recheck && rc.batch)
            last = rc.batch;
        else if (!recheck && v->batch_id > 0)
            last = v->batch_id;
        if (last && stage.next.value_or("") != "more") {
            if (c_.store.batch(*last).state != store::BatchState::Finished) {
                c_.batches.submit(*last, o);
                c_.batches.await(*last, o);
                continue;
            }
            if (judged_once) return true; // nothing more to do for it (said in its record)
            judged_once = true;
            finish(vid);
            continue;
        }
        judged_once = false;
        run_block(*v, recheck, o);
        // Say the look the block ended with.
        for (const auto& x : c_.store.verifications())
            if (x.id == vid && !x.detail.sequence.empty()) {
                const auto& l = x.detail.sequence.back();
                host_.say(o, fmt::format("{}: look over {} A/B pairs{}: {}: {}",
                                         space::Candidate::from_json(x.candidate).describe(), l.pairs,
                                         l.stage == "recheck" ? " (re-check)" : "",
                                         verify::look_text(l.estimate, l.lo, l.hi), l.next));
            }
    }
}

namespace {

// Not final without its re-check: not promoted, and said why (the wall-time budget has `left` seconds, a
// block of `pairs` pairs needs more). Returns why.
std::string skip_recheck(store::VerificationRow& v, double left, int pairs, double trial_s) {
    v.state = VerificationState::Done;
    v.promoted = false;
    v.detail.reproduced = false;
    v.detail.recheck = store::Recheck{};
    v.detail.recheck->skipped = true;
    v.detail.reasons.push_back(
        fmt::format("not re-checked: the wall-time budget has {:.0f} s left, and a block "
                    "of {} A/B pairs needs ~{:.0f} s",
                    std::max(0.0, left), pairs, 2 * pairs * trial_s));
    return v.detail.reasons.back();
}

// The re-check's nodes: those the first stage (`first`) did not use, where there are enough for a trial
// (`needed`); else all of `nodes`.
std::vector<std::string> recheck_nodes(const std::vector<store::PlannedPair>& first,
                                       const std::vector<std::string>& nodes, int needed) {
    std::set<std::string> used;
    for (const auto& p : first)
        for (const auto& n : p.nodes)
            used.insert(n);
    std::vector<std::string> fresh;
    for (const auto& n : nodes)
        if (!used.count(n)) fresh.push_back(n);
    return static_cast<int>(fresh.size()) >= std::max(1, needed) ? fresh : nodes;
}

// The seeds the campaign's equivalence checks and A/B pairs have run at.
std::set<long long> seeds_used(store::CampaignStore& st) {
    std::set<long long> used;
    for (const auto& r : st.equivalence_checks())
        if (r.seed) used.insert(*r.seed);
    for (const auto& x : st.verifications())
        for (const auto* stage : x.detail.stages())
            for (const auto& p : stage->plan)
                if (p.seed) used.insert(*p.seed);
    return used;
}

// One block of a stage: its pairs' runs, where each runs, and the pairs as the stage's plan records them.
struct Block {
    std::vector<store::PlannedPair> plan;
    std::vector<Task> tasks;
    std::vector<TaskPlacement> where;
    std::vector<std::vector<std::string>> pair_args; // each pair's placement
};

// The block's pairs of `cand` against `baseline`, after the stage's `before` pairs: pair i in `orders[i]`, on
// `placed[i]` (none: anywhere), at the seed `draw_seed` gives it (none: the contract's).
Block block_pairs(const space::Candidate& baseline, const space::Candidate& cand, std::int64_t vid,
                  bool recheck, int before, int pairs, const std::vector<verify::PairOrder>& orders,
                  const std::vector<std::vector<std::string>>& placed,
                  const std::function<std::optional<long long>()>& draw_seed) {
    Block k;
    for (int i = 0; i < pairs; ++i) {
        const auto order = orders[i];
        std::vector<std::string> placement;
        std::vector<std::string> on;
        if (!placed.empty()) {
            on = placed[i];
            placement.push_back("--nodelist=" + fmt::format("{}", fmt::join(on, ",")));
        }
        const std::optional<long long> pair_seed = draw_seed();
        Task a{baseline, TrialKind::VerifyBaseline, "A: baseline", 0, vid, pair_seed};
        Task b{cand, TrialKind::VerifyCandidate, "B: candidate", 0, vid, pair_seed};
        if (recheck) a.reason += " (re-check)", b.reason += " (re-check)";
        if (order == verify::PairOrder::AB)
            k.tasks.push_back(a), k.tasks.push_back(b);
        else
            k.tasks.push_back(b), k.tasks.push_back(a);
        k.where.push_back({i, placement});
        k.where.push_back({i, placement});
        k.pair_args.push_back(placement);
        k.plan.push_back({before + i + 1, verify::to_string(order), on, before / pairs + 1, pair_seed});
    }
    return k;
}

// The stage's record (the first stage's in the verification's detail, the re-check's in its "recheck"): the
// block's batch, order seed and pairs appended, and its spot check.
void record_block(store::VerificationRow& v, store::VerificationStage& stage, bool recheck,
                  std::int64_t batch, std::uint64_t order_seed, const std::vector<store::PlannedPair>& plan,
                  const std::optional<store::SpotCheck>& spot) {
    if (recheck)
        v.detail.recheck->batch = batch;
    else
        v.batch_id = batch;
    if (stage.plan.empty()) stage.order_seed = order_seed;
    stage.order_seeds.push_back(order_seed);
    stage.blocks.push_back(batch);
    stage.plan.insert(stage.plan.end(), plan.begin(), plan.end());
    stage.next = "running";
    if (spot) stage.spot_check = spot;
}

} // namespace

void VerificationStage::run_block(store::VerificationRow& v, bool recheck, const RunOptions& o) {
    auto cand = space::Candidate::from_json(v.candidate);
    const int pairs = verify::Design::kBlock;
    if (const double budget = c_.contract.budget.wall_time_s; recheck && budget > 0) {
        const auto m = host_.trial_cost_model();
        const double left = budget - host_.wall_used_s();
        if (affordable_pairs(m, left, pairs) < pairs) {
            const auto why = skip_recheck(v, left, pairs, m.trial_s());
            c_.store.update_verification(v);
            host_.say(o, fmt::format("{} not promoted: {}", cand.describe(), why));
            return;
        }
    }
    // Where the pairs run: the nodes the partition has now but the doctor's slow ones, a block to a node;
    // the re-check on the nodes the first stage did not use, where there are any.
    auto nodes = host_.scheduler(o).nodes(c_.contract.resources.partition);
    if (const auto slow =
            scheduler::nodes_to_avoid(c_.doctor.slow_nodes(), nodes, c_.contract.resources.nodes);
        !slow.empty())
        std::erase_if(nodes, [&](const std::string& n) {
            return std::find(slow.begin(), slow.end(), n) != slow.end();
        });
    if (recheck && !v.detail.recheck) v.detail.recheck.emplace();
    store::VerificationStage& stage_record =
        recheck ? static_cast<store::VerificationStage&>(*v.detail.recheck) : v.detail.first;
    if (recheck) nodes = recheck_nodes(v.detail.first.plan, nodes, c_.contract.resources.nodes);
    // Node-blocked: the stage's block b on node b mod N, both its pairs there (verify::spread_pairs), so
    // each block continues round the nodes where the last stopped.
    const int before = static_cast<int>(stage_record.plan.size());
    auto placed = verify::spread_pairs(before + pairs, nodes, c_.contract.resources.nodes);
    if (!placed.empty()) placed.erase(placed.begin(), placed.begin() + before);
    // The order of each pair: one AB and one BA a block, which first drawn from a seed drawn now and
    // recorded.
    const std::uint64_t seed = std::random_device{}();
    // Each pair at a seed of its own, drawn now, both its runs at it: no loss the candidate could have
    // memorized from an earlier run exists at it (the contract's seed only where the job cannot be seeded).
    std::set<long long> used = seeds_used(c_.store);
    auto block = block_pairs(c_.contract.space.baseline(), cand, v.id, recheck, before, pairs,
                             verify::block_orders(seed), placed, [&]() -> std::optional<long long> {
                                 if (!can_seed(c_.contract)) return std::nullopt;
                                 const long long s = fresh_seed(c_.contract, used);
                                 used.insert(s);
                                 return s;
                             });
    // The spot check of a candidate with patches: one pair, drawn now at random, also runs the candidate's
    // knobs without its patches at that pair's seed, and the pair's candidate run must print the same losses
    // (finish). The patch set cannot tell the run that is checked from the others: it is an A/B
    // pair like them, so one that computes honestly only when it guesses it is being checked (the equivalence
    // run, told apart by a run count it keeps outside the campaign) is caught in the pairs it cheats in.
    // Where the knobs do not fit without the patches: at the equivalence check's knobs
    // (equivalence_stage.cpp). (A stage's first block carries it: the first stage's and the re-check's.)
    std::optional<store::SpotCheck> spot;
    if (before == 0)
        spot =
            c_.equivalence.plan_spot_check(cand, v.id, block.plan, block.pair_args, block.tasks, block.where);
    const auto batch = c_.batches.plan(store::BatchKind::Verify, block.tasks, block.where).id;
    record_block(v, stage_record, recheck, batch, seed, block.plan, spot);
    c_.store.update_verification(v);
    c_.batches.submit(batch, o);
    c_.batches.await(batch, o);
}

// A verification batch finishes each verification it ran pairs of. Where the contract can seed, each A/B
// pair runs at a seed of its own and is compared within the pair (verify::decide), not with the doctor's
// reference at the contract's seed.
VerificationStage::VerificationStage(Context c, Host& host) : c_(c), host_(host) {
    c_.batches.register_stage(store::BatchKind::Verify,
                              {
                                  .finish =
                                      [this](std::int64_t batch_id) {
                                          std::set<std::int64_t> vids;
                                          for (const auto& t : c_.store.trials_of_batch(batch_id))
                                              if (t.verification_id) vids.insert(*t.verification_id);
                                          for (auto v : vids)
                                              finish(v);
                                      },
                                  .own_seeds = can_seed(c_.contract),
                              });
}

namespace {
// One run of a pair as verify::decide reads it.
verify::Arm arm_of(const TrialRow& t, bool first, int steps) {
    verify::Arm x;
    // A broken loss invariant is verification's to judge (it reports it as such), so such a run is kept.
    x.ok = t.outcome == trial::Outcome::Ok || t.violation == trial::Violation::LossInvariant;
    x.step_s = t.step_time_s.value_or(0);
    if (t.measurements.losses) x.losses = *t.measurements.losses;
    for (const double s : t.measurements.steady_samples)
        if (!std::isnan(s)) x.step_samples.push_back(s);
    x.eval_loss = t.measurements.eval_loss;
    x.peak_memory_bytes = t.peak_memory_bytes;
    if (static_cast<int>(x.losses.size()) < steps) x.ok = false;
    x.node = t.node;
    x.first = first;
    return x;
}

// One stage's pairs, from its batches' trials in the order they were planned (two a pair, each pair's in
// the order it ran), numbered from 1 within the stage as its plan numbers them.
struct StagePairs {
    std::vector<std::pair<verify::Arm, verify::Arm>> ab;
    std::vector<TrialRow> candidate_runs; // each pair's candidate run, by pair
    std::optional<TrialRow> twin;         // the spot check's run
    std::vector<store::MeasuredPair> pairs;
};

store::MeasuredPair measured_pair(std::size_t index, const TrialRow& ta, const TrialRow& tb, bool ab_order,
                                  const verify::Arm& xa, const verify::Arm& xb,
                                  const std::vector<store::PlannedPair>& plan) {
    store::MeasuredPair p;
    p.pair = static_cast<int>(index + 1);
    p.order = ab_order ? "AB" : "BA";
    p.baseline_trial = ta.id;
    p.candidate_trial = tb.id;
    p.baseline_step_s = xa.step_s;
    p.candidate_step_s = xb.step_s;
    p.baseline_node = ta.node;
    p.candidate_node = tb.node;
    p.same_node = !ta.node.empty() && ta.node == tb.node;
    if (xa.ok && xb.ok && xa.step_s > 0 && xb.step_s > 0)
        p.log_ratio = verify::robust_pair_log_ratio(xa.step_samples, xa.step_s, xb.step_samples, xb.step_s);
    if (index < plan.size()) {
        p.nodes = plan[index].nodes;
        p.block = plan[index].block;
        p.seed = plan[index].seed;
    }
    return p;
}

StagePairs stage_pairs(const std::vector<TrialRow>& all_trials, const std::set<std::int64_t>& batches,
                       const std::vector<store::PlannedPair>& plan, int steps) {
    StagePairs sp;
    std::vector<TrialRow> trials;
    for (const auto& t : all_trials)
        if (batches.count(t.batch_id)) trials.push_back(t);
    std::sort(trials.begin(), trials.end(), [](const TrialRow& x, const TrialRow& y) { return x.id < y.id; });
    // The spot check's runs (the knobs without the patches; where those knobs had to move, the patch set
    // there too) are not pairs.
    std::erase_if(trials, [&](const TrialRow& t) {
        if (t.kind == TrialKind::EquivalenceCandidate) return true;
        if (t.kind != TrialKind::EquivalenceBaseline) return false;
        sp.twin = t;
        return true;
    });
    for (std::size_t i = 0; i + 1 < trials.size(); i += 2) {
        const auto& t1 = trials[i];
        const auto& t2 = trials[i + 1];
        const bool ab_order = t1.kind == TrialKind::VerifyBaseline;
        const TrialRow& ta = ab_order ? t1 : t2;
        const TrialRow& tb = ab_order ? t2 : t1;
        sp.candidate_runs.push_back(tb);
        sp.ab.emplace_back(arm_of(ta, ab_order, steps), arm_of(tb, !ab_order, steps));
        const bool seeded = i / 2 < plan.size() && plan[i / 2].seed;
        sp.ab.back().first.at_reference_seed = sp.ab.back().second.at_reference_seed = !seeded;
        const auto& [xa, xb] = sp.ab.back();
        sp.pairs.push_back(measured_pair(i / 2, ta, tb, ab_order, xa, xb, plan));
    }
    return sp;
}

// MFU with one denominator (the doctor's or the contract's) and the baseline's model FLOPs: the baseline's at
// this verification's baseline step time (geometric mean of its complete runs), the candidate's at that step
// time over the speed-up. Nothing where the baseline does not say.
std::optional<store::MfuRecord> mfu_record(const std::optional<store::Baseline>& b,
                                           const std::vector<std::pair<verify::Arm, verify::Arm>>& ab,
                                           double speedup) {
    if (!b || !b->peak_flops || !b->model_flops_per_step || speedup <= 0) return std::nullopt;
    double logs = 0;
    int n = 0;
    for (const auto& [x, y] : ab)
        if (x.ok && x.step_s > 0) logs += std::log(x.step_s), ++n;
    if (n == 0) return std::nullopt;
    const auto m = verify::compare_mfu(*b->model_flops_per_step, *b->peak_flops, b->peak_flops_source,
                                       std::exp(logs / n), speedup);
    store::MfuRecord r;
    r.peak_flops = m.peak_flops;
    r.peak_flops_source = m.peak_source;
    r.peak_flops_by_job = b->peak_flops_by_job;
    r.model_flops_per_step = m.model_flops_per_step;
    r.baseline_step_s = m.baseline_step_s;
    r.candidate_step_s = m.candidate_step_s;
    if (m.baseline_known()) r.baseline = m.baseline;
    if (m.candidate_known()) r.candidate = m.candidate;
    if (!m.unknown.empty()) r.unknown = m.unknown;
    return r;
}

// What a look over every pair so far found, and where the verification goes next: the state of the one
// verification being judged, the looks so far and what the judge needs to say why.
struct Judgement {
    store::VerificationRow& v;
    const space::Candidate& cand;
    verify::Decision d;                                  // over every pair so far
    std::vector<std::pair<verify::Arm, verify::Arm>> ab; // every pair so far
    verify::Design seq;
    int so_far = 0;
    bool room = true; // for another block in the wall-time budget
    bool recheck = false;
    std::optional<store::Baseline> baseline;

    void look(const verify::Decision& x, verify::Next next) {
        v.detail.sequence.push_back({recheck ? "recheck" : "first", static_cast<int>(ab.size()), x.pairs,
                                     x.set_aside, x.speedup, x.lo, x.hi, verify::to_string(next)});
    }
    void record_mfu(double speedup) {
        if (auto r = mfu_record(baseline, ab, speedup)) v.detail.mfu = *r;
    }
    // Says why a sequence stopped undecided, or that it stopped a clear loser.
    void undecided(verify::Decision& x, verify::Next next, int cap) const {
        if (next == verify::Next::Stop && !x.settled && !x.futile && !x.promoted)
            x.reasons.push_back(
                room ? fmt::format("undecided after {} A/B pairs, the most the sequence takes there "
                                   "([verify] max_pairs = {}{})",
                                   so_far, seq.max_pairs,
                                   cap < seq.max_pairs ? ", less the re-check's block" : "")
                     : fmt::format("undecided after {} A/B pairs, and the wall-time budget has no room for "
                                   "another block",
                                   so_far));
        if (x.futile && !x.settled)
            x.evidence.push_back(
                fmt::format("a clear loser: the upper bound {:.3f}x (one-sided, error {:.2g}) is "
                            "under 1 + min_speedup = {:.3f}; no more pairs",
                            x.upper, seq.rule(so_far).futility_alpha, 1 + seq.min_speedup));
    }
};

// The re-check's look, over every pair; the fresh allocation's own pairs (`own`) must show a speed-up too.
void finish_recheck(store::CampaignStore& st, Judgement& j, const verify::Decision& own,
                    const std::vector<store::MeasuredPair>& pairs) {
    auto& v = j.v;
    const auto& d = j.d;
    const auto next = verify::after_recheck(j.seq, d, own.speedup, j.so_far, j.room);
    auto all = d;
    if (next != verify::Next::Promoted) {
        all.promoted = false;
        if (all.reasons.empty() && d.promoted)
            all.reasons.push_back(
                fmt::format("the fresh allocation's own pairs measured {:.3f}x: no speed-up", own.speedup));
    }
    j.undecided(all, next, j.seq.max_pairs);
    j.look(all, next);
    auto& rc = *v.detail.recheck;
    rc.pairs = pairs;
    rc.speedup = own.speedup;
    rc.ci = std::pair{own.lo, own.hi};
    rc.next = verify::to_string(next);
    if (next == verify::Next::More) {
        // On in the fresh allocation: another block.
        store::Transaction tx(st.db());
        st.update_verification(v);
        st.log(fmt::format("{}: {:.3f}x [{:.3f}, {:.3f}] over {} pairs, {:.3f}x in the fresh allocation: "
                           "undecided, another block there",
                           j.cand.describe(), d.speedup, d.lo, d.hi, j.so_far, own.speedup));
        tx.commit();
        return;
    }
    // The final decision: the first stage's, kept only when the re-check's look promotes too.
    verify::Decision first;
    first.promoted = true;
    first.speedup = v.speedup.value_or(0);
    first.lo = v.lo.value_or(0);
    first.hi = v.hi.value_or(0);
    first.evidence = v.detail.evidence;
    const auto fin = verify::reproduce(first, all);
    rc.all_pairs = store::Recheck::AllPairs{d.speedup, d.lo, d.hi, d.pairs};
    rc.reasons = all.reasons;
    rc.evidence = all.evidence;
    rc.nodes = own.nodes;
    v.detail.reproduced = all.promoted;
    v.detail.reasons = fin.reasons;
    v.detail.evidence = fin.evidence;
    v.detail.first.next = verify::to_string(next);
    v.state = VerificationState::Done;
    v.promoted = fin.promoted;
    // A promotion's speed-up is the sequence's over all its pairs (the first stage's alone is the one that
    // crossed first: biased upwards by the stopping).
    if (fin.promoted) {
        v.speedup = d.speedup;
        v.lo = d.lo;
        v.hi = d.hi;
        j.record_mfu(d.speedup);
    }
    store::Transaction tx(st.db());
    st.update_verification(v);
    if (fin.promoted) st.add_promotion(v.id, v.candidate_key, v.speedup.value_or(0));
    st.log(fin.promoted
               ? fmt::format("promoted {}: {:.3f}x, lower bound {:.3f} over {} pairs, reproduced in a "
                             "fresh allocation ({:.3f}x)",
                             j.cand.describe(), d.speedup, d.lo, d.pairs, own.speedup)
               : fmt::format("not promoted {}: {}", j.cand.describe(),
                             fin.reasons.empty() ? "" : fin.reasons[0]));
    tx.commit();
}

// The first stage's look: another block, the re-check, or stop.
void finish_first_stage(store::CampaignStore& st, Judgement& j, const std::vector<store::MeasuredPair>& pairs,
                        double mde) {
    auto& v = j.v;
    auto& d = j.d;
    const auto next = verify::after_look(j.seq, d, j.so_far, j.room);
    j.undecided(d, next, j.seq.first_stage_pairs());
    j.look(d, next);
    v.detail.first.next = verify::to_string(next);
    j.record_mfu(d.speedup);
    // A first stage that promotes is not final: it waits for its re-check (verify()).
    v.state = next == verify::Next::Recheck ? VerificationState::Recheck
              : next == verify::Next::More  ? VerificationState::Running
                                            : VerificationState::Done;
    v.promoted = false;
    v.speedup = d.speedup;
    v.lo = d.lo;
    v.hi = d.hi;
    v.detail.pairs = pairs;
    v.detail.pairs_counted = d.pairs;
    v.detail.reasons = d.reasons;
    v.detail.evidence = d.evidence;
    v.detail.order_effect = d.order_effect;
    v.detail.mde = mde;
    const auto& cand = j.cand;
    store::Transaction tx(st.db());
    st.update_verification(v);
    st.log(next == verify::Next::Recheck
               ? fmt::format("{}: {:.3f}x, lower bound {:.3f} over {} pairs; re-checking in a fresh "
                             "allocation",
                             cand.describe(), d.speedup, d.lo, j.so_far)
           : next == verify::Next::More
               ? fmt::format("{}: {:.3f}x [{:.3f}, {:.3f}] over {} pairs: undecided, another block",
                             cand.describe(), d.speedup, d.lo, d.hi, j.so_far)
               : fmt::format("not promoted {}: {}", cand.describe(), d.reasons.empty() ? "" : d.reasons[0]));
    tx.commit();
}
} // namespace

void VerificationStage::finish(std::int64_t vid) {
    store::VerificationRow v;
    for (const auto& x : c_.store.verifications())
        if (x.id == vid) v = x;
    const bool recheck = v.state == VerificationState::Recheck;
    if (recheck && !v.detail.recheck) return; // its batch was planned, not yet recorded here
    // The first stage's blocks (one batch each; a campaign of an older orchestrator: its one batch), and the
    // re-check's.
    std::set<std::int64_t> first_batches(v.detail.first.blocks.begin(), v.detail.first.blocks.end());
    if (first_batches.empty()) first_batches.insert(v.batch_id);
    const auto all_trials = c_.store.trials({.verification_id = vid});
    const int steps = c_.contract.invariants.steps;
    const auto first_stage = stage_pairs(all_trials, first_batches, v.detail.first.plan, steps);
    StagePairs fresh;
    if (recheck) {
        const auto& r = *v.detail.recheck;
        std::set<std::int64_t> batches(r.blocks.begin(), r.blocks.end());
        if (batches.empty()) batches.insert(r.batch.value());
        fresh = stage_pairs(all_trials, batches, r.plan, steps);
    }
    const auto& judged = recheck ? fresh : first_stage;
    // The sequence's look: over every pair so far (the re-check continues the first stage's sequence).
    auto ab = first_stage.ab;
    ab.insert(ab.end(), fresh.ab.begin(), fresh.ab.end());
    const auto cand = space::Candidate::from_json(v.candidate);
    bool math_changing = false;
    for (const auto& id : cand.patches)
        if (const auto* p = host_.patch_info(id); p && p->has_tag("math_changing")) math_changing = true;
    const auto baseline = c_.store.baseline();
    verify::NoisePrior noise;
    verify::EvalReference eval;
    if (baseline) {
        noise = verify::doctor_prior(*baseline);
        eval = verify::eval_reference(baseline->eval_losses);
    }
    const auto seq = verify::design(c_.contract);
    const int so_far = static_cast<int>(ab.size());
    auto d = verify::decide(ab, c_.doctor.reference_losses(), c_.contract, seq.rule(so_far), math_changing,
                            noise, eval);
    // The spot check's verdict: a failure is a patch set that is not the same math in the runs it was
    // measured in (never promoted, never proposed again); one that did not complete promotes nothing.
    store::VerificationStage& stage =
        recheck ? static_cast<store::VerificationStage&>(*v.detail.recheck) : v.detail.first;
    if (stage.spot_check) {
        // Its runs are in the stage's first block.
        const std::int64_t spot_batch = !stage.blocks.empty() ? stage.blocks[0]
                                        : recheck             ? v.detail.recheck->batch.value()
                                                              : v.batch_id;
        c_.equivalence.judge_spot_check(*stage.spot_check, spot_batch, cand, judged.twin,
                                        judged.candidate_runs, d, v);
    }
    // A spot check that failed or did not complete is not changed by more pairs.
    if (stage.spot_check && stage.spot_check->state != "passed") d.settled = true;
    // Room in the wall-time budget for another block.
    bool room = true;
    if (const double budget = c_.contract.budget.wall_time_s; budget > 0) {
        const auto m = host_.trial_cost_model();
        room = affordable_pairs(m, budget - host_.wall_used_s(), verify::Design::kBlock) >=
               verify::Design::kBlock;
    }
    Judgement j{v, cand, std::move(d), std::move(ab), seq, so_far, room, recheck, baseline};
    if (recheck)
        finish_recheck(c_.store, j,
                       verify::decide(fresh.ab, c_.doctor.reference_losses(), c_.contract, seq.rule(so_far),
                                      math_changing, noise, eval),
                       judged.pairs);
    else
        finish_first_stage(c_.store, j, judged.pairs, c_.doctor.mde());
}

} // namespace infrarsi::campaign
