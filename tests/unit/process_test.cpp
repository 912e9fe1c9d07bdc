#include "util/error.hpp"
#include "util/process.hpp"

#include <csignal>
#include <doctest/doctest.h>

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
