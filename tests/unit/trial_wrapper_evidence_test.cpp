// The trial wrapper as evidence (trial/exec.cpp): it is a child subreaper, so a process the workload leaves
// behind to rewrite result.json later is killed before the result is written; it measures the output it
// received, not the log file the workload could rewrite; and it records the settings it gave the workload.
#include "trial/exec.hpp"
#include "trial/manifest.hpp"
#include "trial/proof.hpp"
#include "trial/result.hpp"

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace infrarsi;
using test::TempDir;

namespace {

trial::Manifest one_task(const TempDir& tmp, std::vector<std::string> command) {
    trial::Manifest m;
    m.campaign = "c1";
    m.knobs = {{"CHUNK", std::vector<std::string>{"1", "2"}}};
    trial::ManifestTask t;
    t.index = 0;
    t.trial_id = "1";
    t.env = {{"CHUNK", "2"}};
    t.command = std::move(command);
    t.args = {"--x=1"};
    t.build = (tmp.path / "build").string();
    t.workdir = (tmp.path / "0").string();
    t.result = (tmp.path / "0/result.json").string();
    t.log = (tmp.path / "0/log.txt").string();
    m.tasks = {t};
    trial::write_manifest(tmp.path / "manifest.json", m);
    return m;
}

} // namespace

TEST_CASE("the trial wrapper kills what the workload left behind before it writes result.json") {
    TempDir tmp;
    // A daemon (its own session, output closed) that waits for the wrapper's result, then rewrites it.
    const auto m =
        one_task(tmp, {"bash", "-c",
                       "echo 'INFRARSI_STEP {\"step\":1,\"loss\":1,\"step_time_s\":0.5}'; "
                       "setsid bash -c 'while [ ! -e result.json ]; do sleep 0.01; done; sleep 0.2; "
                       "echo forged >result.json; touch forged' </dev/null >/dev/null 2>&1 & "
                       "echo $! >daemon.pid; exit 0"});
    REQUIRE(trial::execute(tmp.path / "manifest.json", 0) == 0);
    const auto r = trial::read_result(tmp.path / "0/result.json");
    REQUIRE(r);
    CHECK(r->leftover_processes_killed >= 1);
    // Had the daemon lived it would have rewritten the file within 0.2 s of its writing: give it 2 s.
    std::this_thread::sleep_for(std::chrono::seconds(2));
    CHECK_FALSE(fs::exists(tmp.path / "0/forged"));
    CHECK(trial::read_result(tmp.path / "0/result.json")->trial_id == "1");
    std::ifstream pid_in(tmp.path / "0/daemon.pid");
    int pid = 0;
    pid_in >> pid;
    REQUIRE(pid > 0);
    CHECK_FALSE(fs::exists(fs::path("/proc") / std::to_string(pid)));
    // The settings it gave the workload are its manifest entry's.
    REQUIRE(r->settings);
    CHECK(trial::check_settings(r->settings, m.tasks[0]).empty());
    CHECK(r->settings->env.at("CHUNK") == "2");
    CHECK(r->settings->argv.back() == "--x=1");
}

TEST_CASE("the trial wrapper measures the output it received, not a log the workload rewrote") {
    TempDir tmp;
    one_task(tmp, {"bash", "-c",
                   "echo 'INFRARSI_STEP {\"step\":1,\"loss\":1,\"step_time_s\":0.5}'; sleep 0.1; "
                   "printf 'INFRARSI_STEP {\"step\":1,\"loss\":1,\"step_time_s\":0.001}\\n' >log.txt"});
    REQUIRE(trial::execute(tmp.path / "manifest.json", 0) == 0);
    const auto r = trial::read_result(tmp.path / "0/result.json");
    REQUIRE(r);
    REQUIRE(r->steps.steps.size() == 1);
    CHECK(r->steps.steps[0].step_time_s == 0.5);
}

TEST_CASE(
    "a campaign's trial sees its own trial directory and sandbox (read-only), not the doctor's log, another "
    "trial's output or the campaign database") {
    TempDir tmp;
    const fs::path c = tmp.path / "campaign";
    fs::create_directories(c / "batches/1/0");
    fs::create_directories(c / "batches/1/1");
    fs::create_directories(c / "batches/0/0");
    fs::create_directories(c / "sandboxes/ab12/build");
    fs::create_directories(c / "sandboxes/cd34/build");
    std::ofstream(c / "campaign.db") << "db";
    std::ofstream(c / "batches/0/0/log.txt")
        << "INFRARSI_STEP {\"step\":1,\"loss\":0.123456,\"step_time_s\":1}\n";
    std::ofstream(c / "batches/1/1/log.txt") << "other trial\n";
    std::ofstream(c / "sandboxes/ab12/build/bin") << "mine\n";
    trial::Manifest m;
    m.campaign = "c1";
    trial::ManifestTask t;
    t.trial_id = "5";
    t.command = {"bash", "-c",
                 "for f in " + c.string() + "/campaign.db " + c.string() + "/batches/0/0/log.txt " +
                     c.string() + "/batches/1/1/log.txt " + c.string() +
                     "/sandboxes/cd34; do [ -e $f ] && echo SEEN $f; done; "
                     "cat " +
                     c.string() +
                     "/sandboxes/ab12/build/bin; echo written >here.txt; "
                     "(echo state >" +
                     c.string() +
                     "/sandboxes/ab12/build/planted) 2>/dev/null && echo PLANTED; "
                     "umount " +
                     c.string() + " 2>/dev/null && echo UNMOUNTED; true"};
    t.build = (c / "sandboxes/ab12/build").string();
    t.workdir = (c / "batches/1/0").string();
    t.result = (c / "batches/1/0/result.json").string();
    t.log = (c / "batches/1/0/log.txt").string();
    m.tasks = {t};
    trial::write_manifest(c / "batches/1/manifest.json", m);
    // In a child: the wrapper's namespace must not outlive it in the test process.
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) ::_exit(trial::execute(c / "batches/1/manifest.json", 0));
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    const auto r = trial::read_result(c / "batches/1/0/result.json");
    REQUIRE(r);
    INFO("isolation: " << r->isolation);
    const std::string log = test::read_file(c / "batches/1/0/log.txt");
    INFO("log: " << log);
    if (!r->isolated) {
        // Only where the kernel refuses a mount namespace (unprivileged user namespaces off): say so.
        CHECK(r->isolation.find("unshare") != std::string::npos);
        return;
    }
    CHECK(log.find("SEEN") == std::string::npos);
    CHECK(log.find("mine") != std::string::npos);
    CHECK(log.find("UNMOUNTED") == std::string::npos);
    CHECK(test::read_file(c / "batches/1/0/here.txt") == "written\n");
    CHECK(r->isolation.find("batches/1/0") != std::string::npos);
    CHECK(r->isolation.find("sandboxes/ab12") != std::string::npos);
    // The sandbox, shared by every trial of its patch set, is read-only: no state left for a later trial.
    CHECK(log.find("PLANTED") == std::string::npos);
    CHECK_FALSE(fs::exists(c / "sandboxes/ab12/build/planted"));
    REQUIRE(r->isolation.find("read-only: ") != std::string::npos);
    CHECK(r->isolation.find((c / "sandboxes/ab12").string(), r->isolation.find("read-only: ")) !=
          std::string::npos);
    CHECK(r->isolation.find("left writable") == std::string::npos);
    // Outside, everything is where it was.
    CHECK(fs::exists(c / "campaign.db"));
    CHECK(test::read_file(c / "batches/1/1/log.txt") == "other trial\n");
}

namespace {

// The wrapper run in a child (its memory is its own), which reports how far its peak resident set (VmHWM)
// rose above its resident set when it started (a forked child starts with the test process's pages resident).
struct WrapperRun {
    int status = -1;
    long long peak_rss_growth_bytes = 0;
};
long long status_kib(const char* field) {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line))
        if (line.rfind(field, 0) == 0) return std::atoll(line.c_str() + std::strlen(field));
    return -1;
}
WrapperRun run_wrapper_measured(const fs::path& manifest, const fs::path& report) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        const long long start_kib = status_kib("VmRSS:");
        int code = 125;
        try {
            code = trial::execute(manifest, 0);
        } catch (...) {
        }
        std::ofstream(report) << (status_kib("VmHWM:") - start_kib) * 1024;
        ::_exit(code);
    }
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    WrapperRun r;
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::ifstream(report) >> r.peak_rss_growth_bytes;
    return r;
}

} // namespace

TEST_CASE(
    "the trial wrapper streams: 160 MB of lines and one 100 MB line go to the log whole, the steps around "
    "them are read, and the wrapper's memory stays bounded") {
    TempDir tmp;
    auto step_line = [](int n) {
        return "echo 'INFRARSI_STEP {\"step\":" + std::to_string(n) + ",\"loss\":1,\"step_time_s\":0.5}'; ";
    };
    // 160 MB in 100-byte lines (99 x and a newline), then one line of 100 MB, between step lines.
    one_task(tmp, {"bash", "-c",
                   step_line(1) + "yes " + std::string(99, 'x') + " | head -c 160000000; " + step_line(2) +
                       "head -c 100000000 /dev/zero | tr '\\0' y; echo; " + step_line(3) + step_line(4) +
                       "exit 3"});
    const auto run = run_wrapper_measured(tmp.path / "manifest.json", tmp.path / "peak");
    // The workload's own outcome (it exited 3), not the wrapper's.
    CHECK(run.status == 3);
    const auto r = trial::read_result(tmp.path / "0/result.json");
    REQUIRE(r);
    CHECK(r->exit_code == 3);
    REQUIRE(r->steps.steps.size() == 4);
    for (int i = 0; i < 4; ++i) {
        CHECK(r->steps.steps[i].step == i + 1);
        CHECK(r->steps.steps[i].arrival_s);
    }
    // Everything reached the log, the long line whole.
    const auto log_bytes = fs::file_size(tmp.path / "0/log.txt");
    CHECK(log_bytes == 160000000u + 100000001u + 4 * (step_line(1).size() - 8));
    MESSAGE("the wrapper's peak resident set grew by " << run.peak_rss_growth_bytes / (1 << 20)
                                                       << " MiB over 260 MB of output");
    // It kept neither: the whole output is 260 MB (the wrapper kept all of it, and more, before: 450 MiB).
    CHECK(run.peak_rss_growth_bytes >= 0);
    CHECK(run.peak_rss_growth_bytes < (64ll << 20));
}
