// The user's jobs a trial may have submitted itself (slurm/user_jobs.hpp): read from the fields Slurm alone
// writes (id, submit time, state; never the owner's job name); the campaign's own jobs and those outside the
// trial's time left out.
#include "slurm/user_jobs.hpp"

#include <doctest/doctest.h>

using namespace infrarsi;

TEST_CASE("the user's jobs are read by id, submit time and state only: a job's name cannot forge one") {
    // What squeue would print if it printed names: a name with a newline in it makes a line of its own.
    const std::string out = "41|2026-12-06T07:30:00|RUNNING\n"
                            "42_3|2026-12-06T07:30:05|PENDING\n"
                            "42.batch|2026-12-06T07:30:05|COMPLETED\n"
                            "garbage line\n"
                            "43|Unknown|PENDING\n"
                            "44|2026-12-06T07:31:00|COMPLETED|x\n"
                            "45|2026-12-06T07:31:01|RUNNING";
    const auto jobs = slurm::parse_user_jobs(out);
    REQUIRE(jobs.size() == 3);
    CHECK(jobs[0].job_id == "41");
    CHECK(jobs[0].state == "RUNNING");
    CHECK(jobs[1].job_id == "42_3");
    CHECK(jobs[1].state == "PENDING");
    CHECK(jobs[1].submitted == "2026-12-06T07:30:05");
    CHECK(jobs[1].submitted_epoch - jobs[0].submitted_epoch == doctest::Approx(5));
    CHECK(jobs[2].job_id == "45"); // a line with a fourth field is not squeue's: skipped
}

TEST_CASE("jobs the campaign submitted, and jobs submitted outside the window, are not a trial's") {
    const auto jobs = slurm::parse_user_jobs("100_0|2026-12-06T07:30:00|RUNNING\n"
                                             "100_1|2026-12-06T07:30:00|RUNNING\n"
                                             "101|2026-12-06T07:30:10|RUNNING\n"
                                             "102_0|2026-12-06T07:30:11|PENDING\n"
                                             "102_1|2026-12-06T07:30:11|PENDING\n"
                                             "103|2026-12-06T08:00:00|PENDING\n");
    REQUIRE(jobs.size() == 6);
    const double t0 = jobs[0].submitted_epoch;
    const auto theirs = slurm::jobs_not_submitted_by(jobs, {"100"}, t0, t0 + 60);
    REQUIRE(theirs.size() == 2);
    CHECK(theirs[0].job_id == "101");
    CHECK(theirs[1].job_id == "102_0"); // an array once
    CHECK(slurm::jobs_not_submitted_by(jobs, {"100", "101", "102"}, t0, t0 + 60).empty());
}
