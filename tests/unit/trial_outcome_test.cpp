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

    // The workload printing the words is not Slurm's report: a crash, with the log's tail when the log names
    // no reason, else the reason (the rank's exception, not the launcher's footer).
    e.job_output = "my model: error: Detected 1 oom-kill event\n";
    e.log_tail = "Traceback ...";
    v = trial::classify(e, limits);
    CHECK(v.outcome == Outcome::Crash);
    CHECK(v.detail == "exit 1 signal 0 (failed): Traceback ...");
    e.job_output = "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
                   "ValueError: bad shape\n";
    v = trial::classify(e, limits);
    CHECK(v.outcome == Outcome::Crash);
    CHECK(v.detail.find("ValueError: bad shape") != std::string::npos);

    // A GPU's out-of-memory in the log: out of memory, said to be the GPU's, with the allocator's numbers.
    e.job_output =
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 79.15 GiB of which 1.23 GiB is free. Of the allocated memory 75.10 GiB is "
        "allocated by PyTorch, and 1.20 GiB is reserved by PyTorch but unallocated.\n";
    v = trial::classify(e, limits);
    CHECK(v.outcome == Outcome::OutOfMemory);
    CHECK(v.detail.rfind("GPU memory ran out after 8 steps", 0) == 0);
    REQUIRE(v.log);
    CHECK(v.log->signal == trial::LogSignal::GpuOom);
    CHECK(*v.log->first->requested_bytes == 2.0 * (1ull << 30));
    const auto stored = trial::to_json(*v.log); // what ingest keeps in the trial's measurements
    CHECK(stored["signal"] == "gpu_oom");
    CHECK(stored["first"]["gpu"] == 0);
    CHECK(stored["first"]["source"] == "workload");

    // An NCCL timeout, then an out-of-memory line: a crash of the collective, not this candidate's memory.
    e.job_output =
        "[rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
        "600012 milliseconds before timing out.\n"
        "RuntimeError: CUDA out of memory. Tried to allocate 512.00 MiB (GPU 1; 10.76 GiB total "
        "capacity; 9.20 GiB already allocated; 200.56 MiB free; 9.45 GiB reserved in total by "
        "PyTorch)\n";
    v = trial::classify(e, limits);
    CHECK(v.outcome == Outcome::Crash);
    REQUIRE(v.log);
    CHECK(v.log->signal == trial::LogSignal::NcclTimeout);

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

TEST_CASE("a requeued task whose re-run was killed before its first step is a node failure, not a crash") {
    trial::Evidence e;
    auto killed = record(slurm::JobState::Failed, 0, 9);
    killed.restarts = 1;
    e.record = &killed;
    auto v = trial::classify(e, limits);
    CHECK(v.outcome == Outcome::NodeFailure);
    CHECK(trial::says_nothing(v.outcome));
    CHECK(v.detail.find("re-ran this task 1 time(s)") != std::string::npos);

    // The same kill of a run that printed steps is the run's own: a crash, counted.
    e.steps = 3;
    CHECK(trial::classify(e, limits).outcome == Outcome::Crash);
    // And of a run never requeued.
    e.steps = 0;
    killed.restarts = 0;
    CHECK(trial::classify(e, limits).outcome == Outcome::Crash);
    // A requeued run that exited with a code (no signal) failed on its own.
    killed.restarts = 1;
    killed.exit_signal = 0;
    killed.exit_code = 1;
    CHECK(trial::classify(e, limits).outcome == Outcome::Crash);
}
