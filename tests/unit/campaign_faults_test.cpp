// The campaign's fault paths on the local scheduler, in seconds and without a cluster: a node failure
// re-queues its trial, the trial and wall-time budgets end the search and say so, verification promotes a
// real speed-up and nothing else, and a campaign killed (SIGKILL) at any step of a batch's life resumes with
// nothing lost, run twice or counted twice. The workload is the stepload fixture: a few shell lines that
// print the step lines of a job whose step times and losses its knob and patches set (no sleeping, no build).
//
// A node cannot fail under the local scheduler. The node-failure test wraps the real local scheduler in a
// fault-injecting decorator (Faulty, below) that rewrites one task's end record to Slurm's NODE_FAIL, once,
// as Slurm would report it: everything after that (classification, re-queue, budget) is the product's own.
// The same decorator, with a hook that SIGKILLs the process, places the kills of the restart tests.
#include "campaign/campaign.hpp"
#include "scheduler/scheduler.hpp"
#include "util/error.hpp"

#include "stepload_campaign.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace infrarsi;
using namespace std::chrono_literals;
using store::TrialKind;
using test::TempDir;

namespace {

// The steps of a batch's life where the decorator calls its hook.
enum class Step {
    Submit,   // submit_held called: the batch is planned (stored, manifest written), not submitted
    Held,     // submit_held returned: a held job exists, its id not yet recorded
    Release,  // release called: the id is recorded, the job still held
    Released, // release returned: nothing ran yet (the local scheduler starts tasks in wait)
    Waited,   // wait returned `records`
};

// The real local scheduler, with a hook at every step of a job's life (job: the local job id; n: which
// submission of this process it is, 1 for the first).
class Faulty final : public scheduler::Scheduler {
  public:
    using Hook = std::function<void(Step, int n, const std::string& job, std::vector<slurm::JobRecord>*)>;
    Faulty(const fs::path& campaign_dir, Hook hook)
        : inner_(scheduler::local_scheduler(campaign_dir / "local-jobs")), hook_(std::move(hook)) {}

    std::string name() const override { return inner_->name(); }
    bool reachable(std::string* why) const override { return inner_->reachable(why); }
    std::string submit_held(const scheduler::ArrayJob& job) override {
        const int n = ++submissions_;
        hook_(Step::Submit, n, "", nullptr);
        const auto id = inner_->submit_held(job);
        number_[id] = n;
        hook_(Step::Held, n, id, nullptr);
        return id;
    }
    void release(const std::string& id) override {
        hook_(Step::Release, number(id), id, nullptr);
        inner_->release(id);
        hook_(Step::Released, number(id), id, nullptr);
    }
    // Returns within a second (the interface allows sooner than `timeout`; the campaign waits again), so
    // the hook sees a task while it runs.
    std::vector<slurm::JobRecord> wait(const std::string& id, std::chrono::seconds timeout,
                                       std::chrono::milliseconds poll) override {
        auto records = inner_->wait(id, std::min(timeout, std::chrono::seconds(1)), poll);
        hook_(Step::Waited, number(id), id, &records);
        return records;
    }
    void cancel(const std::string& id) override { inner_->cancel(id); }

  private:
    int number(const std::string& id) const {
        const auto it = number_.find(id.substr(0, id.find('_')));
        return it == number_.end() ? 0 : it->second; // 0: submitted by a predecessor
    }
    std::unique_ptr<scheduler::Scheduler> inner_;
    Hook hook_;
    int submissions_ = 0;
    std::map<std::string, int> number_;
};

bool all_finished(const std::vector<slurm::JobRecord>& records) {
    return std::all_of(records.begin(), records.end(),
                       [](const slurm::JobRecord& r) { return slurm::is_finished(r.state); });
}

bool logged(campaign::Campaign& c, const std::string& text) {
    for (const auto& [when, msg] : c.store().events(100000))
        if (msg.find(text) != std::string::npos) return true;
    return false;
}

// The trial directories the workload ran in, one line per run (stepload's second argument).
std::vector<std::string> runs(const TempDir& d) {
    std::istringstream in(test::read_file(d.path / "runs.log"));
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);)
        out.push_back(line);
    return out;
}

// Counted search trials that ran (a patch set that does not build is recorded, but is no trial).
int counted_search_trials(campaign::Campaign& c) {
    int n = 0;
    for (const auto& t : c.store().trials({.kinds = {TrialKind::Search}, .counted = true}))
        n += t.outcome != trial::Outcome::BuildFailure;
    return n;
}

} // namespace

TEST_CASE("a trial whose scheduler record says NODE_FAIL is recorded node_failure, not counted, and its "
          "candidate runs again in a later batch, and the campaign ends with the contract's trial count") {
    TempDir d("infrarsi-faults");
    const auto dir = test::stepload_campaign(d);
    campaign::Campaign c(dir);
    // The first search batch is the second submission (the doctor's is the first): its task 1 (task 0 is the
    // batch's control) "lost its node" once it ended, every time the campaign asks.
    c.use_scheduler(std::make_unique<Faulty>(
        dir, [](Step step, int n, const std::string&, std::vector<slurm::JobRecord>* records) {
            if (step != Step::Waited || n != 2) return;
            for (auto& r : *records)
                if (r.array_task_id == 1 && slurm::is_finished(r.state)) {
                    r.state = slurm::JobState::NodeFail;
                    r.raw_state = "NODE_FAIL";
                    r.exit_code = 0;
                }
        }));
    c.run(test::local_run_options(false));

    const auto failed =
        c.store().trials({.kinds = {TrialKind::Search}, .outcome = trial::Outcome::NodeFailure});
    REQUIRE(failed.size() == 1);
    const auto& f = failed[0];
    CHECK_FALSE(f.counted);
    CHECK(f.array_index == 1);
    CHECK(f.detail.find("NODE_FAIL") != std::string::npos);
    // Re-queued: the same candidate, its next attempt, in a later batch, counted.
    int reruns = 0;
    for (const auto& t : c.store().trials({.kinds = {TrialKind::Search}}))
        if (t.candidate_key == f.candidate_key && t.id != f.id) {
            ++reruns;
            CHECK(t.batch_id > f.batch_id);
            CHECK(t.attempt == f.attempt + 1);
            CHECK(t.counted);
            CHECK(t.outcome == trial::Outcome::Ok);
            CHECK(t.reason.find("re-queued after node_failure") != std::string::npos);
        }
    CHECK(reruns == 1);
    CHECK(counted_search_trials(c) == 3);
    CHECK(c.budget_use().trials == 3);
    CHECK(c.store().trials({.kinds = {TrialKind::Search}}).size() == 4);
}

TEST_CASE("the trial budget ends the search at exactly the contract's trials, and the campaign says so") {
    TempDir d("infrarsi-faults");
    // The knob's 4 values and the fast patch: 7 candidates besides the baseline, none a build failure (which
    // the budget does not count: two patches that edit the same line would make the batch count depend on
    // which ones the search happens to pick).
    const auto dir = test::stepload_campaign(d, {{"max = 2", "max = 4"}});
    campaign::Campaign c(dir);
    c.run(test::local_run_options(false));
    // 3 trials in batches of 2: two batches, the second of 1.
    CHECK(counted_search_trials(c) == 3);
    const auto use = c.budget_use();
    CHECK(use.trials == 3);
    CHECK(use.exhausted == "trial budget (3 trials)");
    CHECK(logged(c, "search ends: trial budget (3 trials) used"));
    int search_batches = 0;
    for (const auto& b : c.store().batches())
        search_batches += b.kind == store::BatchKind::Search;
    CHECK(search_batches == 2);
}

TEST_CASE("the wall-time budget ends the search between batches and skips a verification that no longer "
          "fits, saying so") {
    TempDir d("infrarsi-faults");
    const auto dir = test::stepload_campaign(
        d, {{"trials = 3", "trials = 8"}, {"batch_size = 2", "batch_size = 2\nwall_time = \"00:10:00\""}});
    campaign::Campaign c(dir);
    // Not a race with the clock: once the first search batch has ended, its start is moved 10 minutes back,
    // as if the batch had taken them.
    bool moved = false;
    c.use_scheduler(std::make_unique<Faulty>(
        dir, [&](Step step, int n, const std::string&, std::vector<slurm::JobRecord>* records) {
            if (step != Step::Waited || n != 2 || moved || !all_finished(*records)) return;
            store::Statement(c.store().db(), "UPDATE campaign_run SET started = started - 600").run();
            moved = true;
        }));
    c.run(test::local_run_options());
    REQUIRE(moved);
    CHECK(c.finished());
    CHECK(counted_search_trials(c) == 2); // one batch of 2, of the 8 the trial budget allows
    CHECK(c.budget_use().exhausted == "wall-time budget");
    CHECK(logged(c, "search ends: wall-time budget used"));
    // A candidate faster than the baseline (the fast patch halves the step) has no time left to verify.
    for (const auto& v : c.store().verifications()) {
        CHECK(v.state == store::VerificationState::Skipped);
        CHECK_FALSE(v.promoted);
        CHECK(logged(c, "skipped: not verified: the wall-time budget (600 s) has 0 s left"));
    }
    CHECK(c.store().trials({.kinds = {TrialKind::VerifyBaseline, TrialKind::VerifyCandidate}}).empty());
}

TEST_CASE("verification promotes a real speed-up") {
    TempDir d("infrarsi-faults");
    campaign::Campaign c(test::stepload_campaign(d));
    c.run(test::local_run_options());
    CHECK(c.finished());
    const auto v = c.store().verifications();
    REQUIRE(v.size() == 1);
    CHECK(v[0].state == store::VerificationState::Done);
    CHECK(v[0].candidate.dump().find("fast") != std::string::npos);
    CHECK(v[0].promoted);
    REQUIRE(v[0].speedup);
    CHECK(*v[0].speedup > 1.8); // the patch halves the step time
    CHECK(c.store().promotions().size() == 1);
}

TEST_CASE("verification rejects a candidate that was fast only once in the search (no speed-up)") {
    TempDir d("infrarsi-faults");
    campaign::Campaign c(
        test::stepload_campaign(d, {{"candidates = [\"fast\"]", "candidates = [\"lucky\"]"}}));
    c.run(test::local_run_options());
    CHECK(c.finished());
    const auto v = c.store().verifications();
    REQUIRE(v.size() == 1);
    CHECK(v[0].candidate.dump().find("lucky") != std::string::npos);
    CHECK(v[0].state == store::VerificationState::Done);
    CHECK_FALSE(v[0].promoted);
    REQUIRE(v[0].speedup);
    CHECK(*v[0].speedup < 1.05);
    CHECK(nlohmann::json(v[0].detail.reasons).dump().find("lower bound of the speed-up") !=
          std::string::npos);
    CHECK(c.store().promotions().empty());
}

TEST_CASE("verification never promotes a candidate that breaks the loss invariant, however fast") {
    TempDir d("infrarsi-faults");
    campaign::Campaign c(
        test::stepload_campaign(d, {{"candidates = [\"fast\"]", "candidates = [\"lossy\"]"}}));
    c.run(test::local_run_options());
    CHECK(c.finished());
    const auto v = c.store().verifications();
    REQUIRE(v.size() == 1);
    CHECK(v[0].candidate.dump().find("lossy") != std::string::npos);
    CHECK(v[0].state == store::VerificationState::Done);
    CHECK_FALSE(v[0].promoted);
    // Its second run (the equivalence check of its patch set, at the baseline's knobs and a fresh seed)
    // breaks the loss: rejected there, before any A/B pair (campaign_equivalence_test.cpp has the rest).
    CHECK(nlohmann::json(v[0].detail.reasons).dump().find("failed the equivalence check") !=
          std::string::npos);
    CHECK(c.store().promotions().empty());
    CHECK(c.store().trials({.kinds = {TrialKind::VerifyCandidate}}).empty());
    for (const auto& t : c.store().trials({.kinds = {TrialKind::EquivalenceCandidate}}))
        CHECK(t.violation == trial::Violation::NotEquivalent);
}

TEST_CASE("a campaign killed (SIGKILL) at any step of a search batch's life resumes: nothing lost, no "
          "ended trial run again, none stored or counted twice") {
    struct KillPoint {
        const char* name;
        std::function<bool(Step, const std::vector<slurm::JobRecord>*)> at;
    };
    // The search batch's trials wait while `hold` exists: made when the batch is released, so a task is
    // caught running; removed before the restart.
    const std::vector<KillPoint> points = {
        {"planned (stored, not submitted)", [](Step s, auto*) { return s == Step::Submit; }},
        {"submitted held, its id not yet recorded", [](Step s, auto*) { return s == Step::Held; }},
        {"submitted held, its id recorded", [](Step s, auto*) { return s == Step::Release; }},
        {"released, nothing started", [](Step s, auto*) { return s == Step::Released; }},
        {"a task running",
         [](Step s, const std::vector<slurm::JobRecord>* r) {
             return s == Step::Waited && std::any_of(r->begin(), r->end(), [](const slurm::JobRecord& x) {
                        return x.state == slurm::JobState::Running;
                    });
         }},
        {"every task ended, not ingested",
         [](Step s, const std::vector<slurm::JobRecord>* r) {
             return s == Step::Waited && all_finished(*r);
         }},
    };
    for (const auto& point : points) {
        CAPTURE(point.name);
        const bool hold_search = std::string(point.name) == "a task running";
        TempDir d("infrarsi-faults");
        const fs::path hold = d.path / "hold";
        const auto dir = test::stepload_campaign(
            d, {{"doctor = 3", "doctor = 2"},
                {"STEPLOAD_STEP_S = \"0.2\"",
                 "STEPLOAD_STEP_S = \"0.2\"\nSTEPLOAD_HOLD = \"" + hold.string() + "\""}});
        const pid_t child = ::fork();
        REQUIRE(child >= 0);
        if (child == 0) {
            // The first orchestrator: dies at the kill point of the first search batch (its 2nd submission).
            try {
                campaign::Campaign c(dir);
                c.use_scheduler(std::make_unique<Faulty>(
                    dir, [&](Step s, int n, const std::string&, std::vector<slurm::JobRecord>* r) {
                        if (n == 2 && s == Step::Released && hold_search) std::ofstream{hold};
                        if (n == 2 && point.at(s, r)) ::raise(SIGKILL);
                    }));
                c.run(test::local_run_options(false));
            } catch (...) {
            }
            ::_exit(0);
        }
        int status = 0;
        REQUIRE(::waitpid(child, &status, 0) == child);
        REQUIRE_MESSAGE(WIFSIGNALED(status), "the first run never reached the kill point");
        fs::remove(hold);
        const auto before = runs(d);

        campaign::Campaign c(dir);
        c.run(test::local_run_options(false));
        CHECK(c.store().stage() == store::Stage::Verification); // searched to its end (--no-verify)
        CHECK(counted_search_trials(c) == 3);
        CHECK(c.budget_use().trials == 3);
        std::set<std::pair<std::int64_t, int>> slots;
        for (const auto& t : c.store().trials()) {
            CHECK(t.state == store::TrialState::Finished);
            CHECK(t.outcome == trial::Outcome::Ok);
            CHECK(slots.insert({t.batch_id, t.array_index}).second);
        }
        std::set<std::string> jobs;
        for (const auto& b : c.store().batches()) {
            CHECK(b.state == store::BatchState::Finished);
            CHECK(jobs.insert(b.job_id).second); // no batch submitted twice under one id, none shared
        }
        // Every trial ran once; only the one that was running when the orchestrator died ran again.
        const auto after = runs(d);
        std::map<std::string, int> times;
        for (const auto& r : after)
            ++times[r];
        int twice = 0;
        for (const auto& [trial_dir, n] : times) {
            CHECK(n <= 2);
            twice += n == 2;
        }
        CHECK(twice <= (std::string(point.name) == "a task running" ? 1 : 0));
        // The doctor's 2, the search's 3 and each search batch's control.
        CHECK(times.size() == 2 + 3 + c.store().trials({.kinds = {store::TrialKind::SearchControl}}).size());
        if (std::string(point.name) == "submitted held, its id not yet recorded")
            CHECK(fs::exists(dir / "local-jobs" / "2" / "cancelled")); // the held orphan, cancelled
        CHECK(before.size() <= after.size());
    }
}
