// A whole campaign on the local scheduler: no Slurm daemons, real trials (the toyload fixture, its patches
// built in sandboxes), real store. The fault paths a cluster test can only reach from bash run here.
#include "campaign/campaign.hpp"
#include "util/error.hpp"

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <map>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace infrarsi;
using test::TempDir;
using namespace std::chrono_literals;

namespace {

fs::path new_campaign(const TempDir& d) {
    const fs::path fx = INFRARSI_FIXTURES;
    fs::copy(fx / "toyload", d.path / "toyload", fs::copy_options::recursive);
    fs::copy(fx / "toyload-patches", d.path / "toyload-patches", fs::copy_options::recursive);
    fs::copy_file(fx / "toyload.contract.toml", d.path / "toyload.contract.toml");
    campaign::Campaign::init(d.path / "toyload.contract.toml", d.path / "c");
    return d.path / "c";
}

campaign::RunOptions local_options() {
    campaign::RunOptions o;
    o.verbose = false;
    o.scheduler = "local";
    o.poll = 50ms;
    // A loaded test host may make the toyload's baseline too noisy: these tests are not about that pause.
    o.accept_noise = true;
    return o;
}

std::map<std::string, int> outcomes(campaign::Campaign& c, store::TrialKind kind) {
    std::map<std::string, int> n;
    for (const auto& t : c.store().trials({.kinds = {kind}}))
        ++n[store::outcome_name(t)];
    return n;
}

} // namespace

TEST_CASE(
    "a campaign runs end to end on the local scheduler: doctor, search with its failures, verification") {
    TempDir d;
    const auto dir = new_campaign(d);
    campaign::Campaign c(dir);
    c.run(local_options());
    CHECK(c.finished());
    CHECK(c.store().meta("scheduler") == "local");
    CHECK(outcomes(c, store::TrialKind::Doctor) == std::map<std::string, int>{{"ok", 3}});
    auto search = outcomes(c, store::TrialKind::Search);
    CHECK(search["ok"] >= 1);
    CHECK(c.budget_use().trials == 8);
    // Every trial that ran has its own node-seconds and, when ok, a measured step time.
    for (const auto& t : c.store().trials({.outcome = trial::Outcome::Ok})) {
        CHECK(t.step_time_s > 0);
        CHECK(t.cost_node_s > 0);
    }
    CHECK_FALSE(c.store().verifications().empty());
    // The campaign keeps its scheduler: asking for Slurm later is refused only while a batch is open.
    campaign::Campaign again(dir);
    auto o = local_options();
    o.scheduler = "slurm";
    CHECK_NOTHROW(again.run(o)); // finished: nothing to submit
}

TEST_CASE("a campaign killed (SIGKILL) while its first search batch runs resumes: the batch's trials run "
          "again, none twice in the store, the budget kept") {
    TempDir d;
    const auto dir = new_campaign(d);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        try {
            campaign::Campaign c(dir);
            c.run(local_options());
        } catch (...) {
        }
        ::_exit(0);
    }
    // The doctor is local job 1, the first search batch job 2: kill the orchestrator once a task of it runs.
    const auto deadline = std::chrono::steady_clock::now() + 300s;
    bool running = false;
    while (!running && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(20ms);
        running = fs::exists(dir / "local-jobs" / "2" / "0.pid");
    }
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    REQUIRE_MESSAGE(running, "the first search batch never started within 300 s");

    campaign::Campaign c(dir);
    c.run(local_options());
    CHECK(c.finished());
    CHECK(c.budget_use().trials == 8);
    std::map<std::int64_t, int> per_batch_index;
    for (const auto& t : c.store().trials()) {
        CHECK(t.state == store::TrialState::Finished);
        if (t.array_index >= 0) CHECK(++per_batch_index[t.batch_id * 1000 + t.array_index] == 1);
    }
    // The doctor ran once (3 runs), and once more, one job at a time, where a loaded host made it too noisy.
    const auto doctor = outcomes(c, store::TrialKind::Doctor);
    CHECK(doctor.size() == 1);
    CHECK((doctor.at("ok") == 3 || doctor.at("ok") == 6));
}
