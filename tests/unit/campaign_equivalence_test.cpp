// The equivalence check of patches apart from knobs (campaign/equivalence_stage.cpp) and the ablation of
// promoted bundles (campaign/ablation_stage.cpp), on the local scheduler with the stepload fixture: a patch
// that is the same math passes at a fresh seed and is promoted; one that shifts the loss inside the loss
// tolerance, or prints the contract seed's losses whatever seed it gets, fails, is never promoted, and no
// candidate containing it is checked, verified or proposed again; a contract without a seed key says it could
// not choose a fresh one; a bundle of a knob change and a patch is ablated, and only the change that carries
// the gain gets it, in the report and in the experience bank's findings.
#include "campaign/campaign.hpp"
#include "report/report.hpp"
#include "trial/manifest.hpp"
#include "util/error.hpp"
#include "verify/equivalence.hpp"

#include "stepload_campaign.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>

namespace fs = std::filesystem;
using namespace infrarsi;
using namespace std::chrono_literals;
using nlohmann::json;
using store::TrialKind;
using test::TempDir;

namespace {

json equivalence_records(campaign::Campaign& c) {
    json records = json::array();
    for (const auto& r : c.store().equivalence_checks())
        records.push_back(store::to_json(r));
    return records;
}

bool has_patch(const store::TrialRow& t, const std::string& id) {
    const auto p = space::Candidate::from_json(t.candidate).patches;
    return std::find(p.begin(), p.end(), id) != p.end();
}

int batches_of(campaign::Campaign& c, store::BatchKind kind) {
    int n = 0;
    for (const auto& b : c.store().batches())
        n += b.kind == kind;
    return n;
}

// The stepload contract with the knob `threads` (divides the step time) in place of `chunk`.
const std::map<std::string, std::string> threads_knob = {
    {"[knobs.chunk]", "[knobs.threads]"}, {"env = \"STEPLOAD_CHUNK\"", "env = \"STEPLOAD_THREADS\""}};

} // namespace

TEST_CASE(
    "compare_losses: equal curves are equivalent, a shift, a short curve or a non-finite value is not") {
    const std::vector<double> a{1.0, 0.5, 0.25};
    CHECK(verify::compare_losses(a, a, 3, 0).equivalent);
    auto shifted = a;
    shifted[1] += 1e-4;
    const auto e = verify::compare_losses(a, shifted, 3, 1e-6);
    CHECK_FALSE(e.equivalent);
    REQUIRE(e.beyond.size() == 1);
    CHECK(e.beyond[0].step == 2);
    CHECK(e.beyond[0].candidate == doctest::Approx(0.5001));
    CHECK(e.max_relative == doctest::Approx(2e-4));
    CHECK(verify::compare_losses(a, shifted, 3, 1e-3).equivalent);
    CHECK_FALSE(verify::compare_losses(a, {1.0, 0.5}, 3, 1).equivalent);
    CHECK_FALSE(verify::compare_losses(a, {1.0, 0.5, NAN}, 3, 1).equivalent);
    // The final evaluation loss counts too, when the baseline printed one.
    CHECK_FALSE(verify::compare_losses(a, a, 3, 1e-6, 2.0, 2.1).equivalent);
    CHECK_FALSE(verify::compare_losses(a, a, 3, 1e-6, 2.0, std::nullopt).equivalent);
}

TEST_CASE("a patch set that is the same math passes its equivalence check at a fresh seed (the patch set run "
          "first) and is promoted, the report shows the checks it passed and the compared losses") {
    TempDir d("infrarsi-equiv");
    campaign::Campaign c(test::stepload_campaign(d));
    c.run(test::local_run_options());
    REQUIRE(c.finished());
    const auto records = equivalence_records(c);
    REQUIRE(records.size() == 1);
    const auto& r = records[0];
    CHECK(r["state"] == "passed");
    CHECK(r["patches"] == json::array({"fast"}));
    CHECK(r["seed_fresh"] == true);
    const long long seed = r["seed"].get<long long>();
    CHECK(seed != 1); // the contract's
    CHECK(seed > 3);  // nor the doctor's (seeds 1..3 with final_eval; here it runs at 1)
    CHECK(r["max_relative"].get<double>() == 0.0);
    CHECK(r["values"].size() == 6);
    // One batch: the patch set at the baseline's knobs first, then the baseline, both at that seed.
    REQUIRE(batches_of(c, store::BatchKind::Equivalence) == 1);
    const auto trials = c.store().trials_of_batch(r["batch_id"].get<std::int64_t>());
    REQUIRE(trials.size() == 2);
    CHECK(trials[0].kind == TrialKind::EquivalenceCandidate);
    CHECK(trials[0].candidate_key == "chunk=1;|fast;");
    CHECK(trials[1].kind == TrialKind::EquivalenceBaseline);
    CHECK(trials[0].outcome == trial::Outcome::Ok);
    const auto manifest = trial::read_manifest(c.store().batch(r["batch_id"].get<std::int64_t>()).manifest);
    for (const auto& t : manifest.tasks)
        CHECK(t.env.at("STEPLOAD_SEED") == std::to_string(seed));
    // Their losses are those of that seed (train.sh: 2 / (step + 1 + ((seed - 1) mod 1000) / 1000)).
    const double expected = 2.0 / (2 + static_cast<double>((seed - 1) % 1000) / 1000);
    REQUIRE(trials[1].measurements.losses);
    REQUIRE(trials[0].measurements.losses);
    CHECK(std::fabs(trials[1].measurements.losses->at(0) - expected) < 1e-5);
    CHECK(std::fabs(trials[0].measurements.losses->at(0) - expected) < 1e-5);
    const auto v = c.store().verifications();
    REQUIRE(v.size() == 1);
    CHECK(v[0].promoted);
    REQUIRE(v[0].detail.equivalence);
    CHECK(v[0].detail.equivalence->state == "passed");
    const auto text = report::render(report::build(c));
    CHECK(text.find("equivalence apart from knobs: passed at seed " + std::to_string(seed)) !=
          std::string::npos);
    CHECK(text.find("loss invariant (per_step, tolerance 0.01 relative)") != std::string::npos);
    // The pairs ran each at a fresh seed: the candidate's losses against the paired baselines' at those
    // seeds.
    CHECK(text.find("per step (paired baselines, median at the pairs' seeds vs candidate): 1: ") !=
          std::string::npos);
    for (const auto& p : v[0].detail.pairs)
        CHECK(p.seed.value() != 1);
    CHECK(text.find("attribution (single)") != std::string::npos);
    // The job reads its seed: the report says what the seeds checked.
    CHECK(c.equivalence().seeds_not_reaching_job().empty());
    CHECK(text.find("Seeds: each equivalence check, A/B pair and spot check ran at a seed drawn for it") !=
          std::string::npos);
}

TEST_CASE("a fast patch that shifts the loss inside the loss tolerance fails the equivalence check: a typed "
          "violation with its steps and values, never promoted, and no candidate containing it is checked or "
          "verified again") {
    TempDir d("infrarsi-equiv");
    campaign::Campaign c(test::stepload_campaign(
        d, {{"candidates = [\"fast\"]", "candidates = [\"nudge\"]"}, {"verify_top = 1", "verify_top = 3"}}));
    c.run(test::local_run_options());
    REQUIRE(c.finished());
    // The search's loss check let it through: the shift is inside loss_tolerance.
    int nudged = 0;
    for (const auto& t : c.store().trials({.kinds = {TrialKind::Search}}))
        if (has_patch(t, "nudge")) {
            ++nudged;
            CHECK(t.outcome == trial::Outcome::Ok);
        }
    CHECK(nudged == 2); // +nudge and chunk=2 +nudge, both faster than the baseline
    const auto records = equivalence_records(c);
    REQUIRE(records.size() == 1);
    CHECK(records[0]["state"] == "failed");
    CHECK(records[0]["beyond"].size() == 6);
    CHECK(records[0]["beyond"][0]["step"] == 1);
    CHECK(std::fabs(records[0]["beyond"][0]["candidate"].get<double>() -
                    records[0]["beyond"][0]["baseline"].get<double>() - 1e-4) < 2e-6);
    CHECK(batches_of(c, store::BatchKind::Equivalence) ==
          1); // the second candidate with nudge is decided by the record
    const auto eq = c.store().trials({.kinds = {TrialKind::EquivalenceCandidate}});
    REQUIRE(eq.size() == 1);
    CHECK(eq[0].outcome == trial::Outcome::ContractViolation);
    CHECK(eq[0].violation == trial::Violation::NotEquivalent);
    CHECK(eq[0].detail.find("not equivalent to the baseline apart from knobs") != std::string::npos);
    const auto vs = c.store().verifications();
    REQUIRE(vs.size() == 2);
    for (const auto& v : vs) {
        CHECK_FALSE(v.promoted);
        CHECK(v.detail.not_equivalent);
        CHECK(json(v.detail.reasons).dump().find("failed the equivalence check") != std::string::npos);
    }
    CHECK(c.store().promotions().empty());
    CHECK(c.store().trials({.kinds = {TrialKind::VerifyBaseline, TrialKind::VerifyCandidate}}).empty());
    const auto text = report::render(report::build(c));
    CHECK(text.find("failed the equivalence check apart from knobs") != std::string::npos);
}

TEST_CASE("a patch that prints the contract seed's losses whatever seed it gets fails at the fresh seed") {
    TempDir d("infrarsi-equiv");
    campaign::Campaign c(
        test::stepload_campaign(d, {{"candidates = [\"fast\"]", "candidates = [\"copy\"]"}}));
    c.run(test::local_run_options());
    REQUIRE(c.finished());
    // In the search, at the contract's seed, its losses are the baseline's.
    for (const auto& t : c.store().trials({.kinds = {TrialKind::Search}}))
        if (has_patch(t, "copy")) CHECK(t.outcome == trial::Outcome::Ok);
    const auto records = equivalence_records(c);
    REQUIRE(records.size() == 1);
    CHECK(records[0]["state"] == "failed");
    CHECK(records[0]["reason"].get<std::string>().find("6 of 6 values differ") != std::string::npos);
    CHECK(c.store().promotions().empty());
}

TEST_CASE(
    "a two-faced patch, honest only in the run it guesses is the equivalence check, passes that check "
    "and is caught by the spot check of an A/B pair drawn at random: never promoted, never proposed again") {
    TempDir d("infrarsi-equiv");
    campaign::Campaign c(
        test::stepload_campaign(d, {{"candidates = [\"fast\"]", "candidates = [\"twofaced\"]"}}));
    c.run(test::local_run_options());
    REQUIRE(c.finished());
    // The up-front check was fooled: its run (the patch set's third) was the honest one.
    const auto records = equivalence_records(c);
    REQUIRE(records.size() >= 1);
    REQUIRE_MESSAGE(
        records[0]["state"] == "passed",
        "the two-faced patch is honest on its third run only: the search must try it twice first");
    const auto vs = c.store().verifications();
    REQUIRE(vs.size() == 1);
    const auto& v = vs[0];
    CHECK_FALSE(v.promoted);
    // The A/B pairs alone would have promoted it: twice as fast, losses inside the per-step loss tolerance.
    CHECK(v.speedup.value_or(0) > 1.5);
    REQUIRE(v.detail.first.spot_check);
    const auto& spot = *v.detail.first.spot_check;
    CHECK(spot.state == "failed");
    const int pair = spot.pair.value();
    CHECK((pair == 1 || pair == 2));
    // At the drawn pair's own seed, against a run of the candidate's knobs without its patches.
    CHECK(spot.seed == v.detail.first.plan[static_cast<std::size_t>(pair - 1)].seed.value());
    const auto twins = c.store().trials({.kinds = {TrialKind::EquivalenceBaseline}, .verification_id = v.id});
    REQUIRE(twins.size() == 1);
    CHECK(twins[0].outcome == trial::Outcome::Ok);
    CHECK(space::Candidate::from_json(twins[0].candidate).patches.empty());
    CHECK(spot.baseline_trial == twins[0].id);
    const auto checked = spot.candidate_trial.value();
    CHECK(checked == v.detail.pairs[static_cast<std::size_t>(pair - 1)].candidate_trial);
    for (const auto& t : c.store().trials({.verification_id = v.id}))
        if (t.id == checked) CHECK(t.violation == trial::Violation::NotEquivalent);
    CHECK(v.detail.reasons[0].find("spot check") != std::string::npos);
    CHECK(v.detail.not_equivalent);
    // Recorded as a failed check of its patch set: never proposed again.
    bool recorded = false;
    for (const auto& r : equivalence_records(c))
        recorded |= r["state"] == "failed" && r["patches"] == json::array({"twofaced"});
    CHECK(recorded);
    CHECK(c.store().promotions().empty());
    const auto j = report::build(c);
    REQUIRE(j["verifications"].size() == 1);
    CHECK(j["verifications"][0]["spot_check"]["state"] == "failed");
}

TEST_CASE("an honest patch passes the spot check of its A/B pairs, and the report says so") {
    TempDir d("infrarsi-equiv");
    campaign::Campaign c(test::stepload_campaign(d));
    c.run(test::local_run_options());
    REQUIRE(c.finished());
    const auto vs = c.store().verifications();
    REQUIRE(vs.size() == 1);
    REQUIRE(vs[0].detail.first.spot_check);
    CHECK(vs[0].detail.first.spot_check->state == "passed");
    REQUIRE(vs[0].promoted);
    const auto text = report::render(report::build(c));
    CHECK(text.find("spot check: pair") != std::string::npos);
    CHECK(text.find("spot check (re-check): pair") != std::string::npos);
}

TEST_CASE("the search never proposes a candidate containing a patch set that failed its equivalence check") {
    TempDir d("infrarsi-equiv");
    campaign::Campaign c(test::stepload_campaign(d, {{"trials = 3", "trials = 8"}}));
    c.store().add_equivalence_check(store::equivalence_check_from_json(
        json{{"patches", {"fast"}}, {"state", "failed"}, {"seed", 12345}}));
    c.run(test::local_run_options(false));
    const auto search = c.store().trials({.kinds = {TrialKind::Search}});
    REQUIRE_FALSE(search.empty());
    for (const auto& t : search)
        CHECK_FALSE(has_patch(t, "fast"));
    // Once the candidates without it are tried, the search ends instead of proposing it.
    CHECK(search.size() == 1); // chunk=2, the only other candidate
}

TEST_CASE("a contract with no seed key: the checks run at the contract's seed and the record and report say "
          "they ran at one seed") {
    TempDir d("infrarsi-equiv");
    campaign::Campaign c(test::stepload_campaign(d, {{"seed_env = \"STEPLOAD_SEED\"\n", ""}}));
    c.run(test::local_run_options());
    REQUIRE(c.finished());
    const auto records = equivalence_records(c);
    REQUIRE(records.size() == 1);
    CHECK(records[0]["seed_fresh"] == false);
    CHECK(records[0]["seed"] == 1);
    CHECK(records[0]["seed_note"].get<std::string>().find("could not choose a fresh seed") !=
          std::string::npos);
    CHECK(records[0]["state"] == "passed");
    // The spot check still runs, at the contract's seed: it catches a patch set honest only when checked.
    const auto vs = c.store().verifications();
    REQUIRE(vs.size() == 1);
    REQUIRE(vs[0].detail.first.spot_check);
    CHECK(vs[0].detail.first.spot_check->state == "passed");
    CHECK(vs[0].detail.first.spot_check->seed == 1);
    const auto text = report::render(report::build(c));
    CHECK(text.find("could not choose a fresh seed") != std::string::npos);
    CHECK(text.find(
              "Seeds: the contract gives the job no seed ([invariants] has no seed_env or seed_arg). The "
              "equivalence and spot checks ran at one seed: a candidate replaying an earlier run's output "
              "is not excluded by seeds") != std::string::npos);
}

TEST_CASE("a promoted bundle of a knob change and a patch is ablated: only the change that carries the gain "
          "gets it, in the report and in the experience bank's findings") {
    TempDir d("infrarsi-equiv");
    auto edits = threads_knob;
    edits["candidates = [\"fast\"]"] = "candidates = [\"tidy\"]";
    edits["verify_top = 1"] = "verify_top = 3";
    campaign::Campaign c(test::stepload_campaign(d, edits));
    c.run(test::local_run_options());
    REQUIRE(c.finished());
    std::optional<store::VerificationRow> bundle;
    for (const auto& v : c.store().verifications())
        if (v.candidate_key == "threads=2;|tidy;") bundle = v;
    REQUIRE(bundle);
    REQUIRE(bundle->promoted);
    CHECK(*bundle->speedup > 1.8);
    REQUIRE(bundle->detail.ablation);
    const auto& a = *bundle->detail.ablation;
    CHECK(a.state == "done");
    REQUIRE(a.components.size() == 2);
    std::map<std::string, store::AblationComponent> by;
    for (const auto& comp : a.components)
        by[comp.change.name] = comp;
    REQUIRE(by.count("threads"));
    REQUIRE(by.count("tidy"));
    CHECK(by["threads"].state == "measured");
    CHECK(by["threads"].effect.value() > 1.8);
    CHECK(by["threads"].carries == true);
    CHECK(by["tidy"].state == "measured");
    CHECK(by["tidy"].effect.value() == doctest::Approx(1.0).epsilon(0.06));
    CHECK(by["threads"].pairs.value().size() == 2);
    // Ablation trials: 2 rounds of the bundle and its 2 variants.
    CHECK(c.store().trials({.kinds = {TrialKind::Ablation}}).size() == 6);
    // The bank: each change's own effect, not the bundle's speed-up credited to the patch.
    const auto findings = campaign::campaign_findings(c.experience_view());
    bool knob = false, patch = false;
    for (const auto& f : findings) {
        if (f.kind == "patch_effect" && f.content["patch"] == "tidy") {
            patch = true;
            CHECK(f.verified);
            CHECK(f.content["speedup"].get<double>() < 1.1);
            CHECK(f.content["bundle_speedup"].get<double>() > 1.8);
            CHECK(f.content["measured_by"].get<std::string>().find("ablation") != std::string::npos);
        }
        if (f.kind == "knob_effect" && f.content["knob"] == "threads") {
            knob = true;
            CHECK(f.verified);
            CHECK(f.content["speedup"].get<double>() > 1.8);
        }
    }
    CHECK(patch);
    CHECK(knob);
    const auto text = report::render(report::build(c));
    CHECK(text.find("threads=2 (baseline 1): ") != std::string::npos);
    CHECK(text.find(": carries gain") != std::string::npos);
}

TEST_CASE(
    "knobs a constraint ties together are ablated together, and each gets the group's effect in the bank") {
    TempDir d("infrarsi-equiv");
    // threads x chunk == 2: the baseline is threads=1 chunk=2; threads=2 needs chunk=1, so neither change of
    // the bundle threads=2 chunk=1 +tidy can be removed alone.
    campaign::Campaign c(test::stepload_campaign(
        d,
        {{"[knobs.chunk]", "[knobs.threads]\nkind = \"integer\"\nmin = 1\nmax = "
                           "2\nenv = \"STEPLOAD_THREADS\"\nbaseline = 1\n\n"
                           "[knobs.chunk]"},
         {"baseline = 1\n\n[patches]", "baseline = 2\n\n[[constraints]]\nproduct = [\"threads\", \"chunk\"]\n"
                                       "equals = 2\n\n[patches]"},
         {"candidates = [\"fast\"]", "candidates = [\"tidy\"]"},
         {"verify_top = 1", "verify_top = 3"}}));
    c.run(test::local_run_options());
    REQUIRE(c.finished());
    std::optional<store::VerificationRow> bundle;
    for (const auto& v : c.store().verifications())
        if (v.candidate_key == "chunk=1;threads=2;|tidy;") bundle = v;
    REQUIRE(bundle);
    REQUIRE(bundle->promoted);
    REQUIRE(bundle->detail.ablation);
    const auto& a = *bundle->detail.ablation;
    REQUIRE(a.components.size() == 2);
    CHECK(a.skipped.size() == 2); // each knob alone
    std::optional<store::AblationComponent> group;
    for (const auto& comp : a.components)
        if (comp.change.kind == "knobs") group = comp;
    REQUIRE(group);
    CHECK(group->change.names == std::vector<std::string>{"chunk", "threads"});
    CHECK(group->state == "measured");
    CHECK(group->effect.value() > 1.8);
    // By knob: another promoted bundle with the same knobs (without the patch) may share the speed-up
    // exactly (stepload's step times are deterministic, the estimate a median of their differences).
    std::set<std::string> knob_effects;
    for (const auto& f : campaign::campaign_findings(c.experience_view()))
        if (f.kind == "knob_effect" && f.content["bundle_speedup"].get<double>() == *bundle->speedup) {
            knob_effects.insert(f.content["knob"].get<std::string>());
            CHECK(f.verified);
            CHECK(f.content["speedup"].get<double>() > 1.8);
            CHECK(f.content["measured_by"].get<std::string>().find("together with the knobs") !=
                  std::string::npos);
        }
    CHECK(knob_effects == std::set<std::string>{"chunk", "threads"});
}

TEST_CASE(
    "the contract's equivalence_tolerance (invariants): 1e-5 by default, from 0 to below 1 when given") {
    TempDir d("infrarsi-equiv");
    const fs::path fx = INFRARSI_FIXTURES;
    fs::copy(fx / "stepload", d.path / "stepload", fs::copy_options::recursive);
    fs::copy(fx / "stepload-patches", d.path / "stepload-patches", fs::copy_options::recursive);
    const std::string contract = test::read_file(fx / "stepload.contract.toml");
    auto with = [&](const std::string& line) {
        std::string text = contract;
        text.replace(text.find("loss_tolerance = 0.01"), 21, "loss_tolerance = 0.01\n" + line);
        std::ofstream(d.path / "k.toml") << text;
        return d.path / "k.toml";
    };
    CHECK(contract::load(with("")).invariants.equivalence_tolerance == 1e-5);
    CHECK(contract::load(with("equivalence_tolerance = 1e-3")).invariants.equivalence_tolerance == 1e-3);
    CHECK(contract::load(with("equivalence_tolerance = 0")).invariants.equivalence_tolerance == 0);
    CHECK_THROWS_WITH_AS(contract::load(with("equivalence_tolerance = 1.5")),
                         doctest::Contains("equivalence_tolerance 1.5 is out of range"), Error);
}

namespace {

// The stepload contract as a GPU job whose chunk drives its memory (train.sh: chunk x 300 MiB, a CUDA OOM
// above 500 MiB): chunk=2 fits only with a memory saver's halving, and with the saver it is the fastest
// setting (saver.patch). `patch`: saver (the same math) or cheatsaver (every loss shifted by 1e-4).
std::map<std::string, std::string> memory_saver_contract(const std::string& patch) {
    return {
        {"mem = \"200M\"", "mem = \"200M\"\ngpu_mem = \"500M\""},
        {"STEPLOAD_STEP_S = \"0.2\"",
         "STEPLOAD_STEP_S = \"0.2\"\nSTEPLOAD_GPU_MIB_PER_CHUNK = \"300\"\nSTEPLOAD_GPU_LIMIT_MIB = \"500\""},
        {"candidates = [\"fast\"]", "candidates = [\"" + patch + "\"]"}};
}

const std::string kSaverKey = "chunk=2;|saver;";

// The verification of the candidate with this key.
std::optional<store::VerificationRow> verification_of(campaign::Campaign& c, const std::string& key) {
    for (const auto& v : c.store().verifications())
        if (v.candidate_key == key) return v;
    return std::nullopt;
}

} // namespace

TEST_CASE("a memory saver whose best knobs do not fit without it passes its equivalence check and spot check "
          "at the nearest knobs where both fit, and is promoted") {
    TempDir d("infrarsi-equiv");
    campaign::Campaign c(test::stepload_campaign(d, memory_saver_contract("saver")));
    c.run(test::local_run_options());
    REQUIRE(c.finished());
    // The search learned chunk=2 needs the saver: its run without it ran out of memory.
    bool oom = false;
    for (const auto& t : c.store().trials({.kinds = {TrialKind::Search}}))
        oom |= t.candidate_key == "chunk=2;|" && t.outcome == trial::Outcome::OutOfMemory;
    CHECK(oom);
    const auto v = verification_of(c, kSaverKey);
    REQUIRE(v);
    // The check ran at chunk=1, where the code without the patch fits, once: no run of it ran out of memory.
    const auto records = equivalence_records(c);
    REQUIRE(records.size() == 1);
    const auto& r = records[0];
    CHECK(r["state"] == "passed");
    CHECK(r["knobs_moved"] == true);
    CHECK(r["knobs"] == "chunk=1");
    CHECK(r["knobs_note"].get<std::string>().find("do not fit in memory without its patches (trial #") !=
          std::string::npos);
    const auto runs = c.store().trials_of_batch(r["batch_id"].get<std::int64_t>());
    REQUIRE(runs.size() == 2);
    CHECK(runs[0].candidate_key == "chunk=1;|saver;");
    CHECK(runs[1].candidate_key == "chunk=1;|");
    for (const auto& t : runs)
        CHECK(t.outcome == trial::Outcome::Ok);
    // The spot check moved with it: the patch set and chunk=1 without it, at the drawn pair's seed.
    REQUIRE(v->detail.first.spot_check);
    const auto& spot = *v->detail.first.spot_check;
    CHECK(spot.state == "passed");
    CHECK(spot.knobs_moved == true);
    CHECK(spot.seed == v->detail.first.plan[static_cast<std::size_t>(spot.pair.value() - 1)].seed.value());
    CHECK(v->promoted);
    CHECK(v->speedup.value_or(0) > 2.5);
    CHECK_FALSE(c.store().promotions().empty());
    const auto text = report::render(report::build(c));
    CHECK(text.find("at chunk=1: the candidate's knobs do not fit in memory without its patches") !=
          std::string::npos);
    CHECK(text.find("the patch set vs chunk=1 without it") != std::string::npos);
    // The ablation: the bundle without the saver runs out of memory in every round, which says the saver is
    // required, not that it went unmeasured.
    const auto after = verification_of(c, kSaverKey);
    REQUIRE(after);
    REQUIRE(after->detail.ablation);
    bool saver_seen = false;
    for (const auto& comp : after->detail.ablation->components) {
        if (comp.name != "+saver") continue;
        saver_seen = true;
        CHECK(comp.state == "required");
        CHECK(comp.carries == true);
        CHECK(comp.why.value().find("runs out of memory") != std::string::npos);
    }
    CHECK(saver_seen);
    CHECK(
        report::render(report::build(c)).find("+saver: required without it the bundle runs out of memory") !=
        std::string::npos);
}

TEST_CASE("an unpatched reference that runs out of memory in the equivalence check is no verdict: the check "
          "runs again nearer the baseline's knobs and passes") {
    TempDir d("infrarsi-equiv");
    auto edits = memory_saver_contract("saver");
    edits["trials = 3"] = "trials = 1";
    // No gpu_mem: the memory model sees the host's peaks, far below [resources] mem, and cannot foresee the
    // GPU's out of memory (a contract that does not declare the memory that runs out).
    edits.erase("mem = \"200M\"");
    campaign::Campaign c(test::stepload_campaign(d, edits));
    // The search tries only chunk=2 +saver (an experience bank's seed): nothing tells the campaign that
    // chunk=2 needs the saver before the equivalence check's run without it runs out of memory.
    c.store().set_bank_seeds(
        {{.candidate = {{"knobs", {{"chunk", 2}}}, {"patches", {"saver"}}}, .reason = "the test's seed"}});
    c.run(test::local_run_options());
    REQUIRE(c.finished());
    const auto search = c.store().trials({.kinds = {TrialKind::Search}});
    REQUIRE(search.size() == 1);
    CHECK(search[0].candidate_key == kSaverKey);
    const auto records = equivalence_records(c);
    INFO(records.dump(1));
    REQUIRE(records.size() == 2);
    CHECK(records[0]["state"] == "retry");
    CHECK(records[0]["knobs_moved"] == false);
    CHECK(records[0]["out_of_memory"] == true);
    CHECK(records[0]["reason"].get<std::string>().find(
              "the run without the patches ran out of memory at chunk=2") != std::string::npos);
    CHECK(records[1]["state"] == "passed");
    CHECK(records[1]["attempt"] == 2);
    CHECK(records[1]["knobs"] == "chunk=1");
    CHECK(records[1]["knobs_note"].get<std::string>().find("a run of this check there ran out of memory") !=
          std::string::npos);
    CHECK(batches_of(c, store::BatchKind::Equivalence) == 2);
    const auto v = verification_of(c, kSaverKey);
    REQUIRE(v);
    REQUIRE(v->detail.equivalence);
    CHECK(v->detail.equivalence->state == "passed");
    REQUIRE(v->detail.first.spot_check);
    CHECK(v->detail.first.spot_check->state == "passed");
    CHECK(v->promoted);
}

TEST_CASE("a memory saver that changes the math is refused at the nearer knobs: failed, not 'did not "
          "complete', and never proposed again") {
    TempDir d("infrarsi-equiv");
    campaign::Campaign c(test::stepload_campaign(d, memory_saver_contract("cheatsaver")));
    c.run(test::local_run_options());
    REQUIRE(c.finished());
    const auto records = equivalence_records(c);
    REQUIRE(records.size() == 1);
    CHECK(records[0]["state"] == "failed");
    CHECK(records[0]["knobs"] == "chunk=1");
    CHECK(records[0]["reason"].get<std::string>().find("values differ beyond") != std::string::npos);
    CHECK(c.store().promotions().empty());
    for (const auto& v : c.store().verifications()) {
        CHECK_FALSE(v.promoted);
        CHECK(v.detail.not_equivalent);
    }
}

TEST_CASE("a job that ignores the seed it is given gets no record claiming fresh seeds, and the report says "
          "the checks ran at one seed and that replaying an earlier run's output is not excluded by seeds") {
    TempDir d("infrarsi-equiv");
    // The contract names a seed variable the job never reads: every run prints seed 1's losses.
    campaign::Campaign c(test::stepload_campaign(
        d, {{"seed_env = \"STEPLOAD_SEED\"", "seed_env = \"STEPLOAD_IGNORED_SEED\""}}));
    c.run(test::local_run_options());
    REQUIRE(c.finished());
    const auto why = c.equivalence().seeds_not_reaching_job();
    CHECK(why.find("the job ignores the seed it is given") != std::string::npos);
    CHECK(why.find("$STEPLOAD_IGNORED_SEED does not reach it") != std::string::npos);
    for (const auto& r : equivalence_records(c)) {
        CHECK(r["seed_fresh"] == false);
        CHECK(r["seed_note"].get<std::string>().find("the check ran at one seed") != std::string::npos);
    }
    for (const auto& v : c.store().verifications()) {
        if (v.detail.equivalence) CHECK(v.detail.equivalence->seed_fresh == false);
        REQUIRE(v.detail.first.spot_check);
        CHECK(v.detail.first.spot_check->seed_note.value_or("").find("one seed") != std::string::npos);
    }
    const auto j = report::build(c);
    CHECK(j["seeds"]["reach_job"] == false);
    const auto text = report::render(j);
    CHECK(text.find("The equivalence and spot checks ran at one seed: a candidate replaying an earlier run's "
                    "output is not excluded by seeds") != std::string::npos);
    CHECK(text.find("seed chosen at random") == std::string::npos);
}

TEST_CASE("scripts/demo's candidate, micro-batch 8 with two ranks and one thread, is checked without its "
          "patch at micro-batch 4 first: the memory knob moves toward the baseline, ranks and threads stay") {
    // The demo's contract (scripts/demo): micro-batch 8 x two ranks does not fit 1400M without
    // fused-attention (tests/bench/tables/minigpt-dense-1node.jsonl: out of memory; 474 MiB with it).
    const auto k = contract::load(fs::path(INFRARSI_FIXTURES) /
                                  "../../workloads/minigpt/presets/dense-1node.contract.toml");
    space::Candidate cand = k.space.baseline();
    cand.knobs["micro_batch"] = 8LL;
    cand.knobs["grad_accum"] = 1LL;
    cand.knobs["ranks_per_node"] = 2LL;
    cand.knobs["threads"] = 1LL;
    cand.patches = {"fused-attention"};
    REQUIRE(k.space.feasible(cand));
    const auto options = campaign::settings_toward_baseline(k.space, cand);
    REQUIRE(options.size() >= 3);
    CHECK(options[0].describe() == "grad_accum=1 micro_batch=8 ranks_per_node=2 recompute=none threads=1");
    CHECK(options[1].describe() == "grad_accum=2 micro_batch=4 ranks_per_node=2 recompute=none threads=1");
    CHECK(options.back().key() == k.space.baseline().key());
    for (const auto& o : options) {
        CHECK(o.patches.empty());
        CHECK(k.space.feasible(o));
    }
}
