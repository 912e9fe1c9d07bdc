// Verification's design, end to end on the local scheduler with the stepload fixture: each A/B pair is its
// own array job(s) placed on one node, pairs in blocks of two (one in each order) spread over the nodes until
// the sequence decides (verify/sequential.hpp), a promotion re-checked on the nodes the first stage did not
// use, a candidate with no gain stopped after one block, a restart mid-sequence resumed, and MFU over one
// denominator.
//
// The local backend has one host. A decorator (Placed, below) gives it four nodes as Slurm would: nodes()
// answers n1..n4, and each task's end record names the node its array was placed on (--nodelist), as Slurm's
// record of where it ran does. With `move_second` it reports the second array of every re-check pair on
// another node, as if Slurm had moved it: everything after that is the product's own.
#include "campaign/campaign.hpp"
#include "scheduler/scheduler.hpp"

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <set>

namespace fs = std::filesystem;
using namespace infrarsi;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

class Placed final : public scheduler::Scheduler {
  public:
    Placed(const fs::path& dir, bool move_second)
        : inner_(scheduler::local_scheduler(dir / "local-jobs")), move_second_(move_second) {}
    std::string name() const override { return inner_->name(); }
    bool reachable(std::string* why) const override { return inner_->reachable(why); }
    std::vector<std::string> nodes(const std::string&) const override { return {"n1", "n2", "n3", "n4"}; }
    std::string submit_held(const scheduler::ArrayJob& job) override {
        std::string node = "n1"; // the scheduler's choice when nothing is asked for
        for (const auto& p : job.placement)
            if (p.rfind("--nodelist=", 0) == 0) node = p.substr(11);
        const auto id = inner_->submit_held(job);
        node_of_[id] = node;
        first_of_[id] = job.first_index;
        placements.push_back(job.placement);
        return id;
    }
    void release(const std::string& id) override { inner_->release(id); }
    std::vector<slurm::JobRecord> wait(const std::string& id, std::chrono::seconds timeout,
                                       std::chrono::milliseconds poll) override {
        auto records = inner_->wait(id, timeout, poll);
        for (auto& r : records) {
            r.node_list = node_of_[id];
            // The re-check's block runs on n2 here (n1 holds the first stage's block): its second run is
            // reported elsewhere.
            if (move_second_ && r.node_list == "n2" && r.array_task_id && *r.array_task_id > first_of_[id])
                r.node_list = "n3";
        }
        return records;
    }
    void cancel(const std::string& id) override { inner_->cancel(id); }
    std::vector<std::vector<std::string>> placements; // of every array submitted, in order

  private:
    std::unique_ptr<scheduler::Scheduler> inner_;
    bool move_second_;
    std::map<std::string, std::string> node_of_;
    std::map<std::string, int> first_of_;
};

// The stepload fixture with 3 verification pairs; its step lines also carry model FLOPs and the job's own
// MFU over a peak it "measures" per run (10% apart from run to run, as a per-trial probe would).
fs::path campaign_dir(const test::TempDir& d,
                      const std::vector<std::pair<std::string, std::string>>& replace = {}) {
    const fs::path fx = INFRARSI_FIXTURES;
    fs::copy(fx / "stepload", d.path / "stepload", fs::copy_options::recursive);
    fs::copy(fx / "stepload-patches", d.path / "stepload-patches", fs::copy_options::recursive);
    std::string train = test::read_file(d.path / "stepload/train.sh");
    const std::string from = R"(\"tokens\":1024,)";
    const auto at = train.find(from);
    REQUIRE(at != std::string::npos);
    train.replace(at, from.size(), R"(\"tokens\":1024,\"model_flops\":1e9,\"mfu\":%.6f,)");
    const std::string args = "s, 2.0 / (s + 1 + ((seed - 1) % 1000) / 1000) + ls, t, 1024 / t";
    const auto at2 = train.find(args);
    REQUIRE(at2 != std::string::npos);
    train.replace(
        at2, args.size(),
        "s, 2.0 / (s + 1 + ((seed - 1) % 1000) / 1000) + ls, t, 1e9 / t / (1e10 * (1 + 0.1 * (r % 3))), "
        "1024 / t");
    std::ofstream(d.path / "stepload/train.sh") << train;
    std::string contract = test::read_file(fx / "stepload.contract.toml");
    contract.replace(contract.find("verify = 2"), 10, "verify = 3");
    for (const auto& [from, to] : replace)
        contract.replace(contract.find(from), from.size(), to);
    std::ofstream(d.path / "stepload.contract.toml") << contract;
    campaign::Campaign::init(d.path / "stepload.contract.toml", d.path / "c");
    return d.path / "c";
}

campaign::RunOptions options() {
    campaign::RunOptions o;
    o.verbose = false;
    o.scheduler = "local";
    o.poll = 20ms;
    return o;
}

} // namespace

TEST_CASE("verification: each pair on one node in counterbalanced order, a block's pairs on one node, the "
          "promotion re-checked on another node, MFU ratio equal to the speed-up") {
    test::TempDir d("infrarsi-verification");
    campaign::Campaign c(campaign_dir(d));
    auto sched = std::make_unique<Placed>(d.path, false);
    auto* placed = sched.get();
    c.use_scheduler(std::move(sched));
    c.run(options());
    REQUIRE(c.finished());
    const auto vs = c.store().verifications();
    REQUIRE(vs.size() == 1);
    const auto& v = vs[0];
    CHECK(v.state == store::VerificationState::Done);
    CHECK(v.promoted);
    CHECK(c.store().promotions().size() == 1);
    // The first stage: one block of 2 pairs (a 2x gain crosses at its first look), both on n1 (node-blocked:
    // both arms twice on one node), one in each order, each pair's runs on its node.
    const auto& pairs = v.detail.pairs;
    REQUIRE(pairs.size() == 2);
    std::set<std::string> orders, nodes;
    for (const auto& p : pairs) {
        orders.insert(p.order.value());
        nodes.insert(p.baseline_node.value());
        CHECK(p.same_node.value());
        CHECK(p.baseline_node == p.candidate_node);
        CHECK(p.block == 1);
    }
    CHECK(orders == std::set<std::string>{"AB", "BA"});
    CHECK(nodes == std::set<std::string>{"n1"});
    CHECK(v.detail.first.order_seed);
    // Each pair at a fresh seed of its own (the contract's is 1), both its runs at it.
    std::set<long long> seeds;
    for (const auto& p : pairs) {
        REQUIRE(p.seed);
        seeds.insert(*p.seed);
    }
    CHECK(seeds.size() == 2);
    CHECK_FALSE(seeds.count(1));
    // The sequence of looks: the first stage's crossed (re-check), the re-check's over all 4 pairs promoted.
    const auto& seq = v.detail.sequence;
    REQUIRE(seq.size() == 2);
    CHECK(seq[0].stage == "first");
    CHECK(seq[0].pairs == 2);
    CHECK(seq[0].next == "recheck");
    CHECK(seq[1].stage == "recheck");
    CHECK(seq[1].pairs == 4);
    CHECK(seq[1].next == "promoted");
    CHECK(seq[1].lo > 1.03);
    CHECK(seq[1].lo <= seq[1].estimate);
    CHECK(seq[1].estimate <= seq[1].hi);
    // Each pair's trials ran in its order: the first trial of the pair has the lower array index.
    const auto trials = c.store().trials({.verification_id = v.id});
    for (const auto& p : pairs) {
        const auto a = p.baseline_trial, b = p.candidate_trial;
        int ia = -1, ib = -1;
        for (const auto& t : trials) {
            if (t.id == a) ia = t.array_index;
            if (t.id == b) ib = t.array_index;
        }
        CHECK((p.order == "AB" ? ia < ib : ib < ia));
    }
    // The re-check: a fresh batch, its block on n2 (the first of the nodes the first stage did not use),
    // reproduced.
    REQUIRE(v.detail.recheck);
    CHECK(v.detail.reproduced.value());
    CHECK(v.detail.recheck->batch.value() != v.batch_id);
    REQUIRE(v.detail.recheck->pairs.value().size() == 2);
    std::set<std::string> fresh;
    for (const auto& p : *v.detail.recheck->pairs)
        fresh.insert(p.baseline_node.value());
    CHECK(fresh == std::set<std::string>{"n2"});
    // Every verification array was placed on one node: a pair is its own array(s).
    int pinned = 0;
    for (const auto& pl : placed->placements)
        pinned += pl.size() == 1 && pl[0].rfind("--nodelist=n", 0) == 0;
    // 2 stages x 2 pairs, one array each (the two trials' sbatch options are the same), and each stage's spot
    // check of its patches (the candidate's knobs without them, on the drawn pair's node).
    CHECK(pinned == 6);
    REQUIRE(v.detail.first.spot_check);
    CHECK(v.detail.first.spot_check->state == "passed");
    REQUIRE(v.detail.recheck->spot_check);
    CHECK(v.detail.recheck->spot_check->state == "passed");
    // MFU: one denominator (the calibration of the host the trials ran on, or what a run achieved where that
    // is lower), named with its source, the baseline's model FLOPs; the ratio is the speed-up, never above 1.
    const auto b = c.store().baseline();
    REQUIRE(b);
    REQUIRE(b->peak_flops);
    CHECK(b->peak_flops_source.find("calibration") != std::string::npos);
    REQUIRE(v.detail.mfu);
    const auto& m = *v.detail.mfu;
    if (m.peak_flops != doctest::Approx(*b->peak_flops)) {
        CHECK(m.peak_flops > *b->peak_flops);
        CHECK(m.peak_flops_source.find("lower than achieved") != std::string::npos);
    }
    // The CPU calibration is measured on this host: on a busy one it can come out below what the faster
    // candidate then achieves, and an MFU above 1 is no MFU, said unknown with its reason (never above 1).
    if (!m.candidate || !m.baseline) {
        REQUIRE(m.unknown);
        CHECK(m.unknown->find("above the peak") != std::string::npos);
        return;
    }
    CHECK(m.candidate.value() <= 1.0 + 1e-9);
    CHECK(m.baseline.value() <= 1.0 + 1e-9);
    CHECK(m.candidate.value() / m.baseline.value() == doctest::Approx(*v.speedup));
}

TEST_CASE("a promotion whose re-check does not hold (its pairs' runs on two nodes) is not promoted") {
    test::TempDir d("infrarsi-verification");
    campaign::Campaign c(campaign_dir(d));
    c.use_scheduler(std::make_unique<Placed>(d.path, true));
    c.run(options());
    REQUIRE(c.finished());
    const auto vs = c.store().verifications();
    REQUIRE(vs.size() == 1);
    const auto& v = vs[0];
    CHECK(v.state == store::VerificationState::Done);
    CHECK_FALSE(v.promoted);
    CHECK_FALSE(v.detail.reproduced.value());
    CHECK(c.store().promotions().empty());
    const auto reasons = json(v.detail.reasons).dump();
    CHECK(reasons.find("did not reproduce in a fresh allocation") != std::string::npos);
    CHECK(reasons.find("not one node") != std::string::npos);
}

TEST_CASE("a candidate with no gain stops after its first block: two pairs, not the sequence's sixteen") {
    // `lucky` is fast on its first run only (the search's), as fast as the baseline after.
    test::TempDir d("infrarsi-verification");
    campaign::Campaign c(campaign_dir(d, {{"candidates = [\"fast\"]", "candidates = [\"lucky\"]"}}));
    c.use_scheduler(std::make_unique<Placed>(d.path, false));
    c.run(options());
    REQUIRE(c.finished());
    const auto vs = c.store().verifications();
    REQUIRE(vs.size() == 1);
    const auto& v = vs[0];
    CHECK(v.state == store::VerificationState::Done);
    CHECK_FALSE(v.promoted);
    CHECK(v.detail.pairs.size() == 2);
    REQUIRE(v.detail.sequence.size() == 1);
    CHECK(v.detail.sequence[0].next == "stop");
    CHECK(json(v.detail.evidence).dump().find("a clear loser") != std::string::npos);
    CHECK(json(v.detail.reasons).dump().find("lower bound of the speed-up") != std::string::npos);
    CHECK_FALSE(v.detail.recheck);
    CHECK(c.store().trials({.kinds = {store::TrialKind::VerifyCandidate}}).size() == 2);
}

TEST_CASE("a campaign stopped mid-sequence resumes it: the first stage's block is not run again, the "
          "re-check runs and promotes") {
    test::TempDir d("infrarsi-verification");
    const auto dir = campaign_dir(d);
    std::atomic<bool> stop{false};
    {
        campaign::Campaign c(dir);
        c.use_scheduler(std::make_unique<Placed>(d.path, false));
        auto o = options();
        o.verbose = true;
        o.stop = &stop;
        // Stop right after the first stage's look (it crossed: the re-check is next).
        o.on_event = [&](const std::string& msg) {
            if (msg.find("look over 2 A/B pairs: ") != std::string::npos &&
                msg.find("recheck") != std::string::npos)
                stop = true;
        };
        c.run(o);
        CHECK_FALSE(c.finished());
        const auto vs = c.store().verifications();
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].state == store::VerificationState::Recheck);
        CHECK_FALSE(vs[0].detail.recheck);
        CHECK(vs[0].detail.first.blocks.size() == 1);
    }
    campaign::Campaign c(dir);
    c.use_scheduler(std::make_unique<Placed>(d.path, false));
    c.run(options());
    REQUIRE(c.finished());
    const auto vs = c.store().verifications();
    REQUIRE(vs.size() == 1);
    const auto& v = vs[0];
    CHECK(v.promoted);
    CHECK(v.detail.first.blocks.size() == 1); // the first stage's one block, not run again
    CHECK(v.detail.pairs.size() == 2);
    REQUIRE(v.detail.recheck);
    CHECK(v.detail.recheck->pairs.value().size() == 2);
    REQUIRE(v.detail.sequence.size() == 2);
    CHECK(v.detail.sequence[1].next == "promoted");
    CHECK(c.store().trials({.kinds = {store::TrialKind::VerifyCandidate}}).size() == 4);
    CHECK(c.store().promotions().size() == 1);
}
