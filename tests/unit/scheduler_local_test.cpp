// The local scheduler on this machine: real child processes, real limits, no Slurm.
#include "scheduler/memory_cgroup.hpp"
#include "scheduler/scheduler.hpp"
#include "util/error.hpp"

#include "test_support.hpp"

#include <doctest/doctest.h>
#include <sys/stat.h>

#include <algorithm>
#include <csignal>
#include <fmt/format.h>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace infrarsi;
using slurm::JobState;
using test::TempDir;
using namespace std::chrono_literals;

namespace {

std::string read(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

// Running or sleeping, not a zombie and not gone.
bool alive(pid_t pid) {
    const std::string stat = read("/proc/" + std::to_string(pid) + "/stat");
    const auto close = stat.rfind(')');
    return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

// An array job of `tasks` tasks running `body` (bash) with INFRARSI_TRIAL_INDEX set.
scheduler::ArrayJob job(const TempDir& d, const std::string& body, int tasks = 1) {
    const fs::path script = d.path / "task.sh";
    std::ofstream(script) << "#!/bin/bash\nset -e\n" << body << "\n";
    scheduler::ArrayJob j;
    j.name = "test-job";
    j.script = script;
    j.workdir = d.path;
    j.output = (d.path / "out-%A_%a.txt").string();
    j.tasks = tasks;
    j.env = {{"MARK", "from-env"}};
    j.mem_bytes = 1LL << 30;
    j.time_limit_s = 60;
    return j;
}

std::vector<slurm::JobRecord> run(scheduler::Scheduler& s, const scheduler::ArrayJob& j,
                                  std::string* id = nullptr) {
    const auto job = s.submit_held(j);
    if (id) *id = job;
    s.release(job);
    return s.wait(job, 60s, 50ms);
}

} // namespace

TEST_CASE("local: an array runs every task once, one at a time by default, each with its index, environment "
          "and output file") {
    TempDir d;
    auto s = scheduler::local_scheduler(d.path / "jobs");
    CHECK(s->name() == "local");
    std::string id;
    auto j = job(d,
                 "echo \"$INFRARSI_TRIAL_INDEX $MARK ${SLURM_JOB_ID:-none}\"\n"
                 "echo \"start $INFRARSI_TRIAL_INDEX\" >> order; sleep 0.2; echo \"end "
                 "$INFRARSI_TRIAL_INDEX\" >> order",
                 3);
    ::setenv("SLURM_JOB_ID", "999", 1); // the orchestrator's own job: not the trial's
    const auto records = run(*s, j, &id);
    ::unsetenv("SLURM_JOB_ID");
    REQUIRE(records.size() == 3);
    for (int i = 0; i < 3; ++i) {
        CHECK(records[i].state == JobState::Completed);
        CHECK(records[i].array_task_id == i);
        CHECK(records[i].job_id == id + "_" + std::to_string(i));
        CHECK(records[i].elapsed_s > 0.1);
        CHECK(read(d.path / ("out-" + id + "_" + std::to_string(i) + ".txt")) ==
              std::to_string(i) + " from-env none\n");
    }
    CHECK(read(d.path / "order") == "start 0\nend 0\nstart 1\nend 1\nstart 2\nend 2\n");
}

TEST_CASE("local: nothing runs while held, a second submission of the same name cancels the held one") {
    TempDir d;
    auto s = scheduler::local_scheduler(d.path / "jobs");
    const auto j = job(d, "touch ran");
    const auto first = s->submit_held(j);
    auto records = s->wait(first, 1s, 50ms);
    REQUIRE(records.size() == 1);
    CHECK(records[0].state == JobState::Pending);
    CHECK_FALSE(fs::exists(d.path / "ran"));

    const auto second = s->submit_held(j);
    CHECK(second != first);
    CHECK(s->wait(first, 1s, 50ms)[0].state == JobState::Cancelled);
    s->release(second);
    CHECK(s->wait(second, 30s, 50ms)[0].state == JobState::Completed);
    CHECK(fs::exists(d.path / "ran"));
}

TEST_CASE("local: a failing task is FAILED with its exit code, a task over the memory limit is killed out of "
          "memory by the watchdog, one over the time limit times out") {
    TempDir d;
    // The watchdog, even where a cgroup could hold the limit (the next test covers the cgroup).
    auto s = scheduler::local_scheduler(d.path / "jobs", scheduler::LocalMemoryLimit::Watchdog);
    CHECK(s->description().find("a watchdog") != std::string::npos);
    auto r = run(*s, job(d, "exit 3"));
    CHECK(r[0].state == JobState::Failed);
    CHECK(r[0].exit_code == 3);

    // A child of the task (as a workload is of the trial wrapper) writes 1 GiB against a 64 MiB limit.
    auto hog = job(d, "python3 -c 'import time; a = b\"x\" * (1 << 30); time.sleep(30)'");
    hog.mem_bytes = 64LL << 20;
    r = run(*s, hog);
    CHECK(r[0].state == JobState::OutOfMemory);
    REQUIRE(r[0].max_rss_bytes);
    CHECK(*r[0].max_rss_bytes > (64LL << 20));

    auto slow = job(d, "sleep 30");
    slow.time_limit_s = 1;
    r = run(*s, slow);
    CHECK(r[0].state == JobState::Timeout);
    CHECK(r[0].elapsed_s < 10);
}

TEST_CASE("local: where a memory cgroup (v2, or v1) may be made, the kernel holds the memory limit: a task "
          "over it is "
          "recorded out of memory, one under it completes, and the cgroups are removed") {
    std::string why;
    const auto cgroups = scheduler::MemoryCgroups::find(&why);
    TempDir d;
    auto s = scheduler::local_scheduler(d.path / "jobs");
    if (!cgroups) {
        // Said once, as `infrarsi run` says it: which limit, and why not the cgroup.
        CHECK(s->description().find("a watchdog") != std::string::npos);
        CHECK(s->description().find(why) != std::string::npos);
        MESSAGE("skipped: no memory cgroup may be made here: " << why);
        return;
    }
    CHECK(s->description().find(fmt::format("a cgroup v{} per trial under {}", cgroups->version(),
                                            cgroups->parent().string())) != std::string::npos);
    // Fast enough that a watchdog sampling every 200 ms could see it only after the fact; the kernel stops
    // it at the limit, whatever its speed.
    auto hog = job(d, "python3 -c 'a = b\"x\" * (1 << 30)'; echo survived");
    hog.mem_bytes = 64LL << 20;
    auto r = run(*s, hog);
    CHECK(r[0].state == JobState::OutOfMemory);
    CHECK(read(d.path / fmt::format("out-{}_0.txt", r[0].array_job_id)).find("survived") ==
          std::string::npos);
    auto fits = job(d, "python3 -c 'a = b\"x\" * (16 << 20)'");
    fits.mem_bytes = 256LL << 20;
    r = run(*s, fits);
    CHECK(r[0].state == JobState::Completed);
    REQUIRE(r[0].max_rss_bytes);
    CHECK(*r[0].max_rss_bytes >= (16LL << 20));
    // No trial cgroup of this process is left behind.
    for (const auto& e : fs::directory_iterator(cgroups->parent()))
        CHECK(e.path().filename().string().rfind(fmt::format("infrarsi-{}-", ::getpid()), 0) != 0);
}

// The reproducer: a trial's `setsid` child left its session, and the watchdog (which summed the session)
// let it take 708 MiB under a 300M limit, outcome ok. A double fork makes it an orphan too: its parent ends,
// and it is reparented to the scheduler (a child subreaper) instead of init.
TEST_CASE("local: a setsid, double-forked child over the memory limit is killed out of memory, with the "
          "watchdog and with a cgroup, and no process of the trial outlives it") {
    for (const auto limit : {scheduler::LocalMemoryLimit::Watchdog, scheduler::LocalMemoryLimit::Auto}) {
        TempDir d;
        auto s = scheduler::local_scheduler(d.path / "jobs", limit);
        CAPTURE(s->description());
        auto hog = job(d, "( setsid python3 -c 'import os, time\n"
                          "open(\"hog.pid\", \"w\").write(str(os.getpid()))\n"
                          "a = b\"x\" * (600 << 20)\n"
                          "time.sleep(60)' & )\n"
                          "sleep 60");
        hog.mem_bytes = 300LL << 20;
        const auto r = run(*s, hog);
        REQUIRE(r.size() == 1);
        CHECK(r[0].state == JobState::OutOfMemory);
        CHECK(r[0].elapsed_s < 30);
        std::string pid;
        std::ifstream(d.path / "hog.pid") >> pid;
        REQUIRE(!pid.empty());
        CHECK_FALSE(alive(std::stoi(pid)));
    }
}

TEST_CASE("local: processes a trial leaves behind (setsid, double fork) end with it") {
    for (const auto limit : {scheduler::LocalMemoryLimit::Watchdog, scheduler::LocalMemoryLimit::Auto}) {
        TempDir d;
        auto s = scheduler::local_scheduler(d.path / "jobs", limit);
        CAPTURE(s->description());
        // The leader ends at once; what it started lives on unless the scheduler ends it.
        const auto r = run(*s, job(d, "( setsid bash -c 'echo $$ > left.pid; exec sleep 300' & )\n"
                                      "while [ ! -s left.pid ]; do sleep 0.05; done"));
        REQUIRE(r.size() == 1);
        CHECK(r[0].state == JobState::Completed);
        std::string pid;
        std::ifstream(d.path / "left.pid") >> pid;
        REQUIRE(!pid.empty());
        CHECK_FALSE(alive(std::stoi(pid)));
    }
}

TEST_CASE("local: cancelling a job stops its running task and the ones not started") {
    TempDir d;
    auto s = scheduler::local_scheduler(d.path / "jobs");
    const auto id = s->submit_held(job(d, "sleep 30", 2));
    s->release(id);
    auto r = s->wait(id, 1s, 50ms);
    CHECK(r[0].state == JobState::Running);
    s->cancel(id);
    r = s->wait(id, 10s, 50ms);
    CHECK(r[0].state == JobState::Cancelled);
    CHECK(r[1].state == JobState::Cancelled);
}

TEST_CASE("local: a task left running by an orchestrator that died is stopped and run again by the next") {
    TempDir d;
    const auto j = job(d, "echo $$ >> pids; sleep 30", 1);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        // The first orchestrator: starts the task, then dies without cleaning up.
        auto s = scheduler::local_scheduler(d.path / "jobs");
        const auto id = s->submit_held(j);
        s->release(id);
        s->wait(id, 1s, 50ms);
        ::_exit(0);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    REQUIRE(WIFEXITED(status));
    std::string first_pid;
    std::ifstream(d.path / "pids") >> first_pid;
    REQUIRE(!first_pid.empty());
    CHECK(alive(std::stoi(first_pid))); // the orphan still runs

    std::ofstream(j.script) << "#!/bin/bash\necho $$ >> pids\n"; // the rerun ends at once
    auto s = scheduler::local_scheduler(d.path / "jobs");
    const auto r = s->wait("1", 30s, 50ms);
    REQUIRE(r.size() == 1);
    CHECK(r[0].state == JobState::Completed);
    // The orphan was stopped (a zombie until whoever adopted it reaps it).
    bool gone = false;
    for (int i = 0; i < 100 && !gone; ++i, ::usleep(20000))
        gone = !alive(std::stoi(first_pid));
    CHECK(gone);
    const std::string pids = read(d.path / "pids");
    CHECK(std::count(pids.begin(), pids.end(), '\n') == 2);
}

TEST_CASE("local: a multi-node contract is refused, naming what to do") {
    TempDir d;
    auto s = scheduler::local_scheduler(d.path / "jobs");
    auto j = job(d, "true");
    j.nodes = 2;
    CHECK_THROWS_WITH_AS(s->submit_held(j), doctest::Contains("--scheduler slurm"), Error);
    CHECK_THROWS_WITH_AS(scheduler::make_scheduler("pbs", d.path), doctest::Contains("slurm, local or auto"),
                         Error);
}

TEST_CASE("auto takes the local scheduler where Slurm's commands are not even installed, and says why") {
    TempDir d;
    const std::string path = ::getenv("PATH");
    ::setenv("PATH", d.path.c_str(), 1); // an empty directory: no scontrol
    std::string why;
    const auto s = scheduler::make_scheduler("auto", d.path / "jobs", &why);
    ::setenv("PATH", path.c_str(), 1);
    CHECK(s->name() == "local");
    CHECK(why.find("Slurm does not answer") != std::string::npos);
    CHECK(why.find("scontrol") != std::string::npos);
}

TEST_CASE("local: hostile state on disk: a foreign end record runs the task again, a broken job description "
          "and a bad task id are clear errors") {
    TempDir d;
    auto s = scheduler::local_scheduler(d.path / "jobs");
    const auto id = s->submit_held(job(d, "echo ran >> runs"));
    std::ofstream(d.path / "jobs" / id / "0.json") << R"({"state": 7, "exit_code": "x"})";
    s->release(id);
    const auto r = s->wait(id, 30s, 50ms);
    CHECK(r[0].state == JobState::Completed);
    CHECK(read(d.path / "runs") == "ran\n");
    std::ofstream(d.path / "jobs" / id / "job.json") << R"({"tasks": -1})";
    CHECK_THROWS_WITH_AS(s->wait(id, 1s, 50ms), doctest::Contains("'tasks' must be an integer"), Error);
    CHECK_THROWS_AS(s->cancel(id + "_x"), Error);
    CHECK_THROWS_AS(s->cancel("../1"), Error);
}

TEST_CASE("local: a FIFO or a deeply nested file in place of a task's end record neither blocks nor crashes "
          "the scheduler: the task runs again") {
    // The task runs as the same user and can reach the scheduler's directory: what it leaves there is read
    // bounded (util/bounded_json.hpp): a FIFO is no record, JSON nested a million levels deep is no record.
    for (const bool fifo : {true, false}) {
        TempDir d;
        auto s = scheduler::local_scheduler(d.path / "jobs");
        const auto id = s->submit_held(job(d, "echo ran >> runs"));
        const auto end = d.path / "jobs" / id / "0.json";
        if (fifo)
            REQUIRE(::mkfifo(end.c_str(), 0600) == 0);
        else
            std::ofstream(end) << std::string(1'000'000, '[') << std::string(1'000'000, ']');
        s->release(id);
        const auto r = s->wait(id, 30s, 50ms);
        CHECK(r[0].state == JobState::Completed);
        CHECK(read(d.path / "runs") == "ran\n");
    }
}

TEST_CASE("local: an array of a batch runs its own index range, and its sbatch-option knobs reach the job as "
          "the environment Slurm would set, an option with no meaning here is refused by name") {
    TempDir d;
    auto s = scheduler::local_scheduler(d.path / "jobs");
    auto j = job(d,
                 "echo \"$INFRARSI_TRIAL_INDEX $SLURM_NTASKS_PER_NODE $SLURM_NTASKS $SLURM_CPUS_PER_TASK "
                 "${SLURM_GPUS_PER_NODE:-none}\"",
                 2);
    j.first_index = 3;
    j.ntasks_per_node = 1;
    j.cpus_per_task = 1;
    j.options = {"--ntasks-per-node=2", "--gpus-per-node=4"};
    std::string id;
    const auto records = run(*s, j, &id);
    REQUIRE(records.size() == 2);
    for (int i : {3, 4}) {
        const auto& r = records[static_cast<std::size_t>(i - 3)];
        CHECK(r.state == JobState::Completed);
        CHECK(r.array_task_id == i);
        CHECK(read(d.path / ("out-" + id + "_" + std::to_string(i) + ".txt")) ==
              std::to_string(i) + " 2 2 1 4\n");
    }
    for (const char* bad : {"--exclusive", "--constraint=gpu80", "--hint=nomultithread"}) {
        CAPTURE(bad);
        auto k = job(d, "true");
        k.options = {bad};
        CHECK_THROWS_WITH_AS(s->submit_held(k), doctest::Contains("has no meaning outside Slurm"), Error);
        CHECK_THROWS_WITH_AS(s->submit_held(k), doctest::Contains("--scheduler slurm"), Error);
    }
}
