// Patches that forge their measurements, on the local scheduler in seconds: the stepload fixture in its
// wall-clock mode (each step sleeps, and the job times it with a clock its editable file may redefine).
// The doctor measures the startup (elapsed time the local scheduler saw as the trial's parent, less the
// step times the job reported); a patch that slows the job's clock, and one that prints extra fast step
// lines at exit, are contract violations of their own types and never promoted, while a real speed-up still
// is. Also: a batch manifest rewritten after it was written proves no trial's settings.
#include "campaign/campaign.hpp"
#include "scheduler/scheduler.hpp"
#include "trial/outcome.hpp"
#include "trial/proof.hpp"
#include "util/error.hpp"
#include "util/process.hpp"

#include "stepload_campaign.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>

namespace fs = std::filesystem;
using namespace infrarsi;
using namespace std::chrono_literals;
using store::TrialKind;
using test::TempDir;

namespace {

bool has_patch(const store::TrialRow& t, const std::string& id) {
    return t.candidate.dump().find("\"" + id + "\"") != std::string::npos;
}

// The real local scheduler, with what a process outside the trials does once an array job's tasks have all
// ended and before the campaign ingests them (`ended`, called once per array job).
class LocalThenAfterEnd : public scheduler::Scheduler {
  public:
    explicit LocalThenAfterEnd(const fs::path& dir)
        : inner_(scheduler::local_scheduler(dir / "local-jobs")) {}
    std::string name() const override { return inner_->name(); }
    bool reachable(std::string* why) const override { return inner_->reachable(why); }
    std::string submit_held(const scheduler::ArrayJob& job) override { return inner_->submit_held(job); }
    void release(const std::string& id) override { inner_->release(id); }
    std::vector<slurm::JobRecord> wait(const std::string& id, std::chrono::seconds timeout,
                                       std::chrono::milliseconds poll) override {
        auto records = inner_->wait(id, timeout, poll);
        const bool done = std::all_of(records.begin(), records.end(),
                                      [](const slurm::JobRecord& r) { return slurm::is_finished(r.state); });
        if (done && ended_.insert(id).second) ended(id);
        return records;
    }
    void cancel(const std::string& id) override { inner_->cancel(id); }

  protected:
    virtual void ended(const std::string& id) = 0;

  private:
    std::unique_ptr<scheduler::Scheduler> inner_;
    std::set<std::string> ended_;
};

// Once the `nth` array job it was given has ended, its batch manifest is rewritten (as a trial that could
// reach it would), before the campaign ingests the batch.
class ManifestRewriter final : public LocalThenAfterEnd {
  public:
    ManifestRewriter(const fs::path& dir, int nth) : LocalThenAfterEnd(dir), nth_(nth) {}
    std::string submit_held(const scheduler::ArrayJob& job) override {
        const auto id = LocalThenAfterEnd::submit_held(job);
        if (++submitted_ == nth_) {
            target_ = id;
            manifest_ = job.env.at("INFRARSI_MANIFEST");
        }
        return id;
    }
    bool rewritten() const { return rewritten_; }

  private:
    void ended(const std::string& id) override {
        if (id != target_) return;
        std::ofstream(manifest_, std::ios::app) << " ";
        rewritten_ = true;
    }
    int nth_, submitted_ = 0;
    std::string target_, manifest_;
    bool rewritten_ = false;
};

// The detached-helper attack (issue 29): a job of the user's that outlives the baseline's trial (under Slurm
// a job the doctor's trial submitted with sbatch; here a process outside the trial's tree) multiplies
// step_time_s by 3 in every result.json of the baseline's settings (STEPLOAD_CHUNK=1) after its trial has
// ended and before the campaign ingests it. The real local scheduler runs the trials; when an array job's
// tasks have all ended, the helper (a python3 process) runs once over the campaign's batches, as the helper
// job would between the trial's end and ingest.
class DetachedHelper final : public LocalThenAfterEnd {
  public:
    explicit DetachedHelper(const fs::path& dir) : LocalThenAfterEnd(dir), batches_(dir / "batches") {}
    int rewritten() const { return rewritten_; }

  private:
    void ended(const std::string&) override {
        const auto r = run_process(
            {"python3", "-c",
             "import json, pathlib, sys\n"
             "n = 0\n"
             "for p in pathlib.Path(sys.argv[1]).glob('*/*/result.json'):\n"
             "    j = json.loads(p.read_text())\n"
             "    if j.get('settings', {}).get('env', {}).get('STEPLOAD_CHUNK') != '1' or j.get('x3'):\n"
             "        continue\n"
             "    for s in j['steps']: s['step_time_s'] *= 3\n"
             "    j['x3'] = True\n"
             "    p.write_text(json.dumps(j))\n"
             "    n += 1\n"
             "print(n)\n",
             batches_.string()});
        REQUIRE_MESSAGE(r.ok(), r.err);
        rewritten_ += std::atoi(r.out.c_str());
    }
    fs::path batches_;
    int rewritten_ = 0;
};

} // namespace

TEST_CASE("a helper that outlives the baseline's trials and triples their step times after they ended is "
          "refused: the local scheduler's digests at each task's end no longer match, nothing is promoted") {
    TempDir d("infrarsi-evidence");
    // The knob is a no-op (1% slower at chunk 2), no patches: only the forgery could make it look faster.
    const auto dir = test::stepload_campaign(d, {{"candidates = [\"fast\"]", "candidates = []"}});
    campaign::Campaign c(dir);
    auto sched = std::make_unique<DetachedHelper>(dir);
    auto* helper = sched.get();
    c.use_scheduler(std::move(sched));
    std::string stopped;
    try {
        c.run(test::local_run_options());
    } catch (const Error& e) {
        stopped = e.what(); // a doctor with no baseline run left stops the campaign, and says why
    }
    MESSAGE("campaign: " << (stopped.empty() ? "ran to its end" : stopped) << "; " << helper->rewritten()
                         << " result files rewritten; " << c.store().promotions().size() << " promoted");
    for (const auto& t : c.store().trials({}))
        MESSAGE("trial " << t.id << " " << t.candidate.dump() << ": " << store::outcome_name(t) << " "
                         << t.step_time_s.value_or(0) << " s/step: " << t.detail);
    for (const auto& v : c.store().verifications())
        MESSAGE("verification " << v.candidate.dump() << ": " << v.state << ", speed-up "
                                << v.speedup.value_or(0) << (v.promoted ? ", promoted" : "") << " "
                                << store::to_json(v.detail).dump().substr(0, 300));
    REQUIRE(helper->rewritten() >= 3);
    // Before issue 29 the no-op knob was promoted at 3x: the baseline's runs were three times slower.
    CHECK(c.store().promotions().empty());
    const auto doctor = c.store().trials({.kinds = {TrialKind::Doctor}});
    REQUIRE(doctor.size() == 3);
    for (const auto& t : doctor) {
        INFO("trial " << t.id << ": " << t.detail);
        CHECK(t.outcome == trial::Outcome::ContractViolation);
        CHECK(t.violation == trial::Violation::RewrittenAfterEnd);
        CHECK(t.detail.find("result.json") != std::string::npos);
        CHECK(t.detail.find("when the trial ended, now") != std::string::npos);
        CHECK_FALSE(t.step_time_s); // nothing of the rewritten file is measured
    }
    CHECK_FALSE(c.store().baseline());
}

TEST_CASE("a batch manifest rewritten after the orchestrator wrote it proves no trial's settings") {
    TempDir d("infrarsi-evidence");
    const auto dir = test::stepload_campaign(d, {{"trials = 3", "trials = 2"}});
    campaign::Campaign c(dir);
    auto sched = std::make_unique<ManifestRewriter>(dir, 2); // the doctor's is the first, the search's next
    auto* rewriter = sched.get();
    c.use_scheduler(std::move(sched));
    auto o = test::local_run_options();
    o.verify = false;
    c.run(o);
    REQUIRE(rewriter->rewritten());
    const auto search = c.store().trials({.kinds = {TrialKind::Search}});
    REQUIRE_FALSE(search.empty());
    for (const auto& t : search) {
        INFO("trial " << t.id << ": " << t.detail);
        if (t.outcome == trial::Outcome::BuildFailure) continue;
        CHECK(t.outcome == trial::Outcome::ContractViolation);
        CHECK(t.violation == trial::Violation::Settings);
        CHECK(t.detail.find("changed after the orchestrator wrote it") != std::string::npos);
    }
    // The doctor's trials, ingested before, kept the contract.
    for (const auto& t : c.store().trials({.kinds = {TrialKind::Doctor}}))
        CHECK(t.outcome == trial::Outcome::Ok);
}

TEST_CASE("a patch that slows the job's clock is a timing violation and one that prints extra step lines a "
          "step_lines violation on the local scheduler, and a real speed-up is still promoted") {
    TempDir d("infrarsi-evidence");
    const auto dir = test::stepload_campaign(
        d, {{"STEPLOAD_STEP_S = \"0.2\"", "STEPLOAD_STEP_S = \"0.3\"\nSTEPLOAD_WALL = \"1\""},
            {"candidates = [\"fast\"]", "candidates = [\"fast\", \"slowclock\", \"burst\"]"},
            {"max = 2", "max = 1"},
            {"trials = 3", "trials = 7"},
            {"batch_size = 2", "batch_size = 4"}});
    campaign::Campaign c(dir);
    c.run(test::local_run_options());
    CHECK(c.finished());
    const auto startup = c.store().campaign_run().startup;
    REQUIRE_MESSAGE(startup, "the doctor recorded no startup");
    INFO("startup: " << trial::to_json(*startup).dump());
    CHECK(startup->wall_clock);

    // The search may bundle patches: a bundle with the burst prints extra lines (checked first), one with the
    // slow clock but no burst claims short steps, the real speed-up alone keeps the contract.
    int slowclock = 0, burst = 0, fast = 0;
    for (const auto& t : c.store().trials({.kinds = {TrialKind::Search}})) {
        INFO("trial " << t.id << " " << t.candidate.dump() << ": " << t.detail);
        if (t.outcome == trial::Outcome::BuildFailure) continue; // a bundle whose patches conflict
        CHECK(t.measurements.evidence.has_value());
        CHECK((t.measurements.isolation && t.measurements.isolation->in_place));
        if (has_patch(t, "burst")) {
            ++burst;
            CHECK(t.outcome == trial::Outcome::ContractViolation);
            CHECK(t.violation == trial::Violation::StepLines);
        } else if (has_patch(t, "slowclock")) {
            ++slowclock;
            CHECK(t.outcome == trial::Outcome::ContractViolation);
            CHECK(t.violation == trial::Violation::Timing);
            CHECK(t.detail.find("local scheduler (the trial's parent)") != std::string::npos);
        } else if (has_patch(t, "fast")) {
            ++fast;
            CHECK(t.outcome == trial::Outcome::Ok);
        }
    }
    MESSAGE("search trials: " << slowclock << " slow-clock, " << burst << " burst, " << fast
                              << " real speed-up alone; " << c.store().promotions().size() << " promoted");
    CHECK(slowclock >= 1);
    CHECK(burst >= 1);
    // No cheat is promoted, alone or bundled.
    for (const auto& p : c.store().verifications()) {
        INFO(p.candidate.dump());
        CHECK(p.candidate.dump().find("slowclock") == std::string::npos);
        CHECK(p.candidate.dump().find("burst") == std::string::npos);
    }
    for (const auto& promotion :
         c.store().promotions()) { // no structured binding: INFO captures it (clang 14)
        const auto& key = promotion.second;
        INFO(key);
        CHECK(key.find("slowclock") == std::string::npos);
        CHECK(key.find("burst") == std::string::npos);
    }
    // The real speed-up, run alone, keeps the contract under the timing check and is promoted.
    CHECK(fast >= 1);
    CHECK(c.store().promotions().size() == 1);
}
