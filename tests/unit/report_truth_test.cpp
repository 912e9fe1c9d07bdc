// A report that tells the truth about a campaign (issue 34, items 7 and 8): a trial stopped early as slower
// is a measurement (drawn, fitted on, never a failure); a campaign that promoted nothing says why, and names
// an MDE that left it nearly powerless; a build failure shows the compiler's first error; each trial's log is
// linked; patch states name the check that decided them; the job's own MFU is said to be the job's; the
// equivalence check's steps are numbered as the job numbers them; the trials' curves, knobs and timeline are
// drawn from what was measured.
#include "patch/build_log.hpp"
#include "report/html.hpp"
#include "report/memory_map.hpp"
#include "report/report.hpp"
#include "report/views.hpp"

#include "report_fixture.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <fstream>

using namespace infrarsi;
using nlohmann::json;
namespace fs = std::filesystem;
using store::TrialKind;
using trial::Outcome;

namespace {

constexpr double MiB = 1 << 20;

int count(const std::string& s, const std::string& what) {
    int n = 0;
    for (auto at = s.find(what); at != std::string::npos; at = s.find(what, at + 1))
        ++n;
    return n;
}

// A finished trial written through the store's API, with the steps the job printed (numbered from 0, as
// nanoGPT counts its iterations) and when it ran.
std::int64_t add_trial(store::CampaignStore& s, std::int64_t batch, TrialKind kind,
                       const space::Candidate& cand, Outcome o, std::optional<double> step,
                       std::optional<double> peak, double cost, double started = 0) {
    store::TrialRow t;
    t.batch_id = batch;
    t.array_index = static_cast<int>(s.trials_of_batch(batch).size());
    t.kind = kind;
    t.candidate = cand.to_json();
    t.candidate_key = cand.key();
    t.state = store::TrialState::Finished;
    t.outcome = o;
    t.step_time_s = step;
    t.peak_memory_bytes = peak;
    t.cost_node_s = cost;
    t.node = "node1";
    if (o == Outcome::StoppedSlow)
        t.detail = "stopped: its first timed steps were slower than the best so far";
    t.measurements = {};
    if (step) {
        const int n = o == Outcome::StoppedSlow ? 3 : 6;
        std::vector<int> numbers;
        std::vector<double> times, losses;
        for (int i = 0; i < n; ++i)
            numbers.push_back(i), times.push_back(*step * (i == 0 ? 3 : 1)), losses.push_back(2.0 - 0.1 * i);
        t.measurements.step_numbers = numbers;
        t.measurements.step_times_s = times;
        t.measurements.losses = losses;
    }
    if (started > 0) t.measurements.started_at = started, t.measurements.ended_at = started + cost;
    t.id = s.add_trial(t);
    s.update_trial(t);
    return t.id;
}

// The demo's campaign: a noisy doctor (MDE 37%), a search whose trials were all stopped early as slower but
// one that ran out of memory and one whose patch did not build; nothing reached verification.
fs::path stopped_campaign(const test::TempDir& d) {
    const fs::path fx = INFRARSI_FIXTURES;
    fs::copy(fx / "toyload", d.path / "toyload", fs::copy_options::recursive);
    fs::copy(fx / "toyload-patches", d.path / "toyload-patches", fs::copy_options::recursive);
    fs::copy_file(fx / "toyload.contract.toml", d.path / "toyload.contract.toml");
    const auto dir = d.path / "c";
    campaign::Campaign::init(d.path / "toyload.contract.toml", dir);
    campaign::Campaign c(dir);
    auto& s = c.store();
    const double t0 = store::now_seconds() - 300;
    s.mark_started(t0);
    s.advance_stage(store::Stage::Doctor);
    const auto doctor = s.add_batch(store::BatchKind::Doctor, "batches/1/manifest.json");
    for (int i = 0; i < 3; ++i)
        add_trial(s, doctor, TrialKind::Doctor, test::toy(1, 16, "none"), Outcome::Ok, 0.10 + 0.02 * i,
                  60 * MiB, 12, t0 + 12 * i);
    s.set_batch_finished(doctor);
    store::Baseline b;
    b.repeats = b.completed = 3;
    b.median_step_s = 0.12;
    b.cold_step_s = 0.3;
    b.cv_between = 0.15;
    b.minimum_detectable_effect = 0.37;
    b.comparison_repeats = 3;
    b.mfu = 0.0021; // the median of the job's own figures: no denominator of the campaign's
    b.reference_losses = {2.0, 1.9, 1.8, 1.7, 1.6, 1.5};
    s.put_baseline(b);
    s.advance_stage(store::Stage::Search);
    const auto search = s.add_batch(store::BatchKind::Search, "batches/2/manifest.json");
    const std::vector<space::Candidate> slow = {test::toy(2, 8, "none"), test::toy(4, 4, "none"),
                                                test::toy(2, 8, "full"), test::toy(4, 4, "selective")};
    double at = t0 + 40;
    for (std::size_t i = 0; i < slow.size(); ++i, at += 8)
        add_trial(s, search, TrialKind::Search, slow[i], Outcome::StoppedSlow, 0.2 + 0.01 * i,
                  (100 + 20 * i) * MiB, 8, at);
    add_trial(s, search, TrialKind::Search, test::toy(16, 1, "none"), Outcome::OutOfMemory, {}, {}, 3, at);
    auto patched = test::toy(1, 16, "none");
    patched.patches = {"broken_build"};
    add_trial(s, search, TrialKind::Search, patched, Outcome::BuildFailure, {}, {}, 0);
    s.set_batch_finished(search);
    s.advance_stage(store::Stage::Done);
    return dir;
}

} // namespace

TEST_CASE("trials stopped early as slower are drawn as measurements: progress, memory, cost, curves") {
    test::TempDir d;
    campaign::Campaign c(stopped_campaign(d));
    const auto r = report::build(c);
    const auto page =
        report::render_html(r, report::memory_map(c), std::nullopt,
                            [](const std::string& p, const std::string&) { return "file://" + p; });
    // No search trial ran every step, yet the progress plots draw the stopped ones.
    CHECK(page.find("Search progress by trial: nothing to draw yet") == std::string::npos);
    CHECK(page.find("Verification: nothing to draw yet") != std::string::npos); // none ran
    for (const char* id : {"progress-trials", "progress-node-hours", "memory", "oom-map", "cost",
                           "loss-curves", "step-time-curves", "parallel-coordinates", "timeline"})
        CHECK_MESSAGE(page.find(std::string("data-plot=\"") + id + "\"") != std::string::npos, id);
    CHECK(page.find("search trial stopped early as slower (its first steps)") != std::string::npos);
    CHECK(page.find("stopped early as slower (measured)") != std::string::npos);
    // Not a failure: neither "other failure" in the plots nor a failed row in the table.
    CHECK(page.find("other failure") == std::string::npos);
    CHECK(count(page, "class=\"stopped\"") == 4);
    // The cost plot colours an outcome as every view does: stopped_slow amber (#ff7f0e), not red.
    const auto cost = page.substr(page.find("data-plot=\"cost\""));
    CHECK(cost.substr(0, cost.find("</figure>")).find("rgb(255, 127,  14)") != std::string::npos);
    // The text apart from the failures' cost, as before.
    const auto text = report::render(r);
    CHECK(text.find("trials stopped early as slower than the incumbent cost 32.0 node-seconds") !=
          std::string::npos);
}

TEST_CASE("the P(OOM) map is fitted on the search trials' measured peaks, those stopped early included") {
    test::TempDir d;
    campaign::Campaign c(stopped_campaign(d));
    const auto m = report::memory_map(c);
    REQUIRE(m.is_object());
    CHECK(m["fitted_on"] ==
          8); // 3 doctor peaks, 4 peaks of trials stopped early, 1 OOM censored at the limit
    CHECK(m["fitted_by_kind"] == json({{"doctor", 3}, {"search", 5}}));
    const auto page = report::render_html(report::build(c), m, std::nullopt,
                                          [](const std::string& p, const std::string&) { return p; });
    CHECK(page.find("fitted on 8 trials (3 doctor, 5 search") != std::string::npos);
}

TEST_CASE("a campaign that verified nothing says why, and names the MDE that left it nearly powerless") {
    test::TempDir d;
    campaign::Campaign c(stopped_campaign(d));
    const auto r = report::build(c);
    const auto& n = r["none_promoted"];
    CHECK(n["reason"] == "none_verified");
    CHECK(n["powerless"] == true);
    CHECK(n["mde"].get<double>() == doctest::Approx(0.37));
    const auto text = n["text"].get<std::string>();
    CHECK(text.find("no candidate reached verification") != std::string::npos);
    CHECK(text.find("4 were stopped early") != std::string::npos);
    CHECK(text.find("minimum detectable effect was 37%: the campaign was nearly powerless") !=
          std::string::npos);
    CHECK(text.find("1.37x") != std::string::npos);
    // The HTML says so where the Verifications table would be, and prints no empty table.
    const auto page = report::render_html(r, json(), std::nullopt,
                                          [](const std::string& p, const std::string&) { return p; });
    const auto at = page.find("<h2>Verifications</h2>");
    REQUIRE(at != std::string::npos);
    CHECK(page.find("<h2>Verifications</h2>\n<p class=\"none-verified\">No verification: none: no candidate "
                    "reached verification") == at);
    CHECK(page.find("<th>reasons</th>") == std::string::npos);
    CHECK(report::render(r).find("  no candidate reached verification") != std::string::npos);
    // A quiet doctor: no such note.
    store::Baseline b = *c.store().baseline();
    b.minimum_detectable_effect = 0.04;
    c.store().put_baseline(b);
    const auto quiet = report::build(c)["none_promoted"];
    CHECK(quiet["powerless"] == false);
    CHECK(quiet["text"].get<std::string>().find("powerless") == std::string::npos);
}

TEST_CASE("the job's own MFU is said to be the job's, never printed as the campaign's") {
    test::TempDir d;
    campaign::Campaign c(stopped_campaign(d));
    const auto r = report::build(c);
    CHECK_FALSE(r["baseline"].contains("mfu"));
    CHECK(r["baseline"]["job_mfu"].get<double>() == doctest::Approx(0.0021));
    for (const auto& t : r["trials"])
        CHECK_FALSE(t.contains("mfu"));
    const auto text = report::render(r);
    CHECK(text.find("MFU unknown (the job's own figure 0.0021 is over a peak the job assumes") !=
          std::string::npos);
    // A denominator of the campaign's (the contract's, a calibration's): the MFU is ours.
    store::Baseline b = *c.store().baseline();
    b.peak_flops = 1e12;
    b.model_flops_per_step = 1e9;
    b.peak_flops_source = "declared in the contract ([resources] peak_flops)";
    c.store().put_baseline(b);
    CHECK(report::build(c)["baseline"]["mfu"].get<double>() == doctest::Approx(0.0021));
    // The peak the job's figures imply: the job's again.
    b.peak_flops_by_job = true;
    c.store().put_baseline(b);
    const auto by_job = report::build(c);
    CHECK_FALSE(by_job["baseline"].contains("mfu"));
    CHECK(report::render(by_job).find("its assumption, not this hardware's") != std::string::npos);
}

TEST_CASE("each trial's log.txt is linked beside its result.json, and a build failure links its build log") {
    test::TempDir d;
    campaign::Campaign c(stopped_campaign(d));
    auto& s = c.store();
    fs::create_directories(d.path / "t4");
    std::ofstream(d.path / "t4" / "result.json") << "{}";
    std::ofstream(d.path / "t4" / "log.txt") << "iter 0: loss 2.0\n";
    std::ofstream(d.path / "build.log") << "make: *** [all] Error 2\n";
    for (auto t : s.trials()) {
        if (t.kind == TrialKind::Search && t.outcome == Outcome::StoppedSlow && t.result_path.empty()) {
            t.result_path = (d.path / "t4" / "result.json").string();
            s.update_trial(t);
            break;
        }
    }
    for (auto t : s.trials({.outcome = Outcome::BuildFailure})) {
        t.result_path = (d.path / "build.log").string();
        s.update_trial(t);
    }
    const auto r = report::build(c);
    int logs = 0;
    for (const auto& t : r["trials"]) {
        if (t["outcome"] == "build_failure") {
            CHECK(t["result"] == "");
            CHECK(t["log"] == (d.path / "build.log").string());
        } else if (!t["result"].get<std::string>().empty()) {
            CHECK(t["log"] == (d.path / "t4" / "log.txt").string());
            ++logs;
        }
    }
    CHECK(logs == 1);
    const auto page = report::render_html(
        r, json(), std::nullopt, [](const std::string& p, const std::string&) { return "file://" + p; });
    CHECK(page.find("href=\"file://" + (d.path / "t4" / "log.txt").string() + "\">log.txt</a>") !=
          std::string::npos);
    CHECK(page.find("\">build log</a>") != std::string::npos);
}

TEST_CASE("a build failure shows the compiler's first error, not make's Error 2 lines") {
    const std::string log =
        "[ 50%] Building C object CMakeFiles/toy.dir/kernels/compute.c.o\n"
        "/src/kernels/compute.c: In function 'step':\n"
        "/src/kernels/compute.c:12:5: error: 'undeclared_thing' undeclared (first use)\n"
        "   12 |     undeclared_thing += 1;\n"
        "      |     ^~~~~~~~~~~~~~~~\n"
        "/src/kernels/compute.c:14:1: error: expected ';' before '}' token\n"
        "make[2]: *** [CMakeFiles/toy.dir/build.make:76: CMakeFiles/toy.dir/compute.c.o] Error 1\n"
        "make[1]: *** [CMakeFiles/Makefile2:83: CMakeFiles/toy.dir/all] Error 2\n"
        "make: *** [Makefile:91: all] Error 2\n";
    CHECK(patch::first_build_error(log) ==
          "/src/kernels/compute.c:12:5: error: 'undeclared_thing' undeclared "
          "(first use)\n   12 |     undeclared_thing += 1;\n"
          "      |     ^~~~~~~~~~~~~~~~");
    CHECK(patch::first_build_error("cc1: fatal error: kernels/missing.c: No such file or directory\n"
                                   "compilation terminated.\nmake: *** [Makefile:3: all] Error 1\n") ==
          "cc1: fatal error: kernels/missing.c: No such file or directory");
    CHECK(
        patch::first_build_error("/usr/bin/ld: main.o: in function `main':\nmain.c:(.text+0x1a): undefined "
                                 "reference to `fused_step'\ncollect2: error: ld returned 1 exit status\n") ==
        "main.c:(.text+0x1a): undefined reference to `fused_step'");
    CHECK(patch::first_build_error(
              "make: *** No rule to make target 'kernels/x.c', needed by 'toy'.  Stop.\n") ==
          "make: *** No rule to make target 'kernels/x.c', needed by 'toy'.  Stop.");
    CHECK_FALSE(patch::first_build_error("make: *** [all] Error 2\n"));
}

TEST_CASE("patch states name the check that decided them, one vocabulary in the JSON and the text") {
    test::TempDir d;
    campaign::Campaign c(stopped_campaign(d));
    auto& s = c.store();
    s.put_patch({"fast_kernel", true, "", {{"description", "a faster kernel"}}});
    s.put_patch({"loss_trick", true, "", {{"description", "skips a term of the loss"}}});
    s.put_patch({"outside", false, "touches main.c, outside the editable scope", {{"description", "x"}}});
    s.add_equivalence_check(store::equivalence_check_from_json(
        {{"patches", {"loss_trick"}}, {"state", "failed"}, {"reason", "step 3 differs by 4%"}}));
    s.add_equivalence_check(store::equivalence_check_from_json(
        {{"patches", {"fast_kernel"}}, {"state", "passed"}, {"reason", ""}}));
    const auto r = report::build(c);
    std::map<std::string, json> by_id;
    for (const auto& p : r["patches"]) {
        CHECK_FALSE(p.contains("accepted"));
        by_id[p["id"].get<std::string>()] = p;
    }
    CHECK(by_id["fast_kernel"]["state"] == "scope_accepted");
    CHECK(by_id["fast_kernel"]["equivalence"][0]["state"] == "passed");
    CHECK(by_id["loss_trick"]["state"] == "equivalence_refused");
    CHECK(by_id["loss_trick"]["refused_because"] == "step 3 differs by 4%");
    CHECK(by_id["outside"]["state"] == "scope_refused");
    const auto text = report::render(r);
    CHECK(text.find("fast_kernel accepted by the scope check; equivalence of fast_kernel: passed") !=
          std::string::npos);
    CHECK(text.find("loss_trick REFUSED by the equivalence check: step 3 differs by 4%") !=
          std::string::npos);
    CHECK(text.find("outside REFUSED by the scope check: touches main.c") != std::string::npos);
}

TEST_CASE("the equivalence check's steps are numbered as the job numbers them") {
    test::TempDir d;
    campaign::Campaign c(test::fixture_campaign(d));
    auto& s = c.store();
    // The patch set's run printed nanoGPT's iterations 0, 1, 2.
    store::TrialRow run;
    for (const auto& t : s.trials({.kinds = {TrialKind::VerifyCandidate}}))
        run = t;
    run.measurements.step_numbers = std::vector<int>{0, 1, 2};
    s.update_trial(run);
    auto v = s.verifications().at(0);
    v.detail.equivalence =
        store::equivalence_check_from_json({{"state", "passed"},
                                            {"seed", 7},
                                            {"candidate_trial", run.id},
                                            {"values",
                                             {{{"step", 1}, {"baseline", 2.0}, {"candidate", 2.0}},
                                              {{"step", 2}, {"baseline", 1.9}, {"candidate", 1.9}},
                                              {{"step", 3}, {"baseline", 1.8}, {"candidate", 1.8}}}}});
    s.update_verification(v);
    const auto r = report::build(c);
    const auto& values = r["verifications"][0]["equivalence"]["values"];
    CHECK(values[0]["job_step"] == 0);
    CHECK(values[2]["job_step"] == 2);
    CHECK(values[2]["step"] == 3);
}

TEST_CASE("the trial table marks the settings that differ from the baseline's and sorts without a console "
          "message") {
    test::TempDir d;
    campaign::Campaign c(stopped_campaign(d));
    const auto page = report::render_html(report::build(c), json(), std::nullopt,
                                          [](const std::string& p, const std::string&) { return p; });
    CHECK(page.find("<table class=\"trials sortable\">") != std::string::npos);
    // toy(4, 4, "selective") against the baseline toy(1, 16, "none"): three marked, no unmarked.
    CHECK(
        page.find("<mark class=\"differs\">grad_accum=4</mark> <mark class=\"differs\">micro_batch=4</mark> "
                  "<mark class=\"differs\">recompute=selective</mark>") != std::string::npos);
    // A doctor's row: nothing differs.
    CHECK(page.find("<span>grad_accum=16</span> <span>micro_batch=1</span> <span>recompute=none</span>") !=
          std::string::npos);
    CHECK(page.find("<mark class=\"differs\">broken_build</mark>") != std::string::npos);
    CHECK(count(page, "<script") == 1); // the sort, inline; nothing fetched
    CHECK(page.find("console.") == std::string::npos);
}

TEST_CASE("the best so far and each search trial are shown as the search compares them: over the batch's "
          "control, like against like") {
    test::TempDir d;
    const auto dir = test::fixture_campaign(d);
    campaign::Campaign c(dir);
    auto& s = c.store();
    // The fixture's fastest search trial runs at 0.070 s/step, no control (over the doctor's 0.100: 1.43x).
    // A later batch ran in a slow spell of the host: its control at 0.150, its candidate at 0.090, faster
    // than its control by more than anything before.
    const auto batch = s.add_batch(store::BatchKind::Search, "batches/5/manifest.json");
    const auto control = add_trial(s, batch, TrialKind::SearchControl, test::toy(1, 16, "none"), Outcome::Ok,
                                   0.150, 60 * MiB, 12);
    const auto fast = test::toy(2, 8, "selective");
    const auto id = add_trial(s, batch, TrialKind::Search, fast, Outcome::Ok, 0.090, 100 * MiB, 8);
    auto t = s.trials_of_batch(batch).back();
    REQUIRE(t.id == id);
    t.measurements.control = trial::ControlRatio{control, 0.150, 0.6, std::nullopt};
    s.update_trial(t);

    const auto st = report::status(c);
    REQUIRE(st.contains("best"));
    CHECK(st["best"]["candidate"] == fast.describe());
    CHECK(st["best"]["speedup_vs_baseline"].get<double>() == doctest::Approx(1 / 0.6));
    CHECK(st["best"]["speedup_over"] == "control");
    CHECK(report::render_status(st).find("1.67x over its batch's control") != std::string::npos);

    const auto r = report::build(c);
    int with_ratio = 0;
    for (const auto& tr : r["trials"])
        if (tr["ratio_to_control"].is_number()) {
            ++with_ratio;
            CHECK(tr["id"] == id);
            CHECK(tr["ratio_to_control"].get<double>() == doctest::Approx(0.6));
        }
    CHECK(with_ratio == 1);
    const auto text = report::render(r);
    const auto line = text.find(fmt::format("#{:<4}", id));
    REQUIRE(line != std::string::npos);
    CHECK(text.substr(line, text.find('\n', line) - line).find("0.600") != std::string::npos);
    const auto table = report::trial_table(r, [](const std::string& p, const std::string&) { return p; });
    const auto row = table.find(fmt::format("<tr id=\"trial-{}\"", id));
    REQUIRE(row != std::string::npos);
    CHECK(table.substr(row, table.find("</tr>", row) - row).find("1.667x (its control)") !=
          std::string::npos);

    // Without a control the fixture's fastest is the best, over the doctor's baseline (the test can fail).
    test::TempDir d2;
    campaign::Campaign plain(test::fixture_campaign(d2), campaign::Campaign::Open::read_only);
    const auto st2 = report::status(plain);
    CHECK(st2["best"]["speedup_vs_baseline"].get<double>() == doctest::Approx(0.100 / 0.070));
    CHECK(st2["best"]["speedup_over"] == "doctor");
}
