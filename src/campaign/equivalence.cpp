// The equivalence stage: before a candidate with patches is verified, it runs against its own knob settings
// without its patches (so the patch set cannot tell the check from the A/B pairs by its knobs), at a seed
// chosen fresh for the check (random, never the contract's, the doctor's or an earlier check's, so no logged
// loss can be copied), and the two loss curves
// must agree at every step within [invariants] equivalence_tolerance, whatever loss mode the contract uses
// for knob changes. The patch set runs first, so while it runs no loss at that seed exists anywhere.
// A patch set that fails is a contract violation (Violation::NotEquivalent), never promoted, and never
// proposed again, alone or inside a larger set. A patch tagged math_changing is compared at the contract's
// loss_tolerance instead, flagged, and (verify::decide) never promoted.
// The checks are kept in the store's meta "equivalence", a JSON array of records (docs/orchestrator.md).
#include "campaign/campaign.hpp"

#include "trial/outcome.hpp"
#include "util/error.hpp"
#include "verify/equivalence.hpp"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

namespace infrarsi::campaign {

using nlohmann::json;
using store::TrialKind;

namespace {

constexpr const char* kMeta = "equivalence";
constexpr const char* kBatch = "equivalence";

bool contains_set(const std::vector<std::string>& patches, const std::vector<std::string>& set) {
    return std::includes(patches.begin(), patches.end(), set.begin(), set.end());
}

} // namespace

bool Campaign::can_seed() const {
    return !contract_.invariants.seed_env.empty() || !contract_.invariants.seed_arg.empty();
}

long long Campaign::fresh_seed(const std::set<long long>& used) const {
    std::random_device rd;
    std::uniform_int_distribution<long long> pick(1, 2147483646);
    const auto& inv = contract_.invariants;
    for (;;) {
        const long long s = pick(rd);
        if (used.count(s) || (s >= inv.seed && s < inv.seed + std::max(1, contract_.repeats.doctor)))
            continue;
        return s;
    }
}

std::vector<std::vector<std::string>> Campaign::not_equivalent_patch_sets() {
    std::vector<std::vector<std::string>> out;
    for (const auto& r : json::parse(store_->meta(kMeta).value_or("[]")))
        if (r.value("state", "") == "failed") out.push_back(r["patches"].get<std::vector<std::string>>());
    return out;
}

std::optional<json> Campaign::equivalence_record(const space::Candidate& c) {
    const json records = json::parse(store_->meta(kMeta).value_or("[]"));
    // A failed set inside this one decides it: the smaller set changes the math whatever else is added.
    for (const auto& r : records)
        if (r.value("state", "") == "failed" &&
            contains_set(c.patches, r["patches"].get<std::vector<std::string>>()))
            return r;
    // Otherwise the check of this candidate, its knobs included (a record of an older orchestrator, at the
    // baseline's knobs, has no candidate key: it stands for its patch set).
    const auto key = c.key();
    for (auto it = records.rbegin(); it != records.rend(); ++it)
        if (it->contains("candidate_key") ? (*it)["candidate_key"] == key
                                          : (*it)["patches"].get<std::vector<std::string>>() == c.patches)
            return *it;
    return std::nullopt;
}

std::optional<json> Campaign::run_equivalence(const space::Candidate& c, const RunOptions& o) {
    resume_open_batches(o);
    if (stopping(o)) return std::nullopt;
    if (auto r = equivalence_record(c); r && r->value("state", "") != "running") return r;
    json records = json::parse(store_->meta(kMeta).value_or("[]"));
    const auto& inv = contract_.invariants;
    bool math_changing = false;
    const double tolerance = equivalence_tolerance(c, &math_changing);
    // A fresh seed: random, and none the campaign has used (the contract's, the doctor's, earlier checks').
    std::set<long long> used;
    for (const auto& r : records)
        if (r.contains("seed")) used.insert(r["seed"].get<long long>());
    const bool seedable = can_seed();
    long long seed = inv.seed;
    std::string seed_note;
    if (seedable) {
        seed = fresh_seed(used);
        seed_note =
            fmt::format("seed {} chosen at random for this check (the contract's is {})", seed, inv.seed);
    } else {
        seed_note = fmt::format("could not choose a fresh seed: the contract has no [invariants] seed_env or "
                                "seed_arg, so the check ran at the contract's seed {} (a patch that copies "
                                "logged losses of that seed could pass it)",
                                inv.seed);
    }
    // At the candidate's own knobs, both runs: the patch set cannot tell this check from the A/B pairs by
    // the knobs it runs at.
    const space::Candidate& patched = c;
    space::Candidate unpatched = c;
    unpatched.patches.clear();
    json r = {{"patches", c.patches},
              {"candidate", c.describe()},
              {"candidate_key", c.key()},
              {"state", "running"},
              {"seed", seed},
              {"seed_fresh", seedable},
              {"seed_note", seed_note},
              {"tolerance", tolerance},
              {"tolerance_key", math_changing ? "loss_tolerance" : "equivalence_tolerance"},
              {"math_changing", math_changing}};
    // The patch set first: while it runs, no loss at this seed has been printed anywhere.
    std::vector<Task> tasks;
    tasks.push_back({patched,
                     TrialKind::EquivalenceCandidate,
                     "equivalence check: the candidate, fresh seed",
                     0,
                     {},
                     seed});
    tasks.push_back({unpatched,
                     TrialKind::EquivalenceBaseline,
                     "equivalence check: the candidate's knobs without its patches, same seed",
                     0,
                     {},
                     seed});
    say(o,
        fmt::format("equivalence of patches {} apart from knobs: {} and the same knobs without the patches, "
                    "{}, tolerance {:.3g} relative per step",
                    fmt::join(c.patches, "+"), patched.describe(), seed_note, tolerance));
    const auto batch = plan_batch(kBatch, tasks);
    r["batch_id"] = batch;
    records.push_back(r);
    store_->set_meta(kMeta, records.dump());
    submit_batch(batch, o);
    await_batch(batch, o);
    if (stopping(o)) return std::nullopt;
    return equivalence_record(c);
}

json Campaign::judge_equivalence(const std::optional<store::TrialRow>& base,
                                 const std::optional<store::TrialRow>& cand, double tolerance) {
    const auto& inv = contract_.invariants;
    auto losses = [](const std::optional<store::TrialRow>& t) {
        return t && t->measurements.contains("losses") ? t->measurements["losses"].get<std::vector<double>>()
                                                       : std::vector<double>{};
    };
    auto eval = [](const std::optional<store::TrialRow>& t) -> std::optional<double> {
        if (t && t->measurements.contains("eval_loss") && t->measurements["eval_loss"].is_number())
            return t->measurements["eval_loss"].get<double>();
        return std::nullopt;
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
        store_->update_trial(t);
    }
    return r;
}

double Campaign::equivalence_tolerance(const space::Candidate& c, bool* math_changing) const {
    bool changing = false;
    for (const auto& id : c.patches)
        if (const auto* p = patch_info(id); p && p->has_tag("math_changing")) changing = true;
    if (math_changing) *math_changing = changing;
    const auto& inv = contract_.invariants;
    return changing ? std::max(inv.equivalence_tolerance, inv.loss_tolerance) : inv.equivalence_tolerance;
}

void Campaign::record_not_equivalent(const space::Candidate& c, const json& check) {
    json records = json::parse(store_->meta(kMeta).value_or("[]"));
    json r = check;
    r["patches"] = c.patches;
    r["candidate"] = c.describe();
    r["candidate_key"] = c.key();
    r["state"] = "failed";
    records.push_back(r);
    store_->set_meta(kMeta, records.dump());
}

void Campaign::finish_equivalence(std::int64_t batch_id) {
    json records = json::parse(store_->meta(kMeta).value_or("[]"));
    json* r = nullptr;
    for (auto& x : records)
        if (x.value("batch_id", std::int64_t{-1}) == batch_id) r = &x;
    if (!r) return;
    std::optional<store::TrialRow> base, cand;
    for (const auto& t : store_->trials_of_batch(batch_id))
        (t.kind == TrialKind::EquivalenceBaseline ? base : cand) = t;
    r->update(judge_equivalence(base, cand, (*r)["tolerance"].get<double>()));
    store::Transaction tx(store_->db());
    store_->set_meta(kMeta, records.dump());
    const auto set = fmt::format("{}", fmt::join((*r)["patches"].get<std::vector<std::string>>(), "+"));
    if ((*r)["state"] == "passed")
        store_->log(fmt::format("equivalence of {}: passed at seed {} (largest difference {:.3g} relative, "
                                "tolerance {:.3g})",
                                set, (*r)["seed"].get<long long>(), (*r)["max_relative"].get<double>(),
                                (*r)["tolerance"].get<double>()));
    else
        store_->log(fmt::format("equivalence of {}: {} at seed {}: {}", set, (*r)["state"].get<std::string>(),
                                (*r)["seed"].get<long long>(), (*r)["reason"].get<std::string>()));
    tx.commit();
}

} // namespace infrarsi::campaign
