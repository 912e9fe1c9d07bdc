// Like against like (issue 32): every search batch carries a control, a baseline run beside its candidates,
// and the search's early stops and comparisons use it; and a doctor that notices a baseline too noisy to
// promote a real gain: it re-measures, then pauses the campaign unless told to go on. On the stepload
// fixture (tests/fixtures/stepload), whose kernel.sh the tests extend with a host-wide slowdown and a noisy
// baseline, each switched by a file beside the contract.
#include "campaign/campaign.hpp"
#include "trial/exec.hpp"

#include "stepload_campaign.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace infrarsi;
using store::TrialKind;
using test::TempDir;

namespace {

// The stepload fixture with `lines` appended to kernel.sh (after its editable part, which the patches
// change): they see $runs (the contract directory's runs.log), $run (this build's run number) and $speed.
fs::path campaign_with_kernel(const TempDir& d, const std::string& lines,
                              const std::map<std::string, std::string>& edits) {
    const fs::path fx = INFRARSI_FIXTURES;
    // stepload_campaign copies the fixture and inits; the kernel must be changed before init locks the tree.
    fs::copy(fx / "stepload", d.path / "stepload", fs::copy_options::recursive);
    std::ofstream(d.path / "stepload" / "kernel.sh", std::ios::app) << lines;
    fs::copy(fx / "stepload-patches", d.path / "stepload-patches", fs::copy_options::recursive);
    std::string contract = test::read_file(fx / "stepload.contract.toml");
    for (const auto& edit : edits) {
        const auto at = contract.find(edit.first);
        REQUIRE(at != std::string::npos);
        contract.replace(at, edit.first.size(), edit.second);
    }
    std::ofstream(d.path / "stepload.contract.toml") << contract;
    campaign::Campaign::init(d.path / "stepload.contract.toml", d.path / "c");
    return d.path / "c";
}

// A host-wide slowdown: every run is three times slower while the file host-slow exists.
const std::string kHostSlow =
    "if [ -e \"$(dirname \"$runs\")/host-slow\" ]; then speed=$(awk -v s=\"$speed\" "
    "'BEGIN { print s * 3 }'); fi\n";

// 8 steps (the early stop needs at least twice its 3 steps after the warm-up), three trials at once.
const std::map<std::string, std::string> kConcurrent{
    {"steps = 6", "steps = 8"}, {"time_limit = \"2\"", "time_limit = \"2\"\nmax_concurrent = 3"}};

std::vector<measure::StepSample> steps_of(const std::vector<double>& times) {
    std::vector<measure::StepSample> s;
    for (std::size_t i = 0; i < times.size(); ++i) {
        measure::StepSample x;
        x.step = static_cast<int>(i + 1);
        x.step_time_s = times[i];
        x.timed = true;
        s.push_back(x);
    }
    return s;
}

} // namespace

TEST_CASE("the early stop with a control holds a trial to the control beside it, not to an absolute time") {
    trial::ManifestTask::SlowStop rule;
    rule.skip_steps = 1;
    rule.after_steps = 3;
    rule.control_log = "/nonexistent/log.txt";
    rule.control_ratio = 1.05;
    const auto host_slow_control = steps_of({1.0, 0.6, 0.6, 0.6});
    // Twice as fast as its control on a host three times slower than the doctor saw: runs on.
    CHECK(trial::slow_stop_reason(steps_of({0.5, 0.3, 0.3, 0.3}), rule, &host_slow_control) == std::string());
    // Slower than its control by more than the ratio: stopped, and the reason names the control.
    const auto why = trial::slow_stop_reason(steps_of({1.0, 0.7, 0.7, 0.7}), rule, &host_slow_control);
    REQUIRE(why);
    CHECK(why->find("control") != std::string::npos);
    // Undecided while the control has printed too few steps (asked again at the trial's next step).
    const auto early = steps_of({1.0, 0.6});
    CHECK_FALSE(trial::slow_stop_reason(steps_of({1.0, 0.7, 0.7, 0.7}), rule, &early));
    // No control to read (the plugin's view hides it) and no fallback: runs on; with one: the absolute limit.
    CHECK(trial::slow_stop_reason(steps_of({1.0, 0.7, 0.7, 0.7}), rule, nullptr) == std::string());
    rule.step_s = 0.5;
    CHECK(trial::slow_stop_reason(steps_of({1.0, 0.7, 0.7, 0.7}), rule, nullptr).value_or("").find("0.5") !=
          std::string::npos);
}

TEST_CASE("a host-wide slowdown after the doctor moves the search batch's control too: a truly faster "
          "candidate is not stopped early, and its ratio to the control is recorded") {
    TempDir d;
    const auto dir = campaign_with_kernel(d, kHostSlow, kConcurrent);
    campaign::Campaign c(dir);
    const auto o = test::local_run_options(false);
    c.doctor(o);
    const auto baseline = c.store().baseline();
    REQUIRE(baseline);
    CHECK(baseline->median_step_s == doctest::Approx(0.202).epsilon(0.02));
    // The whole host slows down three times once the doctor is done: the doctor's solo figure no longer
    // describes what the candidates run beside.
    std::ofstream(d.path / "host-slow") << "";
    c.run(o);
    // Against the doctor's figure the fast patch (0.5 x 3 = 1.5 times the doctor's step time) would be
    // stopped.
    const auto absolute =
        campaign::slow_stop_rule(baseline->median_step_s, baseline->minimum_detectable_effect, 8, 1);
    REQUIRE(absolute);
    CHECK(absolute->step_s < 0.3);

    const auto controls = c.store().trials({.kinds = {TrialKind::SearchControl}});
    REQUIRE_FALSE(controls.empty());
    for (const auto& t : controls) {
        CHECK(store::outcome_name(t) == "ok");
        CHECK(t.step_time_s.value_or(0) == doctest::Approx(0.606).epsilon(0.02));
        CHECK(t.candidate_key == c.contract().space.baseline().key());
    }
    // Each search batch has exactly one control, and controls are not counted as search trials.
    for (const auto& b : c.store().batches()) {
        if (b.kind != store::BatchKind::Search) continue;
        int n = 0;
        for (const auto& t : c.store().trials_of_batch(b.id))
            n += t.kind == TrialKind::SearchControl;
        CHECK(n == 1);
    }
    CHECK(c.budget_use().trials == 3); // every candidate of the space: chunk 1..2, with and without the patch
    bool fast_seen = false;
    for (const auto& t : c.store().trials({.kinds = {TrialKind::Search}})) {
        const auto cand = space::Candidate::from_json(t.candidate);
        if (cand.patches != std::vector<std::string>{"fast"}) continue;
        fast_seen = true;
        CHECK(store::outcome_name(t) == "ok");
        const auto ratio = campaign::control_ratio(t);
        REQUIRE(ratio);
        CHECK(*ratio < 0.55);
        REQUIRE(t.measurements.control);
        CHECK(t.measurements.control->step_s == doctest::Approx(0.606).epsilon(0.02));
    }
    CHECK(fast_seen);
    // Like against like into verification too: the fast patch, slower than the doctor's solo figure but
    // twice as fast as the control beside it, is verified (a candidate used to reach verification only when
    // its raw step time beat the doctor's, so a search run under load verified nothing).
    c.verify(test::local_run_options(true));
    bool verified = false;
    for (const auto& v : c.store().verifications())
        verified |= space::Candidate::from_json(v.candidate).patches == std::vector<std::string>{"fast"};
    CHECK(verified);
}

TEST_CASE("a search trial slower than its batch's control by more than the MDE is still stopped early") {
    TempDir d;
    // The fast patch is made four times slower than the baseline instead: slower than the control beside it.
    // One trial at a time (the contract's default): the control, first in its batch, has printed its steps
    // when the candidate's are compared, so the stop does not depend on which of them the host runs first.
    const auto dir =
        campaign_with_kernel(d, "if [ \"$speed\" = 0.5 ]; then speed=4; fi\n", {{"steps = 6", "steps = 8"}});
    campaign::Campaign c(dir);
    c.run(test::local_run_options(false));
    bool slow_seen = false;
    for (const auto& t : c.store().trials({.kinds = {TrialKind::Search}})) {
        const auto cand = space::Candidate::from_json(t.candidate);
        if (cand.patches != std::vector<std::string>{"fast"}) continue;
        slow_seen = true;
        CHECK(store::outcome_name(t) == "stopped_slow");
        CHECK(t.detail.find("control") != std::string::npos);
    }
    CHECK(slow_seen);
}

// Noisy: every second run of the baseline's build is twice as slow while the file `noisy` exists
// (`transient`: its first three runs only, the doctor's).
std::string noisy_kernel(bool transient) {
    return std::string("if [ -e \"$(dirname \"$runs\")/noisy\" ] && [ $((run % 2)) = 0 ] ") +
           (transient ? "&& [ \"$run\" -le 3 ] " : "") + "; then speed=2; fi\n";
}

TEST_CASE("a doctor whose noise stays too high re-measures one job at a time, then pauses the campaign and "
          "says why, --accept-noise goes on") {
    TempDir d;
    const auto dir = campaign_with_kernel(d, noisy_kernel(false), {});
    std::ofstream(d.path / "noisy") << "";
    {
        campaign::Campaign c(dir);
        c.run(test::local_run_options(false));
        const auto why = c.paused();
        REQUIRE(why);
        CHECK(why->find("minimum detectable effect") != std::string::npos);
        CHECK(why->find("--accept-noise") != std::string::npos);
        CHECK(c.store().stage() == store::Stage::Doctor);
        CHECK(c.store().trials({.kinds = {TrialKind::Search}}).empty());
        // The first measurement and the re-measurement, each of three runs, one job at a time.
        int remeasures = 0;
        for (const auto& b : c.store().batches())
            if (b.kind == store::BatchKind::DoctorRemeasure) {
                ++remeasures;
                CHECK(c.store().trials_of_batch(b.id).size() == 3);
            }
        CHECK(remeasures == 1);
        CHECK(c.store().trials({.kinds = {TrialKind::Doctor}}).size() == 6);
        // Run again without the override: still paused, nothing more run.
        c.run(test::local_run_options(false));
        CHECK(c.paused());
        CHECK(c.store().trials({.kinds = {TrialKind::Doctor}}).size() == 6);
    }
    // A read-only open (status, report) sees the pause too.
    CHECK(campaign::Campaign(dir, campaign::Campaign::Open::read_only).paused());
    campaign::Campaign c(dir);
    auto o = test::local_run_options(false);
    o.accept_noise = true;
    c.run(o);
    CHECK_FALSE(c.paused());
    CHECK(c.store().stage() >= store::Stage::Search);
    CHECK(c.budget_use().trials == 3);
    // Accepted once: a later run goes on without the flag.
    campaign::Campaign again(dir);
    again.run(test::local_run_options(false));
    CHECK_FALSE(again.paused());
}

TEST_CASE("a doctor whose first measurement was noisy and whose re-measurement is quiet goes on with the "
          "re-measured baseline") {
    TempDir d;
    const auto dir = campaign_with_kernel(d, noisy_kernel(true), {});
    std::ofstream(d.path / "noisy") << "";
    campaign::Campaign c(dir);
    c.run(test::local_run_options(false));
    CHECK_FALSE(c.paused());
    const auto b = c.store().baseline();
    REQUIRE(b);
    CHECK(b->minimum_detectable_effect < campaign::kNoisyMde);
    CHECK(b->median_step_s == doctest::Approx(0.202).epsilon(0.02));
    CHECK(c.budget_use().trials == 3);
}

TEST_CASE("check_noise: noisy above max(25%, min_speedup), and says the MDE and the noise") {
    store::Baseline b;
    b.minimum_detectable_effect = 0.30;
    b.cv_between = 0.11;
    b.completed = 5;
    auto v = campaign::check_noise(b, 0.03);
    CHECK(v.noisy);
    CHECK(v.limit == doctest::Approx(0.25));
    CHECK(v.why.find("30.0%") != std::string::npos);
    CHECK_FALSE(campaign::check_noise(b, 0.40).noisy); // a contract that only wants gains above 40%
    b.minimum_detectable_effect = 0.10;
    CHECK_FALSE(campaign::check_noise(b, 0.03).noisy);
}

TEST_CASE(
    "control_levels: a control far from the campaign's other controls is a fluke of its run, its batch's "
    "ratios are over their median, and a host slowed as a whole moves them all") {
    const double bound = std::log1p(0.156); // the demo's MDE
    // The demo (2026-12-07): the first batch's control ran at 1.272 s/step, the next three at 0.93; over it,
    // the candidates of that batch looked 27% faster than they were and the slowest of them was verified.
    auto l = campaign::control_levels({1.272, 0.938, 0.928, 0.929}, bound);
    REQUIRE(l.size() == 4);
    CHECK(l[0].outlier);
    CHECK(l[0].over == doctest::Approx(0.9335));
    for (std::size_t i = 1; i < 4; ++i) {
        CHECK_FALSE(l[i].outlier);
        CHECK(l[i].over == doctest::Approx(std::vector<double>{1.272, 0.938, 0.928, 0.929}[i]));
    }
    // Two controls say nothing of which is the fluke: each batch keeps its own.
    l = campaign::control_levels({1.272, 0.938}, bound);
    CHECK_FALSE(l[0].outlier);
    CHECK_FALSE(l[1].outlier);
    // Within the bound, every control is its batch's (like against like: a slower host moves them all).
    l = campaign::control_levels({1.0, 1.1, 0.95, 1.12}, bound);
    for (const auto& x : l)
        CHECK_FALSE(x.outlier);
    l = campaign::control_levels({2.0, 2.1, 2.05}, bound);
    for (const auto& x : l)
        CHECK_FALSE(x.outlier);
}
