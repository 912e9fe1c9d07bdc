#include "model/batch_proposer.hpp"
#include "model/features.hpp"
#include "util/error.hpp"

#include <cmath>
#include <doctest/doctest.h>
#include <random>
#include <set>

using namespace infrarsi;
using namespace infrarsi::model;

namespace {

// A small space with a known runtime and memory: bigger micro-batches and no recompute are faster and
// hungrier; the analytic prior undercounts activations by 1.6x, so trusting it leads into OOMs.
struct World {
    FeatureEncoding enc{
        {{"mb", KnobSpec::Kind::power_of_two, {"1", "2", "4", "8", "16"}, MemoryEffect::increasing, false},
         {"recompute", KnobSpec::Kind::choice, {"none", "selective", "full"}, MemoryEffect::decreasing, true},
         {"tp", KnobSpec::Kind::power_of_two, {"1", "2", "4"}, MemoryEffect::unordered, false}},
        {{"flash", MemoryEffect::decreasing, true}, {"fused", MemoryEffect::none, false}}};
    std::vector<Configuration> configs;
    std::vector<Candidate> cands;
    std::vector<double> time, peak;
    double limit = 80e9;

    World() {
        std::vector<double> prior;
        for (int mb : {1, 2, 4, 8, 16})
            for (int rc = 0; rc < 3; ++rc)
                for (int tp : {1, 2, 4})
                    for (int p = 0; p < 4; ++p) {
                        Configuration c{
                            {{"mb", std::to_string(mb)},
                             {"recompute", std::vector<std::string>{"none", "selective", "full"}[rc]},
                             {"tp", std::to_string(tp)}},
                            {}};
                        bool flash = p & 1, fused = p & 2;
                        if (flash) c.patches.insert("flash");
                        if (fused) c.patches.insert("fused");
                        configs.push_back(c);
                        double states = 48e9 / tp;
                        double act = 5e9 * mb / tp * (rc == 0 ? (flash ? 0.7 : 1.0) : rc == 1 ? 0.7 : 0.15);
                        prior.push_back(states + act);
                        peak.push_back(states + 1.6 * act + 2e9);
                        double eff = 1.0 / (1.0 + 1.5 / mb);
                        time.push_back(1.0 / eff *
                                       (rc == 0   ? 1.0
                                        : rc == 1 ? 1.04
                                                  : 1.33) *
                                       (flash ? 0.8 : 1.0) * (fused ? 0.97 : 1.0) *
                                       (1.0 + 0.12 * std::log2(tp)));
                    }
        cands = build_candidates(enc, configs, prior);
    }
    TrialObservation run(int i, std::mt19937_64& rng) const {
        std::normal_distribution<double> z(0, 0.01);
        TrialObservation t;
        t.candidate = i;
        if (peak[i] > limit) {
            t.outcome = ObservationKind::oom;
            t.cost_s = 100;
            return t;
        }
        t.step_time_s = time[i] * std::exp(z(rng));
        t.peak_bytes = peak[i];
        t.cost_s = 60 + 20 * t.step_time_s;
        return t;
    }
    ProposerSettings settings() const {
        ProposerSettings s;
        s.memory_limit_bytes = limit;
        s.noise_variance = 1e-4;
        s.hints = {0};
        return s;
    }
};

bool needs_at_least(const Candidate& a, const Candidate& b) {
    return (a.memory_key.array() >= b.memory_key.array()).all();
}

} // namespace

TEST_CASE("proposals never repeat an OOM, never need more memory than an OOM, and are distinct in a batch") {
    World w;
    std::mt19937_64 rng(7);
    BatchProposer proposer;
    std::vector<TrialObservation> trials;
    int ooms = 0, pairings = 0;
    for (int round = 0; round < 10; ++round) {
        auto batch = proposer.propose(w.cands, trials, 4, w.settings());
        // Short only when few candidates have gain left; empty only with the reason to stop.
        CHECK(batch.size() <= 4);
        CHECK(batch.empty() != proposer.stop_reason().empty());
        if (batch.empty()) break;
        std::set<int> in_batch;
        for (const auto& p : batch) {
            CHECK(in_batch.insert(p.candidate).second);
            CHECK_FALSE(p.reason.empty());
            const bool again = p.reason.rfind("re-measure", 0) == 0; // a candidate measured once, again
            for (const auto& t : trials) {
                CHECK((again || t.candidate != p.candidate));
                if (t.outcome == ObservationKind::oom)
                    CHECK_MESSAGE(!needs_at_least(w.cands[p.candidate], w.cands[t.candidate]),
                                  w.cands[p.candidate].id << " needs at least the memory of OOMed "
                                                          << w.cands[t.candidate].id);
            }
            if (p.reason.find("paired with") != std::string::npos) {
                ++pairings;
                // The pair is a declared saver (one or two steps) of the candidate named in the reason.
                bool declared = false;
                for (const auto& c : w.cands)
                    if (p.reason.find("paired with " + c.id + " ") != std::string::npos)
                        for (const auto& a : c.savers) {
                            declared = declared || a.candidate == p.candidate;
                            for (const auto& b : w.cands[a.candidate].savers)
                                declared = declared || b.candidate == p.candidate;
                        }
                CHECK(declared);
                CHECK(p.reason.find("P(OOM)=") != std::string::npos);
            }
        }
        for (const auto& p : batch) {
            trials.push_back(w.run(p.candidate, rng));
            ooms += trials.back().outcome == ObservationKind::oom;
        }
    }
    CHECK(pairings >= 1);
    // The campaign found a configuration within 5% of the best that fits, with few OOMs.
    double best = 1e9, found = 1e9;
    for (size_t i = 0; i < w.cands.size(); ++i)
        if (w.peak[i] <= w.limit) best = std::min(best, w.time[i]);
    for (const auto& t : trials)
        if (t.outcome == ObservationKind::ok) found = std::min(found, w.time[t.candidate]);
    CHECK(found <= 1.05 * best);
    CHECK(ooms <= 8);
}

TEST_CASE("the initial design starts from the hints and spreads over the space") {
    World w;
    BatchProposer proposer;
    auto s = w.settings();
    s.hints = {5, 100};
    auto batch = proposer.propose(w.cands, {}, 6, s);
    REQUIRE(batch.size() == 6);
    CHECK(batch[0].candidate == 5);
    CHECK(batch[1].candidate == 100);
    std::set<int> distinct;
    double min_dist = 1e9;
    for (size_t i = 0; i < batch.size(); ++i) {
        distinct.insert(batch[i].candidate);
        CHECK(batch[i].p_oom <= 0.5 + 1e-9 * (i < 2)); // hints excepted from the bound by design, here safe
        for (size_t j = 0; j < i; ++j)
            min_dist = std::min(
                min_dist,
                (w.cands[batch[i].candidate].features - w.cands[batch[j].candidate].features).norm());
    }
    CHECK(distinct.size() == 6);
    CHECK(min_dist >= 1.0); // space-filling: no two differ by a single patch (distance 1 at least)
}

TEST_CASE("memory_dominated excludes what needs at least the memory of an OOM, and only that") {
    World w;
    // OOM at mb=4, recompute=none, tp=1, no patches.
    int oom = -1;
    for (size_t i = 0; i < w.cands.size(); ++i)
        if (w.cands[i].id == "mb=4 recompute=none tp=1") oom = static_cast<int>(i);
    REQUIRE(oom >= 0);
    TrialObservation t;
    t.candidate = oom;
    t.outcome = ObservationKind::oom;
    auto excluded = memory_dominated(w.cands, {t});
    for (size_t i = 0; i < w.cands.size(); ++i) {
        const auto& c = w.configs[i];
        bool hungrier = std::stoi(c.knobs.at("mb")) >= 4 && c.knobs.at("recompute") == "none" &&
                        c.knobs.at("tp") == "1" && !c.patches.count("flash");
        CHECK_MESSAGE(bool(excluded[i]) == hungrier, w.cands[i].id);
    }
}

TEST_CASE("the proposer rejects inconsistent input with a message") {
    World w;
    BatchProposer proposer;
    auto s = w.settings();
    TrialObservation t;
    t.candidate = 100000;
    CHECK_THROWS_WITH_AS(proposer.propose(w.cands, {t}, 4, s), doctest::Contains("candidate 100000"), Error);
    s.memory_limit_bytes = 0;
    CHECK_THROWS_WITH_AS(proposer.propose(w.cands, {}, 4, s), doctest::Contains("memory limit"), Error);
}

// The steps of propose(), one at a time.

TEST_CASE("proposal step 1: the hard rules exclude what was tried, what OOMed and what needs at least its "
          "memory, and nothing else") {
    World w;
    std::mt19937_64 rng(3);
    int oomed = -1, ok = -1;
    for (int i = 0; i < static_cast<int>(w.cands.size()); ++i) {
        if (w.peak[i] > w.limit && oomed < 0) oomed = i;
        if (w.peak[i] <= w.limit && ok < 0) ok = i;
    }
    REQUIRE(oomed >= 0);
    REQUIRE(ok >= 0);
    const std::vector<TrialObservation> trials = {w.run(oomed, rng), w.run(ok, rng)};
    const auto excluded = excluded_candidates(w.cands, trials);
    CHECK(excluded[oomed]);
    CHECK(excluded[ok]);
    const auto dominated = memory_dominated(w.cands, trials);
    for (size_t c = 0; c < w.cands.size(); ++c)
        CHECK(bool(excluded[c]) == (dominated[c] || static_cast<int>(c) == ok));
}

TEST_CASE("proposal step 2: the memory model learns measured peaks and OOMs censored at the limit, nothing "
          "from a failure or a trial without a peak") {
    World w;
    std::vector<TrialObservation> trials(4);
    trials[0] = {0, ObservationKind::ok, 1.0, 5e9, 60};
    trials[1] = {1, ObservationKind::ok, 1.0, 0, 60}; // no peak measured
    trials[2] = {2, ObservationKind::oom, 0, 0, 30};
    trials[3] = {3, ObservationKind::failed, 0, 0, 10};
    const auto points = memory_points(w.cands, trials, w.limit);
    REQUIRE(points.size() == 2);
    CHECK_FALSE(points[0].censored);
    CHECK(points[0].bytes == 5e9);
    CHECK(points[0].prior_peak_bytes == w.cands[0].prior_peak_bytes);
    CHECK(points[1].censored);
    CHECK(points[1].bytes == w.limit);
}

TEST_CASE("proposal step 3: hints come first, each once, up to the batch size, never an excluded one") {
    World w;
    std::vector<char> excluded(w.cands.size(), 0);
    excluded[1] = 1;
    BatchDraft batch(excluded);
    add_hints(
        batch, {1, 2, 2, 3, 4}, [](int) { return 0.1; }, 2);
    REQUIRE(batch.size() == 2);
    CHECK(batch.proposals()[0].candidate == 2);
    CHECK(batch.proposals()[1].candidate == 3);
    CHECK(batch.proposals()[0].reason.find("hint") == 0);
    CHECK_FALSE(batch.allowed(2));
}

TEST_CASE("proposal step 4: the space-filling design fills the batch with distinct candidates that look "
          "safe, away from what was tried") {
    World w;
    std::mt19937_64 rng(5);
    const std::vector<TrialObservation> trials = {{0, ObservationKind::ok, 1.0, 5e9, 60}};
    BatchDraft batch(excluded_candidates(w.cands, trials));
    // Candidates with an even index "fit"; the others look certain to OOM.
    add_space_filling(
        batch, w.cands, trials, [](int c) { return c % 2 ? 0.9 : 0.1; }, 6, 0.5, rng);
    REQUIRE(batch.size() == 6);
    std::set<int> seen;
    for (const auto& p : batch.proposals()) {
        CHECK(seen.insert(p.candidate).second);
        CHECK(p.candidate % 2 == 0);
        CHECK(p.candidate != 0);
        CHECK(p.reason.find("space-filling initial design: distance ") == 0);
        CHECK((w.cands[p.candidate].features - w.cands[0].features).norm() > 0);
    }
    // Nothing looks safe: the least risky quarter is used instead of nothing.
    BatchDraft risky(std::vector<char>(w.cands.size(), 0));
    add_space_filling(
        risky, w.cands, {}, [](int c) { return 0.6 + 0.001 * c; }, 3, 0.5, rng);
    CHECK(risky.size() == 3);
}

TEST_CASE("proposal steps 5 and 6: the pool holds the nearest neighbours and savers of the best tried "
          "candidates and a random sample, never an excluded one, a large pool is cut to the exact size") {
    World w;
    std::mt19937_64 rng(7);
    auto s = w.settings();
    s.neighbours = 5;
    s.pool_size = 20;
    std::vector<char> excluded(w.cands.size(), 0);
    const int best = 7;
    excluded[best] = 1;
    BatchDraft batch(excluded);
    const auto pool = candidate_pool(w.cands, {best}, batch, s, rng);
    std::set<int> in(pool.begin(), pool.end());
    CHECK(in.size() == pool.size());
    CHECK_FALSE(in.count(best));
    CHECK(pool.size() <= 5 + w.cands[best].savers.size() + 20);
    for (const auto& sv : w.cands[best].savers)
        CHECK(in.count(sv.candidate));
    // The 5 nearest are the first (savers may be among them).
    std::vector<std::pair<double, int>> dist;
    for (int c = 0; c < static_cast<int>(w.cands.size()); ++c)
        if (c != best) dist.push_back({(w.cands[c].features - w.cands[best].features).squaredNorm(), c});
    std::sort(dist.begin(), dist.end());
    for (size_t i = 0; i < pool.size() && i < 5; ++i)
        CHECK((w.cands[pool[i]].features - w.cands[best].features).squaredNorm() <= dist[4].first + 1e-12);

    // Prescreening needs a fitted runtime model.
    std::vector<TrialObservation> trials;
    for (int c : {0, 20, 40, 60, 80, 100})
        trials.push_back(w.run(c, rng));
    BatchProposer proposer;
    s.min_model_points = 3;
    proposer.propose(w.cands, trials, 1, s);
    REQUIRE(proposer.runtime_model_fitted());
    s.exact_pool = 10;
    const auto cut = prescreen_pool(
        pool, w.cands, proposer.runtime_model(), 0.0, [](int) { return 0.1; }, s);
    CHECK(cut.size() == 10);
    for (int c : cut)
        CHECK(in.count(c));
    s.exact_pool = 1000;
    CHECK(prescreen_pool(
              pool, w.cands, proposer.runtime_model(), 0.0, [](int) { return 0.1; }, s) == pool);
}

TEST_CASE("proposal step 7: believing a pick leaves the means, shrinks its own variance and its neighbours' "
          "EI, steps 8 and 9 fill the batch by acquisition") {
    World w;
    std::mt19937_64 rng(11);
    std::vector<TrialObservation> trials;
    for (int c : {0, 30, 60, 90, 120, 150, 170})
        if (w.peak[c] <= w.limit) trials.push_back(w.run(c, rng));
    REQUIRE(trials.size() >= 3);
    BatchProposer proposer;
    auto s = w.settings();
    s.hints.clear();
    proposer.propose(w.cands, trials, 1, s);
    REQUIRE(proposer.runtime_model_fitted());
    ScoredPool pool(
        proposer.runtime_model(), w.cands, [](int) { return 0.0; }, std::log(0.9), s);
    pool.add({1, 2, 3, 4});
    REQUIRE(pool.size() == 4);
    CHECK(pool.position(3) == 2u);
    CHECK_FALSE(pool.position(99));
    const double step = pool.predicted_step_s(1), var = pool.variance(1), var_other = pool.variance(0);
    pool.believe(1);
    CHECK(pool.predicted_step_s(1) == doctest::Approx(step));
    CHECK(pool.variance(1) < var);
    CHECK(pool.variance(0) <= var_other);

    s.min_expected_improvement = 0; // the pool's settings: every candidate counts, however small its gain
    BatchDraft batch(std::vector<char>(w.cands.size(), 0));
    add_memory_saver_pair(pool, batch, w.cands, s, 3); // nothing here may OOM: no pair
    CHECK(batch.size() == 0);
    add_by_acquisition(pool, batch, 3);
    REQUIRE(batch.size() == 3);
    // The first pick had the highest acquisition among the four.
    std::set<int> taken;
    for (const auto& p : batch.proposals())
        CHECK(taken.insert(p.candidate).second);
    CHECK(batch.proposals()[0].reason.find("EI=") == 0);
}
