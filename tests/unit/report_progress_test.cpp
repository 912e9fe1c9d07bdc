// The live status line: what it says of a campaign's status (report::status of the fixture campaign and a
// mid-search snapshot), and that time moves on between snapshots.
#include "report/progress.hpp"
#include "report/report.hpp"

#include "report_fixture.hpp"

#include <doctest/doctest.h>

#include <atomic>

using namespace infrarsi;
using nlohmann::json;

TEST_CASE("the status line says stage, batch, search trials by outcome, best and its speed-up, elapsed and "
          "what is left") {
    const json j = {{"state", "search"},
                    {"batch", {{"id", 3}, {"kind", "search"}, {"state", "submitted"}, {"trials", 4}}},
                    {"trials", {{"used", 5}, {"budget", 8}}},
                    {"search_outcomes", {{"ok", 3}, {"oom", 1}, {"build_failure", 1}}},
                    {"running", 2},
                    {"best", {{"step_s", 0.07}, {"speedup_vs_baseline", 1.4286}}},
                    {"wall_s", 75.0},
                    {"estimate_left_s", 45.0},
                    {"estimate_basis", "search pace so far"}};
    const auto line = report::progress_line(j);
    CHECK(line ==
          "search | batch 3 (search, 4 trials) | trials 5/8 (build_failure=1 ok=3 oom=1), 2 running | "
          "best 0.07 s (1.43x) | 1m15s elapsed, ~45s left (search pace so far)");
    // Between snapshots the clock moves on: elapsed up, the estimate down, never below zero.
    const auto later = report::progress_line(j, 50);
    CHECK(later.find("2m05s elapsed, ~0s left") != std::string::npos);
    CHECK(report::progress_line(j, 0, 40).size() == 40);
}

TEST_CASE("status of a finished campaign: its last batch, search outcomes of the budget's trials (a build "
          "failure is none), no estimate") {
    test::TempDir d;
    campaign::Campaign c(test::fixture_campaign(d));
    const auto j = report::status(c);
    CHECK(j["batch"]["kind"] == "verify");
    CHECK(j["batch"]["trials"] == 6);
    CHECK(j["search_outcomes"] == json({{"ok", 3}, {"oom", 1}, {"contract_violation", 1}, {"timeout", 1}}));
    CHECK_FALSE(j.contains("estimate_left_s"));
    const auto line = report::progress_line(j);
    CHECK(line.rfind("done | batch 4 (verify, 6 trials, done) | trials 6/8 (contract_violation=1 ok=3 oom=1 "
                     "timeout=1)",
                     0) == 0);
    CHECK(line.find("best 0.07 s (1.43x)") != std::string::npos);
}

TEST_CASE("status --watch follows a campaign until it is done, and returns when stopped before that") {
    test::TempDir d;
    campaign::Campaign done(test::fixture_campaign(d));
    std::atomic<bool> stop{false};
    CHECK(report::watch(done, stop, std::chrono::milliseconds(10))); // done: one look, then it returns

    test::TempDir e;
    const std::filesystem::path fx = INFRARSI_FIXTURES;
    std::filesystem::copy(fx / "toyload", e.path / "toyload", std::filesystem::copy_options::recursive);
    std::filesystem::copy(fx / "toyload-patches", e.path / "toyload-patches",
                          std::filesystem::copy_options::recursive);
    std::filesystem::copy_file(fx / "toyload.contract.toml", e.path / "toyload.contract.toml");
    campaign::Campaign::init(e.path / "toyload.contract.toml", e.path / "c");
    campaign::Campaign fresh(e.path / "c");
    stop = true;
    CHECK_FALSE(report::watch(fresh, stop, std::chrono::milliseconds(10))); // not done, stopped
}
