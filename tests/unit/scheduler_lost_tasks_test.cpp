// Tasks a scheduler forgot (scheduler/lost_tasks.hpp), on a clock the test moves.
#include "scheduler/lost_tasks.hpp"

#include <doctest/doctest.h>

using namespace infrarsi;
using namespace std::chrono_literals;
using scheduler::LostTasks;
using slurm::JobRecord;
using slurm::JobState;

namespace {
JobRecord task(int index, JobState state = JobState::Running) {
    JobRecord r;
    r.job_id = "40_" + std::to_string(index);
    r.array_job_id = "40";
    r.array_task_id = index;
    r.state = state;
    return r;
}
JobRecord pending_range(const std::string& range) {
    JobRecord r;
    r.job_id = "40_[" + range + "]";
    r.state = JobState::Pending;
    return r;
}
} // namespace

TEST_CASE("a task missing from every answer for longer than the grace is lost, once") {
    LostTasks lost(0, 3, 120s);
    const auto t0 = LostTasks::clock::time_point{} + 1000s;
    // The reproducer's shape: tasks 0 and 2 ran; task 1 was purged when slurmctld restarted.
    const std::vector<JobRecord> answer{task(0, JobState::Completed), task(2)};
    CHECK(lost.any_missing(answer));
    CHECK(lost.observe(answer, true, t0).empty());
    CHECK(lost.observe(answer, true, t0 + 119s).empty());
    CHECK(lost.observe(answer, true, t0 + 121s) == std::vector<int>{1});
    CHECK(lost.observe(answer, true, t0 + 300s).empty()); // said once
    CHECK_FALSE(lost.any_missing(answer));
}

TEST_CASE("a scheduler that does not answer proves nothing: the grace starts again once it does") {
    LostTasks lost(0, 2, 120s);
    const auto t0 = LostTasks::clock::time_point{} + 1000s;
    const std::vector<JobRecord> none;
    CHECK(lost.observe(none, true, t0).empty());
    CHECK(lost.observe(none, false, t0 + 100s).empty()); // slurmctld down
    CHECK(lost.observe(none, true, t0 + 130s).empty());  // back: a new grace from here
    CHECK(lost.observe(none, true, t0 + 249s).empty());
    CHECK(lost.observe(none, true, t0 + 251s) == std::vector<int>{0, 1});
}

TEST_CASE("a task seen again is not lost, pending ranges and a plain job's record cover their tasks") {
    LostTasks lost(4, 4, 60s); // tasks 4..7 of a batch's second array
    const auto t0 = LostTasks::clock::time_point{} + 1000s;
    CHECK(lost.observe({task(4)}, true, t0).empty());
    CHECK(lost.observe({task(4), pending_range("5-7%2")}, true, t0 + 50s).empty());
    CHECK_FALSE(lost.any_missing({task(4), pending_range("5-7%2")}));
    CHECK_FALSE(lost.any_missing({pending_range("4,5-6"), task(7)}));
    CHECK(lost.observe({task(4)}, true, t0 + 100s).empty()); // 5..7 absent again: a new grace
    CHECK(lost.observe({task(4)}, true, t0 + 161s) == std::vector<int>{5, 6, 7});
    // A range it cannot read is taken to cover every task: never a false loss.
    LostTasks other(0, 2, 1s);
    CHECK_FALSE(other.any_missing({pending_range("x-y")}));
    CHECK(*scheduler::record_indices(pending_range("0-2%1")) == std::set<int>{0, 1, 2});
    JobRecord plain;
    plain.job_id = "41";
    CHECK(*scheduler::record_indices(plain) == std::set<int>{0});
}
