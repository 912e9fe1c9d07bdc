#include "trial/outcome.hpp"
#include "util/error.hpp"

#include <doctest/doctest.h>

using namespace infrarsi;
using trial::Outcome;
using trial::Violation;

namespace {

slurm::JobRecord record(slurm::JobState state, int exit_code = 0, int exit_signal = 0) {
    slurm::JobRecord r;
    r.job_id = "7_1";
    r.state = state;
    r.raw_state = slurm::to_string(state);
    r.exit_code = exit_code;
    r.exit_signal = exit_signal;
    r.node_list = "n2";
    return r;
}

const trial::Limits limits{"300M", 300LL << 20, "00:05:00", 8, "infrarsi (INFRARSI_STEP)"};

measure::TrialSummary summary() {
    measure::TrialSummary s;
    s.steady_step_s = {0.5, 0.48, 0.52};
    return s;
}

} // namespace

TEST_CASE("every outcome and violation has one name that reads back as itself") {
    for (const auto& [o, name] : trial::outcome_names.entries) {
        CHECK(trial::to_string(o) == name);
        CHECK(trial::parse_outcome(name) == o);
    }
    for (const auto& [v, name] : trial::violation_names.entries)
        CHECK(trial::parse_violation(name) == v);
    CHECK(trial::to_string(Outcome::OutOfMemory) == "oom"); // the name stored campaigns and tables use
    CHECK_THROWS_WITH_AS(trial::parse_outcome("exploded"), doctest::Contains("ok, oom, timeout"), Error);
}

TEST_CASE("a completed trial is held to the contract: result file, every step, the loss invariant") {
    const auto rec = record(slurm::JobState::Completed);
    const auto s = summary();
    trial::Evidence e;
    e.record = &rec;
    e.has_result = true;
    e.steps = 8;
    e.summary = &s;

    auto v = trial::classify(e, limits);
    CHECK(v.outcome == Outcome::Ok);
    CHECK(v.violation == Violation::None);
    CHECK(v.detail == "0.5000 s/step (95% CI 0.4800-0.5200)");

    e.loss_violation = "step 3 differs by 4%";
    v = trial::classify(e, limits);
    CHECK(v.outcome == Outcome::ContractViolation);
    CHECK(v.violation == Violation::LossInvariant);

    e.steps = 5;
    v = trial::classify(e, limits);
    CHECK(v.violation == Violation::MissingSteps);
    CHECK(v.detail == "missing step lines: 5 of 8 in format infrarsi (INFRARSI_STEP)");

    e.has_result = false;
    CHECK(trial::classify(e, limits).violation == Violation::NoResult);

    // Enough steps but none left after warm-up to measure: a violation, never an "ok" without a time.
    e = {};
    e.record = &rec;
    e.has_result = true;
    e.steps = 8;
    v = trial::classify(e, limits);
    CHECK(v.outcome == Outcome::ContractViolation);
    CHECK(v.violation == Violation::MissingSteps);
}

TEST_CASE("Slurm's verdict decides what only Slurm knows, whatever the trial's own files say") {
    const auto s = summary();
    trial::Evidence e;
    e.has_result = true;
    e.steps = 8;
    e.summary = &s;

    const auto oom = record(slurm::JobState::OutOfMemory);
    e.record = &oom;
    auto v = trial::classify(e, limits);
    CHECK(v.outcome == Outcome::OutOfMemory);
    CHECK(v.detail == "peak memory > limit 300M (300 MiB): killed out of memory after 8 steps");

    // FAILED with slurmstepd's oom-kill line in the output: out of memory, and the detail says which witness.
    const auto failed = record(slurm::JobState::Failed, 1);
    e.record = &failed;
    e.job_output = "step 1\nslurmstepd: error: Detected 1 oom-kill event(s) in StepId=7.0. Some of your "
                   "processes may have been killed by the cgroup out-of-memory handler.\n";
    v = trial::classify(e, limits);
    CHECK(v.outcome == Outcome::OutOfMemory);
    CHECK(v.detail.find("the job output reports an oom-kill event") != std::string::npos);

    // The workload printing the words is not Slurm's report: a crash.
    e.job_output = "my model: error: Detected 1 oom-kill event\n";
    e.log_tail = "Traceback ...";
    v = trial::classify(e, limits);
    CHECK(v.outcome == Outcome::Crash);
    CHECK(v.detail == "exit 1 signal 0 (failed): Traceback ...");

    const auto timeout = record(slurm::JobState::Timeout);
    e.record = &timeout;
    CHECK(trial::classify(e, limits).outcome == Outcome::Timeout);

    const auto node = record(slurm::JobState::NodeFail);
    e.record = &node;
    v = trial::classify(e, limits);
    CHECK(v.outcome == Outcome::NodeFailure);
    CHECK(trial::says_nothing(v.outcome));

    auto cancelled = record(slurm::JobState::Cancelled);
    cancelled.restarts = 2;
    e.record = &cancelled;
    v = trial::classify(e, limits);
    CHECK(v.outcome == Outcome::Cancelled);
    CHECK(trial::says_nothing(v.outcome));
    CHECK(v.detail.find("re-ran this task 2 time(s)") != std::string::npos);

    CHECK_FALSE(trial::says_nothing(Outcome::Crash));
    CHECK_FALSE(trial::says_nothing(Outcome::OutOfMemory));
}
