// The equivalence stage: before a candidate with patches is verified, it runs against its own knob settings
// without its patches (so the patch set cannot tell the check from the A/B pairs by its knobs), at a seed
// chosen fresh for the check (random, never the contract's, the doctor's or an earlier check's, so no logged
// loss can be copied), and the two loss curves
// must agree at every step within [invariants] equivalence_tolerance, whatever loss mode the contract uses
// for knob changes. The patch set runs first, so while it runs no loss at that seed exists anywhere.
// Where the candidate's knobs do not fit in memory without its patches (a memory saver that makes a larger
// micro-batch possible), both run at the nearest knobs toward the baseline's where the unpatched code fits
// (equivalence_site): the patch set's equivalence is a property of its code, so it holds at any knobs. An
// unpatched run that runs out of memory is never by itself a verdict: the check is tried again nearer the
// baseline's knobs (at most kMaxAttempts runs of the check, each paid from the budget).
// A patch set that fails is a contract violation (Violation::NotEquivalent), never promoted, and never
// proposed again, alone or inside a larger set. A patch tagged math_changing is compared at the contract's
// loss_tolerance instead, flagged, and (verify::decide) never promoted.
// The checks are kept in the store's equivalence_checks table, one row each (store/equivalence_check.hpp,
// docs/orchestrator.md).
#include "campaign/equivalence_stage.hpp"

#include "model/censored_memory_model.hpp"
#include "space/memory_role.hpp"
#include "trial/manifest.hpp"
#include "trial/outcome.hpp"
#include "util/error.hpp"
#include "util/number.hpp"
#include "verify/equivalence.hpp"

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

namespace {

// The check's runs: at the candidate's knobs, then nearer the baseline's, then at the baseline's.
constexpr int kMaxAttempts = 3;
// Knobs are taken to fit without the patches when the memory model gives them at most this chance of
// running out of memory: a check that runs out costs two runs, one moved nearer the baseline costs nothing.
constexpr double kFitsAtMost = 0.25;

bool contains_set(const std::vector<std::string>& patches, const std::vector<std::string>& set) {
    return std::includes(patches.begin(), patches.end(), set.begin(), set.end());
}

} // namespace

std::vector<space::Candidate> settings_toward_baseline(const space::Space& s, const space::Candidate& c) {
    const auto base = s.baseline();
    std::vector<std::vector<std::pair<space::Value, double>>> values; // per knob: value, its distance
    std::size_t combos = 1;
    for (const auto& k : s.knobs) {
        const auto& from = c.knobs.at(k.name);
        const auto& to = base.knobs.at(k.name);
        const auto role = space::memory_role(k);
        const double w = role == space::MemoryRole::Accumulation ? 0
                         : role == space::MemoryRole::Other      ? 2
                                                                 : 1;
        std::vector<std::pair<space::Value, double>> vs{{from, 0}};
        const auto i = k.index_of(from), j = k.index_of(to);
        const bool numeric = k.kind == space::KnobKind::Integer || k.kind == space::KnobKind::Pow2;
        if (from == to || !i || !j) {
        } else if (numeric && (*i > *j ? *i - *j : *j - *i) <= 64) {
            for (auto x = std::min(*i, *j); x <= std::max(*i, *j); ++x)
                if (x != *i) vs.push_back({k.at(x), w * static_cast<double>(x > *i ? x - *i : *i - x)});
        } else if (role == space::MemoryRole::Recompute) {
            const int a = space::recompute_strength(from), b = space::recompute_strength(to);
            for (const auto& v : k.domain())
                if (const int x = space::recompute_strength(v);
                    v != from && x >= std::min(a, b) && x <= std::max(a, b))
                    vs.push_back({v, w * std::abs(x - a)});
        } else {
            vs.push_back({to, w});
        }
        combos *= vs.size();
        values.push_back(std::move(vs));
    }
    // A space too large to walk: the candidate's knobs and the baseline's.
    if (combos > 4096) {
        auto own = c;
        own.patches.clear();
        return {own, base};
    }
    std::vector<std::pair<double, space::Candidate>> out;
    for (std::size_t n = 0; n < combos; ++n) {
        space::Candidate x;
        double d = 0;
        std::size_t rest = n;
        for (std::size_t k = 0; k < values.size(); ++k) {
            const auto& [v, dv] = values[k][rest % values[k].size()];
            rest /= values[k].size();
            x.knobs[s.knobs[k].name] = v;
            d += dv;
        }
        if (s.feasible(x)) out.emplace_back(d, std::move(x));
    }
    std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<space::Candidate> list;
    for (auto& [d, x] : out)
        list.push_back(std::move(x));
    return list;
}

std::vector<double> EquivalenceStage::oom_probabilities(const std::vector<space::Candidate>& cands) {
    const double limit = static_cast<double>(contract::modeled_memory_limit_bytes(c_.contract.resources));
    if (!(limit > 0) || cands.empty()) return std::vector<double>(cands.size(), 0.0);
    const auto& space = c_.contract.space;
    // Fitted as the search fits it (search/model_proposer.hpp): the analytic estimate as every point's prior,
    // or half the limit for all when any has none; every finished run with a measured peak or an OOM.
    std::vector<space::Candidate> seen;
    std::vector<std::pair<bool, double>> obs; // censored, bytes
    for (const auto& t : c_.store.trials({.state = store::TrialState::Finished})) {
        if (t.outcome == trial::Outcome::OutOfMemory)
            obs.emplace_back(true, limit);
        else if (t.outcome == trial::Outcome::Ok && t.peak_memory_bytes && *t.peak_memory_bytes > 0)
            obs.emplace_back(false, *t.peak_memory_bytes);
        else
            continue;
        seen.push_back(space::Candidate::from_json(t.candidate));
    }
    bool analytic = true;
    auto prior = [&](const space::Candidate& x) {
        std::optional<double> e;
        if (analytic) e = host_.memory_estimate(x);
        if (!e || !(*e > 0)) analytic = false;
        return e.value_or(0.5 * limit);
    };
    std::vector<double> seen_prior, cand_prior;
    for (const auto& x : seen)
        seen_prior.push_back(prior(x));
    for (const auto& x : cands)
        cand_prior.push_back(prior(x));
    if (!analytic) {
        std::fill(seen_prior.begin(), seen_prior.end(), 0.5 * limit);
        std::fill(cand_prior.begin(), cand_prior.end(), 0.5 * limit);
    }
    std::vector<model::MemoryPoint> points;
    for (std::size_t i = 0; i < seen.size(); ++i)
        points.push_back({space.encode(seen[i]), seen_prior[i], obs[i].first, obs[i].second});
    model::CensoredMemoryModel m;
    m.fit(points, static_cast<int>(space.encode(space.baseline()).size()));
    std::vector<double> p;
    for (std::size_t i = 0; i < cands.size(); ++i)
        p.push_back(m.probability_over(space.encode(cands[i]), cand_prior[i], limit));
    return p;
}

EquivalenceStage::Site EquivalenceStage::site_for(const space::Candidate& c,
                                                  const std::set<std::string>& ran_out) {
    const auto base = c_.contract.space.baseline();
    auto own = c;
    own.patches.clear();
    const auto options = settings_toward_baseline(c_.contract.space, c);
    const auto p = oom_probabilities(options);
    // What is known of a setting: a run of it without patches that ran out of memory, or one that completed.
    std::map<std::string, std::string> known;
    for (const auto& t : c_.store.trials({.state = store::TrialState::Finished}))
        if (t.candidate["patches"].empty() && !known.count(t.candidate_key)) {
            if (t.outcome == trial::Outcome::OutOfMemory)
                known[t.candidate_key] = fmt::format("trial #{} of it ran out of memory", t.id);
            else if (t.outcome == trial::Outcome::Ok)
                known[t.candidate_key] = "";
        }
    auto not_fitting = [&](std::size_t i) -> std::string {
        const auto key = options[i].key();
        if (ran_out.count(key)) return "a run of this check there ran out of memory";
        if (auto it = known.find(key); it != known.end()) return it->second;
        if (key != base.key() && p[i] > kFitsAtMost)
            return fmt::format("the memory model predicts it runs out of memory with P = {:.2f}", p[i]);
        return "";
    };
    std::size_t pick = options.size();
    for (std::size_t i = 0; i < options.size() && pick == options.size(); ++i)
        if (not_fitting(i).empty()) pick = i;
    Site site;
    if (pick == options.size()) { // even the baseline's knobs ran out: nothing left to try
        site.knobs = base;
        site.moved = !(base == own);
        site.why = "no setting between the candidate's knobs and the baseline's fits without its patches";
        return site;
    }
    site.knobs = options[pick];
    site.moved = !(site.knobs == own);
    if (!site.moved) return site;
    std::string own_why;
    for (std::size_t i = 0; i < options.size(); ++i)
        if (options[i] == own) own_why = not_fitting(i);
    const std::string fits =
        site.knobs == base ? "the baseline's own knobs, which the doctor ran"
        : known.count(site.knobs.key())
            ? "a run of it without patches completed"
            : fmt::format("the memory model predicts P(out of memory) = {:.2f}", p[pick]);
    site.why =
        fmt::format("the candidate's knobs do not fit in memory without its patches ({}): checked at {}, "
                    "the nearest setting toward the baseline's where both fit ({}); the patch set's "
                    "equivalence is a property of its code, so it holds at any knobs",
                    own_why.empty() ? "unknown why" : own_why, site.knobs.describe(), fits);
    return site;
}

bool can_seed(const contract::Contract& contract) {
    return !contract.invariants.seed_env.empty() || !contract.invariants.seed_arg.empty();
}

long long fresh_seed(const contract::Contract& contract, const std::set<long long>& used) {
    std::random_device rd;
    std::uniform_int_distribution<long long> pick(1, 2147483646);
    const auto& inv = contract.invariants;
    for (;;) {
        const long long s = pick(rd);
        if (used.count(s) || (s >= inv.seed && s < inv.seed + std::max(1, contract.repeats.doctor))) continue;
        return s;
    }
}

std::vector<store::EquivalenceCheck> EquivalenceStage::failed_checks() {
    std::vector<store::EquivalenceCheck> out;
    for (auto& r : c_.store.equivalence_checks())
        if (r.state == "failed") out.push_back(std::move(r));
    return out;
}

std::vector<std::vector<std::string>> EquivalenceStage::not_equivalent_patch_sets() {
    std::vector<std::vector<std::string>> out;
    for (const auto& r : failed_checks())
        out.push_back(r.patches);
    return out;
}

std::optional<store::EquivalenceCheck> EquivalenceStage::record(const space::Candidate& c) {
    const auto records = c_.store.equivalence_checks();
    // A failed set inside this one decides it: the smaller set changes the math whatever else is added.
    for (const auto& r : records)
        if (r.state == "failed" && contains_set(c.patches, r.patches)) return r;
    // Otherwise the check of this candidate, its knobs included (a record of an older orchestrator, at the
    // baseline's knobs, has no candidate key: it stands for its patch set). One whose run ran out of memory
    // is no verdict: the check goes on nearer the baseline's knobs (run).
    const auto key = c.key();
    for (auto it = records.rbegin(); it != records.rend(); ++it)
        if (it->candidate_key ? *it->candidate_key == key : it->patches == c.patches)
            return it->state == "retry" ? std::nullopt : std::optional<store::EquivalenceCheck>(*it);
    return std::nullopt;
}

namespace {

// Earlier runs of this check (candidate `key`) that ran out of memory: the knobs they ran at into `ran_out`;
// returns the last of them, or nullptr.
store::EquivalenceCheck* earlier_retries(std::vector<store::EquivalenceCheck>& records,
                                         const std::string& key, std::set<std::string>& ran_out) {
    store::EquivalenceCheck* last_retry = nullptr;
    for (auto& r : records)
        if (r.candidate_key.value_or("") == key && r.state == "retry")
            ran_out.insert(r.knobs_key.value_or("")), last_retry = &r;
    return last_retry;
}

// The seeds the campaign's checks have used.
std::set<long long> used_seeds(const std::vector<store::EquivalenceCheck>& records) {
    std::set<long long> used;
    for (const auto& r : records)
        if (r.seed) used.insert(*r.seed);
    return used;
}

// The seed a check runs at, whether it is a fresh one, and what the record says of it.
struct CheckSeed {
    long long seed = 0;
    bool fresh = false;
    std::string note;
};

CheckSeed fresh_check_seed(long long seed, long long contract_seed) {
    return {
        seed, true,
        fmt::format("seed {} chosen at random for this check (the contract's is {})", seed, contract_seed)};
}

// `unseeded`: why the job does not get the seed it is given.
CheckSeed contract_check_seed(const std::string& unseeded, long long contract_seed) {
    return {contract_seed, false,
            fmt::format("could not choose a fresh seed: {}, so the check ran at one seed, {} (a patch that "
                        "replays the losses of an earlier run could pass it)",
                        unseeded, contract_seed)};
}

// The check's record as it starts: the candidate, the knobs it runs at (`knobs`; `moved` from the
// candidate's, `moved_why`), the seed, the tolerance.
store::EquivalenceCheck running_record(const space::Candidate& c, const space::Candidate& knobs, bool moved,
                                       const std::string& moved_why, int attempt, const CheckSeed& seed,
                                       double tolerance, bool math_changing) {
    store::EquivalenceCheck r;
    r.patches = c.patches;
    r.candidate = c.describe();
    r.candidate_key = c.key();
    r.state = "running";
    r.attempt = attempt;
    r.knobs = knobs.describe();
    r.knobs_key = knobs.key();
    r.knobs_candidate = knobs.to_json();
    r.knobs_moved = moved;
    r.seed = seed.seed;
    r.seed_fresh = seed.fresh;
    r.seed_note = seed.note;
    r.tolerance = tolerance;
    r.tolerance_key = math_changing ? "loss_tolerance" : "equivalence_tolerance";
    r.math_changing = math_changing;
    if (moved) r.knobs_note = moved_why;
    return r;
}

// The check's two runs at one seed. The patch set first: while it runs, no loss at this seed has been printed
// anywhere.
std::vector<Task> check_tasks(const space::Candidate& patched, const space::Candidate& unpatched, bool moved,
                              long long seed) {
    std::vector<Task> tasks;
    tasks.push_back({patched,
                     TrialKind::EquivalenceCandidate,
                     moved ? "equivalence check: the patch set at knobs that fit without it, fresh seed"
                           : "equivalence check: the candidate, fresh seed",
                     0,
                     {},
                     seed});
    tasks.push_back({unpatched,
                     TrialKind::EquivalenceBaseline,
                     moved ? "equivalence check: the same knobs without the patches, same seed"
                           : "equivalence check: the candidate's knobs without its patches, same seed",
                     0,
                     {},
                     seed});
    return tasks;
}

// The check's last record is batch `batch`'s, to be run again nearer the baseline's knobs.
bool recorded_retry(const std::vector<store::EquivalenceCheck>& records, std::int64_t batch) {
    return !records.empty() && records.back().batch_id == batch && records.back().state == "retry";
}

} // namespace

std::optional<store::EquivalenceCheck> EquivalenceStage::run(const space::Candidate& c, const RunOptions& o) {
    c_.batches.resume_open(o);
    for (;;) {
        if (host_.stopping(o)) return std::nullopt;
        if (auto r = record(c); r && r->state != "running") return r;
        auto records = c_.store.equivalence_checks();
        std::set<std::string> ran_out;
        auto* last_retry = earlier_retries(records, c.key(), ran_out);
        // Another run of the check comes out of the wall-time budget like the first (verify()).
        if (const double budget = c_.contract.budget.wall_time_s; last_retry && budget > 0) {
            const auto m = host_.trial_cost_model();
            const double left = budget - host_.wall_used_s();
            if (affordable_pairs(m, left, c_.contract.repeats.verify + 1) <
                std::min(3, c_.contract.repeats.verify + 1)) {
                last_retry->state = "incomplete";
                last_retry->reason =
                    last_retry->reason.value_or("") +
                    fmt::format(
                        "; not run again nearer the baseline's knobs: the wall-time budget has {:.0f} s left",
                        std::max(0.0, left));
                c_.store.update_equivalence_check(*last_retry);
                return *last_retry;
            }
        }
        const auto& inv = c_.contract.invariants;
        bool math_changing = false;
        const double tolerance = tolerance_for(c, &math_changing);
        // A fresh seed: random, and none the campaign has used (the contract's, the doctor's, earlier
        // checks').
        const std::set<long long> used = used_seeds(records);
        const std::string unseeded = seeds_not_reaching_job();
        const CheckSeed seed = unseeded.empty() ? fresh_check_seed(fresh_seed(c_.contract, used), inv.seed)
                                                : contract_check_seed(unseeded, inv.seed);
        // At the candidate's own knobs, both runs, where they fit without the patches: the patch set cannot
        // tell this check from the A/B pairs by the knobs it runs at. Else nearer the baseline's.
        const auto site = site_for(c, ran_out);
        space::Candidate patched = site.knobs;
        patched.patches = c.patches;
        auto r = running_record(c, site.knobs, site.moved, site.why, static_cast<int>(ran_out.size()) + 1,
                                seed, tolerance, math_changing);
        host_.say(o,
                  fmt::format("equivalence of patches {} apart from knobs: {} and the same knobs without the "
                              "patches, {}, tolerance {:.3g} relative per step{}",
                              fmt::join(c.patches, "+"), patched.describe(), seed.note, tolerance,
                              site.moved ? "; " + site.why : std::string()));
        const auto batch =
            c_.batches
                .plan(store::BatchKind::Equivalence, check_tasks(patched, site.knobs, site.moved, seed.seed))
                .id;
        r.batch_id = batch;
        c_.store.add_equivalence_check(r);
        c_.batches.submit(batch, o);
        c_.batches.await(batch, o);
        if (host_.stopping(o)) return std::nullopt;
        // A run that ran out of memory: another attempt nearer the baseline's knobs (finish).
        if (auto done = record(c)) return done;
        if (!recorded_retry(c_.store.equivalence_checks(), batch))
            return std::nullopt; // not recorded: as if stopped
    }
}

json EquivalenceStage::judge(const std::optional<store::TrialRow>& base,
                             const std::optional<store::TrialRow>& cand, double tolerance) {
    const auto& inv = c_.contract.invariants;
    auto losses = [](const std::optional<store::TrialRow>& t) {
        return t && t->measurements.losses ? *t->measurements.losses : std::vector<double>{};
    };
    auto eval = [](const std::optional<store::TrialRow>& t) -> std::optional<double> {
        return t ? t->measurements.eval_loss : std::nullopt;
    };
    json r = json::object();
    if (base) r["baseline_trial"] = base->id;
    if (cand) r["candidate_trial"] = cand->id;
    const bool base_ok = base && base->outcome == trial::Outcome::Ok;
    const bool cand_ran =
        cand && (cand->outcome == trial::Outcome::Ok || cand->outcome == trial::Outcome::ContractViolation);
    if (!base_ok || !cand_ran || static_cast<int>(losses(cand).size()) < inv.steps) {
        // Not a verdict on the math: a run did not complete (its outcome says why).
        r["state"] = "incomplete";
        r["reason"] = fmt::format("the check did not complete: baseline {}, patch set {}",
                                  base ? store::outcome_name(*base) + " " + base->detail : "missing",
                                  cand ? store::outcome_name(*cand) + " " + cand->detail : "missing");
        return r;
    }
    const auto e =
        verify::compare_losses(losses(base), losses(cand), inv.steps, tolerance, eval(base), eval(cand));
    auto to_json = [](const std::vector<verify::StepDifference>& ds) {
        json a = json::array();
        for (const auto& d : ds)
            a.push_back({{"step", d.step},
                         {"baseline", d.baseline},
                         {"candidate", d.candidate},
                         {"relative", std::isfinite(d.relative) ? json(d.relative) : json("inf")}});
        return a;
    };
    r["state"] = e.equivalent ? "passed" : "failed";
    r["max_relative"] = std::isfinite(e.max_relative) ? json(e.max_relative) : json("inf");
    r["compared"] = e.compared;
    r["values"] = to_json(e.values);
    r["beyond"] = to_json(e.beyond);
    r["reason"] = e.reason;
    if (!e.equivalent) {
        auto t = *cand;
        t.outcome = trial::Outcome::ContractViolation;
        t.violation = trial::Violation::NotEquivalent;
        t.detail = "not equivalent to the baseline apart from knobs: " + e.reason;
        c_.store.update_trial(t);
    }
    return r;
}

double EquivalenceStage::tolerance_for(const space::Candidate& c, bool* math_changing) const {
    bool changing = false;
    for (const auto& id : c.patches)
        if (const auto* p = host_.patch_info(id); p && p->has_tag("math_changing")) changing = true;
    if (math_changing) *math_changing = changing;
    const auto& inv = c_.contract.invariants;
    return changing ? std::max(inv.equivalence_tolerance, inv.loss_tolerance) : inv.equivalence_tolerance;
}

void EquivalenceStage::record_not_equivalent(const space::Candidate& c, const json& check) {
    auto r = store::equivalence_check_from_json(check);
    r.patches = c.patches;
    r.candidate = c.describe();
    r.candidate_key = c.key();
    r.state = "failed";
    c_.store.add_equivalence_check(r);
}

// Its runs are at a fresh seed of their own, compared with each other (judge_equivalence).
EquivalenceStage::EquivalenceStage(Context c, Host& host) : c_(c), host_(host) {
    c_.batches.register_stage(store::BatchKind::Equivalence,
                              {
                                  .finish = [this](std::int64_t batch_id) { finish(batch_id); },
                                  .own_seeds = true,
                              });
}

void EquivalenceStage::finish(std::int64_t batch_id) {
    auto records = c_.store.equivalence_checks();
    store::EquivalenceCheck* r = nullptr;
    for (auto& x : records)
        if (x.batch_id == batch_id) r = &x;
    if (!r) return;
    std::optional<store::TrialRow> base, cand;
    for (const auto& t : c_.store.trials_of_batch(batch_id))
        (t.kind == TrialKind::EquivalenceBaseline ? base : cand) = t;
    store::update(*r, judge(base, cand, r->tolerance.value()));
    // Out of memory is no verdict on the math: the check goes on nearer the baseline's knobs, which fit
    // (the doctor ran them), while attempts are left.
    const auto oom = [](const std::optional<store::TrialRow>& t) {
        return t && t->outcome == trial::Outcome::OutOfMemory;
    };
    const auto baseline_key = c_.contract.space.baseline().key();
    if (r->state == "incomplete" && (oom(base) || oom(cand)) &&
        r->knobs_key.value_or(baseline_key) != baseline_key) {
        const bool left = r->attempt.value_or(1) < kMaxAttempts;
        r->out_of_memory = true;
        r->reason = fmt::format("{} ran out of memory at {}: {}",
                                oom(base) ? "the run without the patches" : "the patch set's run",
                                r->knobs.value_or(""),
                                left ? "the check runs again at knobs nearer the baseline's"
                                     : fmt::format("no attempt left of {}", kMaxAttempts));
        if (left) r->state = "retry";
    }
    store::Transaction tx(c_.store.db());
    c_.store.update_equivalence_check(*r);
    const auto set = fmt::format("{}", fmt::join(r->patches, "+"));
    if (r->state == "passed")
        c_.store.log(fmt::format(
            "equivalence of {}: passed at seed {}{} (largest difference {:.3g} relative, "
            "tolerance {:.3g})",
            set, r->seed.value(), r->knobs_moved.value_or(false) ? " and " + r->knobs.value() : "",
            r->max_relative.value(), r->tolerance.value()));
    else
        c_.store.log(fmt::format("equivalence of {}: {} at seed {}: {}", set, r->state, r->seed.value(),
                                 r->reason.value()));
    tx.commit();
    // Its runs may be what shows that the job ignores its seed: then no record keeps claiming a fresh one.
    retract_seed_claims(nullptr);
}

std::optional<store::SpotCheck>
EquivalenceStage::plan_spot_check(const space::Candidate& cand, std::int64_t verification_id,
                                  const std::vector<store::PlannedPair>& plan,
                                  const std::vector<std::vector<std::string>>& pair_args,
                                  std::vector<Task>& tasks, std::vector<TaskPlacement>& where) {
    const int pairs = static_cast<int>(plan.size());
    if (cand.patches.empty() || pairs == 0) return std::nullopt;
    std::mt19937_64 rng(std::random_device{}());
    const int j = std::uniform_int_distribution<int>(0, pairs - 1)(rng);
    const std::optional<long long> seed = plan[static_cast<std::size_t>(j)].seed;
    store::SpotCheck spot;
    spot.pair = j + 1;
    spot.seed = seed.value_or(c_.contract.invariants.seed);
    if (const auto unseeded = seeds_not_reaching_job(); !unseeded.empty())
        spot.seed_note = "one seed: " + unseeded;
    // Where the equivalence check had to move (the candidate's knobs do not fit without its patches), the
    // spot check runs there too: the patch set and the same knobs without it, both at the pair's seed.
    const auto eq = record(cand);
    if (eq && eq->knobs_moved.value_or(false) && eq->knobs_candidate) {
        const auto site = space::Candidate::from_json(*eq->knobs_candidate);
        auto patched = site;
        patched.patches = cand.patches;
        tasks.push_back({patched, TrialKind::EquivalenceCandidate,
                         fmt::format("spot check: the patch set at {} (its knobs do not fit without it), "
                                     "pair {}'s seed",
                                     site.describe(), j + 1),
                         0, verification_id, seed});
        where.push_back({pairs, pair_args[static_cast<std::size_t>(j)]});
        tasks.push_back(
            {site, TrialKind::EquivalenceBaseline,
             fmt::format("spot check: {} without the patches, pair {}'s seed", site.describe(), j + 1), 0,
             verification_id, seed});
        where.push_back({pairs, pair_args[static_cast<std::size_t>(j)]});
        spot.knobs = site.describe();
        spot.knobs_moved = true;
        spot.knobs_note = eq->knobs_note.value_or("");
        return spot;
    }
    space::Candidate unpatched = cand;
    unpatched.patches.clear();
    tasks.push_back({unpatched, TrialKind::EquivalenceBaseline,
                     fmt::format("spot check: pair {}'s knobs without its patches, its seed", j + 1), 0,
                     verification_id, seed});
    where.push_back({pairs, pair_args[static_cast<std::size_t>(j)]});
    return spot;
}

void EquivalenceStage::judge_spot_check(store::SpotCheck& spot, std::int64_t batch_id,
                                        const space::Candidate& cand,
                                        const std::optional<store::TrialRow>& twin,
                                        const std::vector<store::TrialRow>& candidate_runs,
                                        verify::Decision& d, store::VerificationRow& v) {
    const int j = spot.pair.value() - 1;
    const bool moved = spot.knobs_moved.value_or(false);
    std::optional<store::TrialRow> checked;
    if (moved) { // the patch set's own run at the moved knobs, not one of the pairs
        for (const auto& t : c_.store.trials_of_batch(batch_id))
            if (t.kind == TrialKind::EquivalenceCandidate) checked = t;
    } else if (j >= 0 && j < static_cast<int>(candidate_runs.size())) {
        checked = candidate_runs[static_cast<size_t>(j)];
    }
    const double tolerance = tolerance_for(cand);
    store::update(spot, judge(twin, checked, tolerance));
    spot.tolerance = tolerance;
    const auto what = moved
                          ? fmt::format("the patch set at {} is not the same math as those knobs without it "
                                        "at pair {}'s seed {}",
                                        spot.knobs.value_or(""), j + 1, spot.seed.value())
                          : fmt::format("pair {}'s candidate run is not the same math as the candidate's "
                                        "knobs without its patches at its seed {}",
                                        j + 1, spot.seed.value());
    if (spot.state == "failed") {
        record_not_equivalent(cand, store::to_json(spot));
        v.detail.not_equivalent = true;
        d.promoted = false;
        d.reasons.insert(d.reasons.begin(), fmt::format("spot check: {}: {}", what, spot.reason.value()));
    } else if (spot.state == "incomplete") {
        if (d.promoted) d.reasons.push_back("spot check did not complete: " + spot.reason.value());
        d.promoted = false;
    } else {
        d.evidence.push_back(
            fmt::format("spot check of pair {} at its seed{} passed (largest difference {:.3g} "
                        "relative)",
                        j + 1, moved ? " and " + spot.knobs.value_or("") : "", spot.max_relative.value()));
    }
    retract_seed_claims(&v);
}

std::string EquivalenceStage::seeds_not_reaching_job() {
    const auto& inv = c_.contract.invariants;
    if (!can_seed(c_.contract))
        return "the contract gives the job no seed ([invariants] has no seed_env or seed_arg)";
    // The seed each run was given: its batch's manifest, what the trial wrapper passed the job.
    const auto arg = inv.seed_arg.find("{}");
    auto given = [&](const trial::ManifestTask& t) -> std::optional<long long> {
        if (!inv.seed_env.empty()) {
            const auto it = t.env.find(inv.seed_env);
            return it == t.env.end() ? std::nullopt : parse_integer<long long>(it->second);
        }
        const auto prefix = inv.seed_arg.substr(0, arg), suffix = inv.seed_arg.substr(arg + 2);
        for (const auto& a : t.args)
            if (a.size() >= prefix.size() + suffix.size() && a.starts_with(prefix) && a.ends_with(suffix))
                return parse_integer<long long>(
                    std::string_view(a).substr(prefix.size(), a.size() - prefix.size() - suffix.size()));
        return std::nullopt;
    };
    std::map<std::int64_t, long long> seed_of;
    for (const auto& b : c_.store.batches()) {
        if (b.kind == store::BatchKind::Submitted || b.manifest.empty())
            continue; // the user's job ran at its own seed
        try {
            for (const auto& t : trial::read_manifest(b.manifest).tasks)
                if (const auto id = parse_integer<std::int64_t>(t.trial_id))
                    if (const auto seed = given(t)) seed_of[*id] = *seed;
        } catch (const Error&) {
        } // a manifest that cannot be read says nothing of its runs' seeds
    }
    // Completed runs of the same settings without patches (a patch may replay losses; the job's own code is
    // what the seed must reach) at three different seeds or more that printed the same losses at every step.
    // Three, not two: a job whose losses depend on the seed only a little (a fixture's, a coarse print) can
    // repeat at two seeds by chance, not at three.
    std::map<std::string, std::vector<std::pair<long long, const store::TrialRow*>>> runs;
    const auto trials =
        c_.store.trials({.state = store::TrialState::Finished, .outcome = trial::Outcome::Ok});
    for (const auto& t : trials) {
        if (!t.candidate["patches"].empty()) continue;
        const auto it = seed_of.find(t.id);
        if (it == seed_of.end() || !t.measurements.losses ||
            static_cast<int>(t.measurements.losses->size()) < std::max(2, inv.steps))
            continue;
        runs[t.candidate_key].emplace_back(it->second, &t);
    }
    for (const auto& [key, rs] : runs)
        for (const auto& [seed, t] : rs) {
            std::map<long long, std::int64_t> same; // seed -> a trial at it that printed t's losses
            for (const auto& [other_seed, u] : rs)
                if (u->measurements.losses == t->measurements.losses) same.emplace(other_seed, u->id);
            if (same.size() < 3) continue;
            std::vector<std::string> at;
            for (const auto& [sd, id] : same)
                at.push_back(fmt::format("#{} at seed {}", id, sd));
            return fmt::format("the job ignores the seed it is given: runs of {} ({}) printed the same {} "
                               "losses ({} does not reach it)",
                               space::Candidate::from_json(t->candidate).describe(), fmt::join(at, ", "),
                               t->measurements.losses->size(),
                               inv.seed_env.empty() ? inv.seed_arg : "$" + inv.seed_env);
        }
    return "";
}

void EquivalenceStage::retract_seed_claims(store::VerificationRow* current) {
    const auto unseeded = seeds_not_reaching_job();
    if (unseeded.empty()) return;
    const auto note = fmt::format("no fresh seed in effect: {}; the check ran at one seed (a patch that "
                                  "replays the losses of an earlier run could pass it)",
                                  unseeded);
    auto retract = [&](store::EquivalenceCheck& r) {
        if (!r.seed_fresh.value_or(false)) return false;
        r.seed_fresh = false;
        r.seed_note = note;
        return true;
    };
    for (auto& r : c_.store.equivalence_checks())
        if (retract(r)) c_.store.update_equivalence_check(r);
    auto fix = [&](store::VerificationRow& v) {
        bool c = false;
        if (v.detail.equivalence) c |= retract(*v.detail.equivalence);
        for (auto* stage : v.detail.stages())
            if (stage->spot_check && !stage->spot_check->seed_note) {
                stage->spot_check->seed_note = "one seed: " + unseeded;
                c = true;
            }
        return c;
    };
    if (current) fix(*current);
    for (auto v : c_.store.verifications())
        if ((!current || v.id != current->id) && fix(v)) c_.store.update_verification(v);
}

} // namespace infrarsi::campaign
