// What a trial claims, held against what it cannot forge (trial/proof.hpp): the step-line rules, the timing
// check against the evidence's elapsed time less the doctor's startup, the settings check against the
// manifest entry, and classify()'s typed violations for each; the evidence record's format and the rule that
// only root's files in the spool count.
#include "measure/log_format.hpp"
#include "trial/evidence.hpp"
#include "trial/manifest.hpp"
#include "trial/outcome.hpp"
#include "trial/proof.hpp"
#include "util/error.hpp"

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace infrarsi;
using trial::Outcome;
using trial::Violation;

namespace {

std::vector<measure::StepSample> steps(std::vector<int> numbers, double each_s = 0.5) {
    std::vector<measure::StepSample> out;
    for (int n : numbers) {
        measure::StepSample s;
        s.step = n;
        s.loss = 2.0 / n;
        s.step_time_s = each_s;
        out.push_back(s);
    }
    return out;
}

const trial::Limits limits{"300M", 300LL << 20, "00:05:00", 4, "infrarsi (INFRARSI_STEP)"};

slurm::JobRecord completed() {
    slurm::JobRecord r;
    r.job_id = "7_1";
    r.state = slurm::JobState::Completed;
    r.raw_state = "COMPLETED";
    return r;
}

} // namespace

TEST_CASE("step lines: exactly the contract's steps, each numbered once, in order") {
    CHECK(trial::check_step_lines(steps({1, 2, 3, 4}), 4).empty());
    CHECK(trial::check_step_lines(steps({0, 1, 2, 3}), 4).empty());
    CHECK(trial::check_step_lines(steps({10, 20, 30, 40}), 4).empty()); // a job that logs every 10th step
    CHECK(trial::check_step_lines(steps({1, 2}), 4).empty());           // too few: MissingSteps says it
    CHECK(trial::check_step_lines(steps({1, 2, 3, 4, 5}), 4).find("1 more than the contract's 4") !=
          std::string::npos);
    // The forged burst at exit: the baseline's steps again, fast.
    CHECK(trial::check_step_lines(steps({1, 2, 3, 4, 1, 2, 3, 4}), 4).find("out of order") !=
          std::string::npos);
    CHECK(trial::check_step_lines(steps({1, 2, 2, 3}), 4).find("step 2 printed twice") != std::string::npos);
    CHECK(trial::check_step_lines(steps({1, 3, 2, 4}), 4).find("out of order") != std::string::npos);
}

TEST_CASE("no step line after the contract's last step is taken") {
    auto s = steps({1, 2, 3, 4, 5, 6});
    trial::keep_contract_steps(s, 4);
    REQUIRE(s.size() == 4);
    CHECK(s.back().step == 4);
    auto few = steps({1, 2});
    trial::keep_contract_steps(few, 4);
    CHECK(few.size() == 2);
}

TEST_CASE("extra or reordered step lines are a step_lines violation before anything else is checked") {
    const auto record = completed();
    measure::TrialSummary summary;
    summary.steady_step_s = {0.5, 0.48, 0.52};
    trial::Evidence e;
    e.record = &record;
    e.has_result = true;
    e.steps = 8;
    e.summary = &summary;
    e.step_lines_violation = trial::check_step_lines(steps({1, 2, 3, 4, 1, 2, 3, 4}), 4);
    auto v = trial::classify(e, limits);
    CHECK(v.outcome == Outcome::ContractViolation);
    CHECK(v.violation == Violation::StepLines);
    CHECK(v.detail.find("out of order") != std::string::npos);
    CHECK(trial::to_string(Violation::StepLines) == "step_lines");
    CHECK(trial::parse_violation("timing") == Violation::Timing);
    CHECK(trial::parse_violation("settings") == Violation::Settings);

    e.step_lines_violation.reset();
    e.steps = 4;
    e.settings_violation = "X='1' (manifest: '2')";
    v = trial::classify(e, limits);
    CHECK(v.violation == Violation::Settings);
    e.settings_violation.reset();
    e.timing_violation = "too short";
    v = trial::classify(e, limits);
    CHECK(v.violation == Violation::Timing);
    CHECK(v.detail.find("too short") != std::string::npos);
    e.timing_violation.reset();
    CHECK(trial::classify(e, limits).outcome == Outcome::Ok);
}

TEST_CASE("files rewritten after the trial ended are a rewritten_after_end violation, whatever they say, a "
          "node failure or cancellation Slurm reported still stands") {
    auto record = completed();
    measure::TrialSummary summary;
    summary.steady_step_s = {0.5, 0.48, 0.52};
    trial::Evidence e;
    e.record = &record;
    e.has_result = true;
    e.steps = 4;
    e.summary = &summary;
    CHECK(trial::classify(e, limits).outcome == Outcome::Ok);
    e.rewritten_violation = "result.json: 120 bytes, sha256 abc when the trial ended, now 121 bytes";
    auto v = trial::classify(e, limits);
    CHECK(v.outcome == Outcome::ContractViolation);
    CHECK(v.violation == Violation::RewrittenAfterEnd);
    CHECK(v.detail.find("changed after it ended: result.json: 120 bytes") != std::string::npos);
    CHECK(trial::to_string(Violation::RewrittenAfterEnd) == "rewritten_after_end");
    CHECK(trial::parse_violation("rewritten_after_end") == Violation::RewrittenAfterEnd);
    // A failed job's log is no account of its failure once rewritten (a forged out-of-memory line).
    record.state = slurm::JobState::Failed;
    record.raw_state = "FAILED";
    record.exit_code = 1;
    e.job_output = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n";
    CHECK(trial::classify(e, limits).violation == Violation::RewrittenAfterEnd);
    record.state = slurm::JobState::NodeFail;
    record.raw_state = "NODE_FAIL";
    CHECK(trial::classify(e, limits).outcome == Outcome::NodeFailure);
}

TEST_CASE("the doctor's startup: the median of elapsed less reported, its spread, and whether it is "
          "wall-clock time") {
    CHECK_FALSE(trial::measure_startup({0.8}));
    const auto s = trial::measure_startup({0.8, 1.0, 0.9});
    REQUIRE(s);
    CHECK(s->median_s == doctest::Approx(0.9));
    CHECK(s->spread_s == doctest::Approx(0.1));
    CHECK(s->runs == 3);
    CHECK(s->wall_clock);
    auto plugin = *s;
    plugin.source = "plugin";
    const auto back = trial::startup_from_json(trial::to_json(plugin));
    REQUIRE(back);
    CHECK(back->median_s == s->median_s);
    CHECK(back->source == "plugin");
    CHECK_FALSE(trial::startup_from_json(nlohmann::json("startup")));
    // Step times that add up to more than the elapsed time are not wall-clock time: nothing to check.
    const auto simulated = trial::measure_startup({-1.1, -1.15, -1.12});
    REQUIRE(simulated);
    CHECK_FALSE(simulated->wall_clock);
    CHECK(trial::check_timing(0.01, {10.0, 0.01, "local parent"}, *simulated).empty());
}

TEST_CASE("timing: step times that cannot account for the evidence's elapsed time less startup are a "
          "violation, with the numbers") {
    const trial::Startup startup{1.0, 0.1, 5, true, "plugin"};
    const trial::TimingEvidence evidence{11.0, 0.01, "plugin (root, slurmstepd)"};
    // An honest run: 10 s of steps in 11 s with 1 s of startup.
    CHECK(trial::check_timing(10.0, evidence, startup).empty());
    // Within the tolerance: 3 * 0.1 + 1.0 (the startup may double) + 0.01 + 10% of 10 s = 2.31 s.
    CHECK(trial::check_timing(7.8, evidence, startup).empty());
    // A clock that runs at half speed claims 5 s.
    const auto why = trial::check_timing(5.0, evidence, startup);
    CHECK(why.find("add up to 5.000 s") != std::string::npos);
    CHECK(why.find("11.000 s elapsed") != std::string::npos);
    CHECK(why.find("startup 1.000 s") != std::string::npos);
    CHECK(why.find("tolerance 2.310 s") != std::string::npos);
    // Claiming more than the elapsed time allows (step times rewritten to look slow, a baseline run made to
    // lose its A/B pair) is refused too: 11 s + 0.01 s + 10% of 11 s = 12.11 s at most.
    CHECK(trial::check_timing(12.0, evidence, startup).empty());
    const auto slow = trial::check_timing(30.0, evidence, startup);
    CHECK(slow.find("add up to 30.000 s") != std::string::npos);
    CHECK(slow.find("19.000 s more than the run lasted") != std::string::npos);
    CHECK_FALSE(trial::check_timing(12.2, evidence, startup).empty());
    // A slower startup than the doctor saw (a loaded machine) is allowed up to twice its own plus its spread:
    // a run at 2.3 s startup passes, one whose steps claim 2.4 s less than they had does not.
    CHECK(trial::check_timing(8.7, evidence, startup).empty());
    CHECK_FALSE(trial::check_timing(7.6, evidence, startup).empty());
    // Slurm's accounting counts whole seconds: its resolution widens the tolerance.
    CHECK(trial::check_timing(7.5, {11.0, 1.0, "Slurm accounting"}, startup).empty());
    CHECK_FALSE(trial::check_timing(7.5, evidence, startup).empty());
}

TEST_CASE("settings: what the wrapper gave the workload against its manifest entry") {
    trial::ManifestTask task;
    task.env = {{"CHUNK", "2"}, {"STEPS", "6"}};
    task.command = {"bash", "/src/train.sh", "/build"};
    task.args = {"--threads=4"};
    task.build = "/c/builds/abc";
    task.workdir = "/c/batches/1/0";
    auto seen = trial::expected_settings(task);
    CHECK(trial::check_settings(seen, task).empty());
    // The script's defaults: a knob the wrapper never set.
    auto unset = seen;
    unset.env["CHUNK"] = std::nullopt;
    CHECK(trial::check_settings(unset, task).find("CHUNK=unset (manifest: '2')") != std::string::npos);
    auto other = seen;
    other.env["STEPS"] = "3";
    other.build = "/c/builds/base";
    const auto why = trial::check_settings(other, task);
    CHECK(why.find("STEPS='3' (manifest: '6')") != std::string::npos);
    CHECK(why.find("build '/c/builds/base'") != std::string::npos);
    auto args = seen;
    args.argv.pop_back();
    CHECK(trial::check_settings(args, task).find("argv of 3 elements") != std::string::npos);
    CHECK(trial::check_settings(std::nullopt, task).find("records no settings") != std::string::npos);
    // Round trip through result.json's "settings".
    CHECK(trial::settings_from_json(trial::to_json(unset), "t") == unset);
    CHECK_THROWS_AS(trial::settings_from_json(nlohmann::json{{"argv", 3}}, "t"), Error);
}

TEST_CASE("plugin evidence: the last run's record, read only from root's files in the spool") {
    test::TempDir d("infrarsi-evidence");
    const fs::path spool = d.path / "spool";
    trial::TrialEvidence e;
    e.source = "plugin";
    e.job = "41_3";
    e.node = "n1";
    e.start_epoch = 1000;
    e.end_epoch = 1012.5;
    e.elapsed_s = 12.5;
    e.exit_code = 0;
    e.memory_peak_bytes = 123456789;
    CHECK(trial::evidence_from_json(trial::to_json(e), "t") == e);
    // With the digests of the trial's files at the task's end; a record without them reads as before.
    auto with_files = e;
    with_files.result_file = FileDigest{true, 120, std::string(64, 'a'), ""};
    with_files.log_file = FileDigest{false, 0, "", "not a regular file"};
    CHECK(trial::evidence_from_json(trial::to_json(with_files), "t") == with_files);
    CHECK_FALSE(trial::to_json(e).contains("result_file"));
    auto bad = trial::to_json(with_files);
    bad["result_file"]["sha256"] = "forged";
    CHECK_THROWS_AS(trial::evidence_from_json(bad, "t"), Error);
    CHECK_THROWS_AS(trial::evidence_from_json(nlohmann::json{{"format", "x"}}, "t"), Error);
    CHECK_FALSE(trial::read_plugin_evidence(spool, "41_3"));

    const fs::path dir = trial::evidence_dir(spool, "41_3");
    CHECK(dir == spool / "trials" / "41");
    fs::create_directories(dir);
    fs::permissions(dir, fs::perms(0755));
    fs::permissions(spool / "trials", fs::perms(0755));
    auto write = [&](const std::string& name, const trial::TrialEvidence& x,
                     fs::perms mode = fs::perms(0644)) {
        std::ofstream(dir / name) << trial::to_json(x).dump();
        fs::permissions(dir / name, mode);
    };
    write("3.100.json", e);
    auto requeued = e;
    requeued.start_epoch = 2000;
    requeued.elapsed_s = 13;
    write("3.200.json", requeued);
    auto other_task = e;
    other_task.job = "41_4";
    write("4.100.json", other_task);
    if (::geteuid() != 0) return; // what follows needs files root owns
    auto got = trial::read_plugin_evidence(spool, "41_3");
    REQUIRE(got);
    CHECK(got->elapsed_s == 13); // the last run
    CHECK(trial::read_plugin_evidence(spool, "41_4")->job == "41_4");
    // A record others could have written is none; nor one in a directory others can write.
    auto forged = e;
    forged.start_epoch = 3000;
    forged.elapsed_s = 1;
    write("3.300.json", forged, fs::perms(0666));
    CHECK(trial::read_plugin_evidence(spool, "41_3")->elapsed_s == 13);
    REQUIRE(::chown((dir / "3.300.json").c_str(), 65534, 65534) == 0);
    fs::permissions(dir / "3.300.json", fs::perms(0644));
    CHECK(trial::read_plugin_evidence(spool, "41_3")->elapsed_s == 13);
    fs::permissions(dir, fs::perms(0777));
    CHECK_FALSE(trial::read_plugin_evidence(spool, "41_3"));
    // Names a job could plant in a spool path are refused.
    CHECK_FALSE(trial::read_plugin_evidence(spool, "../41_3"));
}

TEST_CASE("the pace of step lines: step times claimed over the time the wrapper saw pass between them") {
    auto line = [](int step, double claimed, std::optional<double> arrival, bool timed = true) {
        measure::StepSample s;
        s.step = step;
        s.step_time_s = claimed;
        s.arrival_s = arrival;
        s.timed = timed;
        return s;
    };
    // Honest: each step claims 0.19 s of the 0.2 s between its line and the one before (the first line's wait
    // holds the start-up and is left out).
    std::vector<measure::StepSample> honest;
    for (int i = 1; i <= 6; ++i)
        honest.push_back(line(i, 0.19, 3.0 + 0.2 * i));
    const auto base = trial::step_pace(honest);
    REQUIRE(base);
    CHECK(*base == doctest::Approx(0.95));
    CHECK(trial::check_pace(*base, *base).empty());
    // A clock slowed to half: the same lines, half the claims.
    auto slow = honest;
    for (auto& s : slow)
        s.step_time_s /= 2;
    const auto p = trial::step_pace(slow);
    REQUIRE(p);
    CHECK(*p == doctest::Approx(0.475));
    CHECK_FALSE(trial::check_pace(*p, *base).empty());
    // A real speed-up keeps the pace: half the claims, lines half as far apart.
    std::vector<measure::StepSample> fast;
    for (int i = 1; i <= 6; ++i)
        fast.push_back(line(i, 0.095, 3.0 + 0.1 * i));
    CHECK(trial::check_pace(*trial::step_pace(fast), *base).empty());
    // A step line every 2 steps claims per step: both steps count.
    std::vector<measure::StepSample> every2 = {line(2, 0.19, 3.4), line(4, 0.19, 3.8), line(6, 0.19, 4.2)};
    CHECK(*trial::step_pace(every2) == doctest::Approx(0.95));
    // An evaluation between two steps (its step untimed) is left out of both sides.
    auto eval = honest;
    eval[3].timed = false;
    eval[3].arrival_s = *eval[3].arrival_s + 5;
    for (std::size_t i = 4; i < eval.size(); ++i)
        eval[i].arrival_s = *eval[i].arrival_s + 5;
    CHECK(*trial::step_pace(eval) == doctest::Approx(0.95));
    // Lines that all arrived at once (a buffered log) or without arrival times: nothing to say.
    std::vector<measure::StepSample> burst;
    for (int i = 1; i <= 6; ++i)
        burst.push_back(line(i, 0.19, 4.0));
    CHECK_FALSE(trial::step_pace(burst));
    CHECK_FALSE(trial::step_pace({line(1, 0.2, std::nullopt), line(2, 0.2, std::nullopt)}));
    // Step times rewritten to three times what they were (the arrival times are the wrapper's): the pace
    // triples, above kPaceCeiling of the baseline's.
    auto tripled = honest;
    for (auto& s : tripled)
        s.step_time_s *= 3;
    const auto t = trial::step_pace(tripled);
    REQUIRE(t);
    CHECK(*t == doctest::Approx(2.85));
    const auto why = trial::check_pace(*t, *base);
    CHECK(why.find("above 143% of the baseline's pace") != std::string::npos);
    // A candidate that drops untimed work raises its pace, within the ceiling: 0.19 s claimed of 0.15 s.
    std::vector<measure::StepSample> leaner;
    for (int i = 1; i <= 6; ++i)
        leaner.push_back(line(i, 0.19, 3.0 + 0.15 * i));
    CHECK(trial::check_pace(*trial::step_pace(leaner), *base).empty());
    // A baseline whose step times claim more than passed (a simulated clock, pace 3.0): its runs' paces are
    // start-up noise, but they claim more than passed too; a wall-clock run against it (the baseline's
    // results inflated, so that an honest candidate would look 3x faster) is refused: the check never
    // switches off.
    CHECK(trial::check_pace(3.1, 3.0).empty());
    CHECK(trial::check_pace(40.0, 3.0).empty());
    const auto wall_against_simulated = trial::check_pace(0.95, 3.0);
    CHECK(wall_against_simulated.find("the baseline's step times are not wall-clock time") !=
          std::string::npos);
    CHECK(trial::check_pace(0.1, 0).empty()); // no baseline pace: nothing to hold it to
}

TEST_CASE("a step line's arrival is the wrapper's clock, never a time the job printed") {
    const std::string text = "start\n"
                             "INFRARSI_STEP {\"step\":1,\"loss\":2.0,\"step_time_s\":0.1,\"arrival_s\":99}\n"
                             "INFRARSI_STEP {\"step\":2,\"loss\":1.9,\"step_time_s\":0.1}\n";
    const std::vector<double> times = {0.5, 0.7, 0.8};
    const auto log = measure::parse_log(text, measure::LogFormat{}, &times);
    REQUIRE(log.steps.size() == 2);
    CHECK(log.steps[0].arrival_s == doctest::Approx(0.7));
    CHECK(log.steps[1].arrival_s == doctest::Approx(0.8));
    // Read without the wrapper's times: no arrival, whatever the line says.
    const auto untimed = measure::parse_log(text, measure::LogFormat{}, nullptr);
    CHECK_FALSE(untimed.steps[0].arrival_s);
}
