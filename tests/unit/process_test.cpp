#include "util/error.hpp"
#include "util/process.hpp"

#include <csignal>
#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <sys/wait.h>
#include <unistd.h>

using namespace infrarsi;

TEST_CASE("run_process captures stdout, stderr and the exit status") {
    auto r = run_process({"sh", "-c", "echo out; echo err >&2; exit 3"});
    CHECK(r.out == "out\n");
    CHECK(r.err == "err\n");
    CHECK(r.exit_code == 3);
    CHECK_FALSE(r.ok());
}

TEST_CASE("run_process passes stdin and extra environment") {
    ProcessOptions o;
    o.stdin_data = "hello";
    o.env["INFRARSI_X"] = "42";
    auto r = run_process({"sh", "-c", "cat; echo $INFRARSI_X"}, o);
    CHECK(r.out == "hello42\n");
}

TEST_CASE("run_process kills a child past its timeout") {
    ProcessOptions o;
    o.timeout = std::chrono::milliseconds(300);
    auto r = run_process({"sleep", "30"}, o);
    CHECK(r.timed_out);
    CHECK(r.term_signal == SIGTERM);
}

TEST_CASE("a program that does not exist is an error naming it") {
    CHECK_THROWS_WITH_AS(run_process({"no-such-program-xyz"}), doctest::Contains("no-such-program-xyz"),
                         Error);
}

TEST_CASE("run_process hands a streaming caller stdout and stderr as one stream, in order") {
    ProcessOptions o;
    std::string seen;
    o.on_output = [&](std::string_view chunk) { seen += chunk; };
    auto r = run_process({"sh", "-c", "echo one; echo two >&2; echo three"}, o);
    CHECK(r.ok());
    CHECK(seen == "one\ntwo\nthree\n");
    CHECK(r.out.empty());
    CHECK(r.err.empty());
}

namespace {

// Whether `pid` names a live process (not a zombie): /proc/<pid>/stat's state after the command name.
bool alive(const std::string& pid) {
    std::ifstream in("/proc/" + pid + "/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), {});
    const auto close = stat.rfind(')');
    return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

} // namespace

TEST_CASE("run_process's timeout holds for a child that closed its output early and keeps running, and "
          "kills its process group") {
    char tmpl[] = "/tmp/infrarsi-process-XXXXXX";
    const std::string dir = ::mkdtemp(tmpl);
    const std::string pids = dir + "/pids";
    ProcessOptions o;
    o.timeout = std::chrono::milliseconds(500);
    // A helper in the background (same process group), then the child closes stdout and stderr and sleeps
    // far past the timeout: before the fix, run_process waited for it without a deadline.
    const auto start = std::chrono::steady_clock::now();
    auto r = run_process(
        {"sh", "-c", "sleep 300 & echo $! > " + pids + "; echo $$ >> " + pids + "; exec >&- 2>&-; sleep 300"},
        o);
    const auto took = std::chrono::steady_clock::now() - start;
    CHECK(r.timed_out);
    CHECK_FALSE(r.ok());
    // Not a timing assertion on a noisy machine: 0.5 s + the 2 s grace, against a child that sleeps 300 s.
    CHECK(took < std::chrono::seconds(120));
    std::ifstream in(pids);
    std::string helper, shell;
    in >> helper >> shell;
    REQUIRE_FALSE(helper.empty());
    REQUIRE_FALSE(shell.empty());
    CHECK_FALSE(alive(shell));
    // The background helper was killed with the group (a zombie until init reaps it, so poll).
    bool gone = false;
    for (int i = 0; i < 200 && !gone; ++i, ::usleep(20000))
        gone = !alive(helper);
    CHECK(gone);
    std::filesystem::remove_all(dir);
}

TEST_CASE("run_process without a timeout waits for a child that closed its output and then exits") {
    auto r = run_process({"sh", "-c", "echo before; exec >&- 2>&-; sleep 0.3; exit 4"});
    CHECK(r.out == "before\n");
    CHECK(r.exit_code == 4);
    CHECK_FALSE(r.timed_out);
}

TEST_CASE("start_detached runs a program in a session of its own, output to a file, and returns its pid") {
    char tmpl[] = "/tmp/infrarsi-process-XXXXXX";
    const std::string dir = ::mkdtemp(tmpl);
    DetachedOptions o;
    o.cwd = dir;
    o.env = merged_environment({{"INFRARSI_X", "7"}});
    o.output = dir + "/out.txt";
    const pid_t pid = start_detached(
        {"sh", "-c", "echo $INFRARSI_X; echo err >&2; pwd; cut -d' ' -f6 /proc/$$/stat; read x || echo eof"},
        o);
    REQUIRE(pid > 0);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    std::ifstream in(dir + "/out.txt");
    std::string text((std::istreambuf_iterator<char>(in)), {});
    CHECK(text == "7\nerr\n" + dir + "\n" + std::to_string(pid) + "\neof\n");
    o.output.clear();
    CHECK_THROWS_AS(start_detached({"true"}, o), Error);
    o.output = dir + "/out2.txt";
    CHECK_THROWS_WITH_AS(start_detached({"no-such-program-xyz"}, o), doctest::Contains("no-such-program-xyz"),
                         Error);
    std::filesystem::remove_all(dir);
}
