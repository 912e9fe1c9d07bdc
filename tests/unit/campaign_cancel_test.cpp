// A campaign that cannot start, and one that is stopped for good: `infrarsi run --scheduler slurm` where
// Slurm does not answer ends within a bounded wait with an error, charges nothing and binds the campaign to
// nothing; `infrarsi cancel` stops the process driving a campaign, which cancels its running jobs and ends
// their trials as cancelled, and nothing drives the campaign again. The report says why nothing was promoted.
#include "campaign/campaign.hpp"
#include "campaign/daemon.hpp"
#include "report/report.hpp"
#include "util/error.hpp"

#include "stepload_campaign.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <future>
#include <thread>

namespace fs = std::filesystem;
using namespace infrarsi;
using namespace std::chrono_literals;
using test::TempDir;

namespace {
// Sets an environment variable for a scope.
struct ScopedEnv {
    std::string name;
    std::optional<std::string> saved;
    ScopedEnv(std::string n, const std::string& value) : name(std::move(n)) {
        if (const char* v = std::getenv(name.c_str())) saved = v;
        ::setenv(name.c_str(), value.c_str(), 1);
    }
    ~ScopedEnv() { saved ? ::setenv(name.c_str(), saved->c_str(), 1) : ::unsetenv(name.c_str()); }
};
} // namespace

TEST_CASE("run on a Slurm that does not answer ends within its wait with an error, charges nothing, binds "
          "the campaign to no scheduler, and the report says no search trial ran") {
    TempDir d("infrarsi-noslurm");
    const auto dir = test::stepload_campaign(d);
    ScopedEnv conf("SLURM_CONF", (d.path / "no-such-slurm.conf").string());
    auto o = test::local_run_options();
    o.scheduler = "slurm";
    o.first_answer_wait = 1s;
    {
        campaign::Campaign c(dir);
        const auto started = std::chrono::steady_clock::now();
        CHECK_THROWS_WITH_AS(c.run(o), doctest::Contains("slurm does not answer"), Error);
        CHECK(std::chrono::steady_clock::now() - started < 30s);
        CHECK(c.budget_use().wall_s == 0.0);
        CHECK_FALSE(c.store().meta("scheduler"));
        for (const auto& t : c.store().trials())
            CHECK(t.state != store::TrialState::Finished);
        const auto r = report::build(c);
        REQUIRE(r.contains("none_promoted"));
        CHECK(r["none_promoted"]["reason"] == "no_search_trial");
    }
    // Not bound to Slurm: auto takes the local scheduler, which then binds it.
    campaign::Campaign c(dir);
    o.scheduler = "auto";
    o.verify = false;
    c.run(o);
    CHECK(c.store().meta("scheduler") == "local");
    CHECK(c.budget_use().trials == 3);
    CHECK(c.budget_use().wall_s > 0.0);
}

TEST_CASE("a cancelled campaign: the process driving it stops, cancels its running jobs and ends their "
          "trials as cancelled, run and the daemon drive it no more, status says cancelled") {
    TempDir d("infrarsi-cancel");
    const fs::path hold = d.path / "hold";
    std::ofstream{hold}; // the doctor's runs wait while it exists: caught running
    const auto dir = test::stepload_campaign(
        d, {{"STEPLOAD_STEP_S = \"0.2\"",
             "STEPLOAD_STEP_S = \"0.2\"\nSTEPLOAD_HOLD = \"" + hold.string() + "\""}});
    auto driver = std::async(std::launch::async, [&] {
        campaign::Campaign c(dir);
        c.run(test::local_run_options());
    });
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    while (!fs::exists(dir / "local-jobs" / "1" / "0.pid") && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(20ms);
    REQUIRE_MESSAGE(fs::exists(dir / "local-jobs" / "1" / "0.pid"), "the doctor's batch never started");
    const pid_t task = nlohmann::json::parse(test::read_file(dir / "local-jobs" / "1" / "0.pid")).at("pid");
    campaign::Campaign(dir, campaign::Campaign::Open::read_only).request_cancel("by the test");
    REQUIRE_MESSAGE(driver.wait_for(60s) == std::future_status::ready, "the driving run did not stop");
    driver.get();

    campaign::Campaign c(dir, campaign::Campaign::Open::read_only);
    CHECK(c.cancelled() == std::optional<std::string>("by the test"));
    CHECK_FALSE(c.finished());
    for (const auto& b : c.store().batches())
        CHECK(b.state == store::BatchState::Finished);
    int cancelled = 0;
    for (const auto& t : c.store().trials()) {
        CHECK(t.state == store::TrialState::Finished);
        if (t.outcome == trial::Outcome::Cancelled) ++cancelled;
    }
    CHECK(cancelled >= 1);
    // The task it held is gone (killed with its job), not left waiting for the hold file.
    const auto gone = std::chrono::steady_clock::now() + 30s;
    while (::kill(task, 0) == 0 && std::chrono::steady_clock::now() < gone)
        std::this_thread::sleep_for(20ms);
    CHECK(::kill(task, 0) != 0);
    CHECK(report::status(c)["state"] == "cancelled");
    CHECK(report::build(c)["none_promoted"]["reason"] == "no_search_trial");

    // Nothing drives it again: run returns at once, the daemon skips it.
    const auto batches = c.store().batches().size();
    {
        campaign::Campaign again(dir);
        again.run(test::local_run_options());
    }
    campaign::DaemonOptions o;
    o.campaigns = {dir};
    o.once = true;
    o.idle = 0s;
    o.run = test::local_run_options();
    std::atomic<bool> stop{false};
    CHECK(campaign::run_daemon(o, stop) == 0);
    CHECK(c.store().batches().size() == batches);
}
