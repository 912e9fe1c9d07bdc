// The promotion rule's error rates on simulated data, and its parts: the sequence of looks
// (verify/sequential.hpp), the robust pair statistic and the outlier screen (verify/robust.hpp), and the
// [verify] contract keys. The simulations drive the same functions the campaign's verification stage calls
// for its decisions (verify::decide, verify::after_look, verify::after_recheck), block by block as it does.
#include "contract/contract.hpp"
#include "util/error.hpp"
#include "verify/robust.hpp"
#include "verify/sequential.hpp"
#include "verify/verify.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

using namespace infrarsi;

namespace {

constexpr int kSteps = 8;

contract::Contract sim_contract() {
    contract::Contract c;
    c.invariants.steps = kSteps;
    c.invariants.loss_last_k = 3;
    c.invariants.loss_mode = contract::LossMode::LastKMean;
    c.resources.mem = "1000G";
    c.resources.mem_bytes = 1000LL << 30;
    return c;
}

std::vector<double> curve() {
    std::vector<double> l;
    for (int i = 0; i < kSteps; ++i)
        l.push_back(4.0 - 0.2 * i);
    return l;
}

// One complete run on n1 at `step_s`, its losses the reference curve.
verify::Arm one_node_arm(double step_s, bool first) {
    verify::Arm a;
    a.ok = true;
    a.step_s = step_s;
    a.losses = curve();
    a.peak_memory_bytes = 1e8;
    a.node = "n1";
    a.first = first;
    return a;
}

// One run: `steps` per-step times around exp(level), 3% step noise; `stall`: one step 10x as long.
verify::Arm run(double level, const std::string& node, bool first, std::mt19937_64& rng, bool stall = false) {
    verify::Arm a;
    a.ok = true;
    a.losses = curve();
    a.peak_memory_bytes = 1e8;
    a.node = node;
    a.first = first;
    std::normal_distribution<double> step(0, 0.03);
    for (int i = 0; i < 12; ++i)
        a.step_samples.push_back(std::exp(level + step(rng)));
    if (stall) a.step_samples[5] *= 10;
    a.step_s = a.step_samples[0];
    std::vector<double> s = a.step_samples;
    std::sort(s.begin(), s.end());
    a.step_s = (s[5] + s[6]) / 2;
    return a;
}

// One candidate's whole verification, the campaign's way: a doctor of 5 runs at 2% noise on one node, then
// blocks of two pairs (one AB, one BA) over 4 nodes 8% apart, at 3% run noise (the verification's host is
// noisier than the doctor's), a pair's second run 3% faster; on a crossing, blocks on the nodes not used yet.
// Returns whether it was promoted, and the pairs it took.
// `slow_p` > 0: a bimodal host, each run (the doctor's too) in a slow mode 1/0.74 as long with that chance.
std::pair<bool, int> verification(double effect, const verify::Design& s, std::mt19937_64& rng,
                                  double slow_p = 0) {
    std::normal_distribution<double> node_sd(0, 0.08), run_noise(0, 0.03), doctor_noise(0, 0.02);
    std::bernoulli_distribution slow(slow_p);
    const double gap = std::log(1 / 0.74);
    auto mode = [&] { return slow_p > 0 && slow(rng) ? gap : 0.0; };
    std::vector<std::string> nodes = {"n1", "n2", "n3", "n4"};
    std::map<std::string, double> speed;
    for (const auto& n : nodes)
        speed[n] = node_sd(rng);
    std::vector<double> doctor;
    for (int i = 0; i < 5; ++i)
        doctor.push_back(std::exp(speed["n1"] + doctor_noise(rng) + mode()));
    const auto prior = verify::doctor_prior(doctor);
    const auto c = sim_contract();
    std::vector<std::pair<verify::Arm, verify::Arm>> pairs, fresh;
    auto block = [&](const std::vector<std::string>& on, int before) {
        const auto orders = verify::block_orders(rng());
        auto placed = verify::spread_pairs(before + verify::Design::kBlock, on);
        std::vector<std::pair<verify::Arm, verify::Arm>> out;
        for (int i = 0; i < verify::Design::kBlock; ++i) {
            const auto& node = placed[before + i][0];
            const bool ab = orders[i] == verify::PairOrder::AB;
            const double order = std::log(0.97);
            auto a = run(speed[node] + run_noise(rng) + (ab ? 0 : order) + mode(), node, ab, rng);
            auto b = run(speed[node] - std::log(effect) + run_noise(rng) + (ab ? order : 0) + mode(), node,
                         !ab, rng);
            out.emplace_back(a, b);
        }
        return out;
    };
    for (;;) {
        const auto more = block(nodes, static_cast<int>(pairs.size()));
        pairs.insert(pairs.end(), more.begin(), more.end());
        const int n = static_cast<int>(pairs.size());
        const auto next =
            verify::after_look(s, verify::decide(pairs, curve(), c, s.rule(n), false, prior), n, true);
        if (next == verify::Next::Stop) return {false, n};
        if (next == verify::Next::Recheck) break;
    }
    std::vector<std::string> rest;
    for (const auto& n : nodes) {
        bool used = false;
        for (const auto& p : pairs)
            used = used || p.first.node == n;
        if (!used) rest.push_back(n);
    }
    if (rest.empty()) rest = nodes;
    for (;;) {
        const auto more = block(rest, static_cast<int>(fresh.size()));
        fresh.insert(fresh.end(), more.begin(), more.end());
        pairs.insert(pairs.end(), more.begin(), more.end());
        const int n = static_cast<int>(pairs.size());
        const auto all = verify::decide(pairs, curve(), c, s.rule(n), false, prior);
        const auto own = verify::decide(fresh, curve(), c, s.rule(n), false, prior);
        const auto next = verify::after_recheck(s, all, own.speedup, n, true);
        if (next != verify::Next::More) return {next == verify::Next::Promoted, n};
    }
}

} // namespace

TEST_CASE("the rule's error rates: 2000 A/A verifications promote at most 1.5%, a true 1.10x at 2% noise is "
          "promoted at least 85% of the time, a 1.25x at least 99%") {
    const verify::Design s; // the defaults: min_speedup 3%, alpha 1% over 2 candidates, 16 pairs at most
    std::mt19937_64 rng(20261206);
    int false_promotions = 0, aa_pairs = 0;
    for (int i = 0; i < 2000; ++i) {
        const auto [promoted, pairs] = verification(1.0, s, rng);
        false_promotions += promoted;
        aa_pairs += pairs;
    }
    CHECK(false_promotions <= 30);
    // The boundary itself (a true gain of exactly min_speedup) is what alpha bounds per candidate.
    int at_threshold = 0;
    for (int i = 0; i < 1000; ++i)
        at_threshold += verification(1.0 + s.min_speedup, s, rng).first;
    // alpha / 2 = 0.5% per candidate where the doctor measured the verification's noise; here the
    // verification's runs are 1.5x noisier than the doctor's (a prior that is too small at the first looks):
    // measured 13/1000 with this seed when pairs were spread one a node, 16/1000 node-blocked (the same
    // rate: bench_verify --effect 1.03, 4 seeds x 2000, 1.53% spread and 1.54% node-blocked); 20/1000 at
    // 24 pairs at most instead of 16 (bench_verify --effect 1.03, 4 seeds x 2000: 2.0% against 1.8%).
    CHECK(at_threshold <= 25);
    int power = 0, power25 = 0, pairs25 = 0;
    for (int i = 0; i < 500; ++i)
        power += verification(1.10, s, rng).first;
    for (int i = 0; i < 300; ++i) {
        const auto [promoted, pairs] = verification(1.25, s, rng);
        power25 += promoted;
        pairs25 += pairs;
    }
    CHECK(power >= 425);
    CHECK(power25 >= 297);
    // A clear winner decides early: a 1.25x takes few pairs on average, the re-check's block included.
    CHECK(pairs25 / 300.0 < 8);
    MESSAGE("A/A false promotions ", false_promotions, "/2000 (", aa_pairs / 2000.0,
            " pairs each); at 1 + "
            "min_speedup ",
            at_threshold, "/1000; power 1.10x ", power, "/500, 1.25x ", power25, "/300");
}

TEST_CASE("a bimodal host (each run 1/0.74 as slow with chance 0.3): 1000 A/A verifications promote at "
          "most 1%, a true 1.10x is promoted at least 80% of the time (7% when a pair's modes were not told "
          "apart)") {
    const verify::Design s;
    std::mt19937_64 rng(20261207);
    int false_promotions = 0, power = 0;
    for (int i = 0; i < 1000; ++i)
        false_promotions += verification(1.0, s, rng, 0.3).first;
    for (int i = 0; i < 500; ++i)
        power += verification(1.10, s, rng, 0.3).first;
    // Measured with this seed: 8/1000 and 451/500 at 24 pairs at most (7/1000 and 354/500 at 16; 331/500
    // at 16 before a doctor's split was confirmed by the
    // pairs' own gap and the futility bound took the plain mean's too; 225/500 when the gap's error was
    // charged as 3 standard errors on every pair brought back); docs/orchestrator.md has bench-verify's
    // figures over seeds and says where the rest goes.
    CHECK(false_promotions <= 10);
    CHECK(power >= 400);
    MESSAGE("bimodal: A/A false promotions ", false_promotions, "/1000; power 1.10x ", power, "/500");
}

TEST_CASE("mode_adjusted_interval: the gap fitted with the speed-up from the same pairs, its error in the "
          "interval, and no fit where the pairs cannot tell the gap from the speed-up or the order effect") {
    const double g = std::log(1 / 0.74), mu = 0.1, delta = 0.02;
    // Eight pairs, four an order: offsets 0, +1, 0, -1 in each order, a little noise.
    const std::vector<double> offsets = {0, 1, 0, -1, 0, 1, 0, -1};
    const std::vector<bool> ab = {true, true, true, true, false, false, false, false};
    const std::vector<double> noise = {0.004, -0.003, 0.002, -0.001, -0.004, 0.003, -0.002, 0.001};
    std::vector<double> d;
    for (std::size_t i = 0; i < offsets.size(); ++i)
        d.push_back(mu + (ab[i] ? delta : -delta) + g * offsets[i] + noise[i]);
    verify::NoisePrior none;
    double order = 0;
    const auto iv = verify::mode_adjusted_interval(d, ab, offsets, none, 0.99, &order);
    REQUIRE(iv);
    CHECK(iv->estimate == doctest::Approx(mu).epsilon(0.05));
    CHECK(order == doctest::Approx(delta).epsilon(0.1));
    CHECK(iv->lo < mu);
    CHECK(iv->hi > mu);
    // The same pairs, the gap's multiple taken off with a gap 3% too small: the plain interval misses mu by
    // what the wrong gap leaves in the pairs; the fitted one has no gap to get wrong.
    std::vector<double> brought;
    for (std::size_t i = 0; i < d.size(); ++i)
        brought.push_back(d[i] - 0.97 * g * offsets[i]);
    const auto plain = verify::order_adjusted_interval(brought, ab, none, 0.99);
    CHECK(plain.hi - plain.lo > iv->hi - iv->lo);
    // Offsets alike within each order (every AB pair mixed, every BA pair not): the order effect and the gap
    // cannot be told apart.
    CHECK_FALSE(verify::mode_adjusted_interval(d, ab, {1, 1, 1, 1, 0, 0, 0, 0}, none, 0.99));
    // All alike, or an offset of two modes (a cluster index from a gap far under the pairs' spread): none.
    CHECK_FALSE(verify::mode_adjusted_interval(d, ab, std::vector<double>(8, 1.0), none, 0.99));
    CHECK_FALSE(verify::mode_adjusted_interval(d, ab, {0, 2, 0, -1, 0, 1, 0, -1}, none, 0.99));
    // Three pairs and three parameters: no degree of freedom left without a prior.
    CHECK_FALSE(
        verify::mode_adjusted_interval({0.1, 0.4, -0.2}, {true, false, true}, {0, 1, -1}, none, 0.99));
}

TEST_CASE("pair_modes: the pairs' clusters a gap apart, the same-mode cluster told by the runs' levels on "
          "their node, what they cannot tell taken against the candidate") {
    const double g = std::log(1 / 0.74);
    // Four pairs on two nodes, a true log speed-up of 0.1; on n1 pair 1 both fast, pair 2 both slow; on n2
    // pair 3 with its candidate slow, pair 4 with its baseline slow. Each node saw both modes of each arm.
    const std::vector<double> la = {0.0, g, 0.0, g}, lb = {-0.1, -0.1 + g, -0.1 + g, -0.1};
    std::vector<double> d;
    for (int i = 0; i < 4; ++i)
        d.push_back(la[i] - lb[i]);
    const std::vector<std::string> nodes = {"n1", "n1", "n2", "n2"};
    const auto pm = verify::pair_modes(d, la, lb, nodes, g);
    CHECK(pm.votes == 4);
    CHECK(pm.low == std::vector<double>{0, 0, -1, 1});
    CHECK(pm.low == pm.high);
    CHECK(pm.measured);
    CHECK(pm.gap == doctest::Approx(g));
    // Without the levels (each node saw one mode of each arm), the clusters alone cannot say which is the
    // same-mode one: the lower bound takes the smallest speed-up any pairing allows, the futility bound the
    // largest.
    const std::vector<double> d2 = {0.1, 0.1 + g, 0.1 + g, 0.1};
    const auto none = verify::pair_modes(d2, {0, 0, 0, 0}, {0, 0, 0, 0}, nodes, g);
    CHECK(none.votes == 0);
    CHECK(none.low == std::vector<double>{0, 1, 1, 0});    // the speed-up is the lower cluster's, 0.1
    CHECK(none.high == std::vector<double>{-1, 0, 0, -1}); // or the upper one's, 0.1 + g
}

TEST_CASE("a doctor whose runs split 3 and 2 between two modes gives its gap to the pairs: its run noise is "
          "the spread of its densest half, not a median absolute deviation the other mode inflates") {
    const std::vector<double> doctor = {1.0, 1.03, 0.985, 1.36, 1.38};
    const auto prior = verify::doctor_prior(doctor);
    REQUIRE(prior.mode_gap > 0);
    // The MAD of 5 runs split 3/2 is the range of the 3 (0.066 here): 6 sqrt(2) of it is over the gap.
    CHECK(6 * std::sqrt(2.0) * prior.cv_robust > prior.mode_gap);
    CHECK(prior.cv_core < prior.cv_robust / 1.5);
    CHECK(6 * std::sqrt(2.0) * std::max(prior.cv_core, prior.cv_within) < prior.mode_gap);
    const auto c = sim_contract();
    auto arm = [](double step_s, bool first) { return one_node_arm(step_s, first); };
    const std::vector<std::pair<verify::Arm, verify::Arm>> pairs = {{arm(1.0, true), arm(0.91, false)},
                                                                    {arm(1.0, false), arm(0.91, true)}};
    const auto d = verify::decide(pairs, curve(), c, verify::Design{}.rule(2), false, prior);
    bool doctor_gap = false;
    for (const auto& e : d.evidence)
        doctor_gap = doctor_gap || e.find("the doctor's runs in two modes") != std::string::npos;
    CHECK(doctor_gap);
}

TEST_CASE("a doctor's split that its own runs cannot tell from chance is used when the pairs show the same "
          "gap") {
    // Three runs of the fast mode 6% apart, two of the slow one: the split clears 6 within-mode standard
    // deviations, but not 6 sqrt(2) of the densest half's spread.
    const auto prior = verify::doctor_prior(std::vector<double>{1.0, 1.06, 1.03, 1.35, 1.37});
    REQUIRE(prior.mode_gap > 0);
    REQUIRE(6 * std::sqrt(2.0) * std::max(prior.cv_core, prior.cv_within) > prior.mode_gap);
    const auto c = sim_contract();
    auto arm = [](double step_s, bool first) { return one_node_arm(step_s, first); };
    auto doctor_modes_used = [&](const std::vector<double>& d) {
        std::vector<std::pair<verify::Arm, verify::Arm>> pairs;
        for (std::size_t i = 0; i < d.size(); ++i)
            pairs.emplace_back(arm(0.9 * std::exp(d[i]), i % 2 == 0), arm(0.9, i % 2 == 1));
        const auto dec = verify::decide(pairs, curve(), c, verify::Design{}.rule(6), false, prior);
        bool used = false;
        for (const auto& e : dec.evidence)
            used = used || e.find("the doctor's runs in two modes") != std::string::npos;
        return used;
    };
    // A 1.10x; two of six pairs with the baseline in the slow mode, one in each order: the doctor's gap.
    CHECK(doctor_modes_used({0.10, 0.09, 0.11, 0.37, 0.38, 0.08}));
    // The pairs in one mode: nothing confirms the doctor's split.
    CHECK_FALSE(doctor_modes_used({0.10, 0.09, 0.11, 0.10, 0.09, 0.08}));
    // A second cluster at half the doctor's gap is another gap, not the doctor's.
    CHECK_FALSE(doctor_modes_used({0.10, 0.09, 0.11, 0.24, 0.25, 0.08}));
}

TEST_CASE("pairs_mode_gap: the pairs' own gap, looked for within each order and judged by the spread within "
          "the clusters pooled over both orders") {
    // Three pairs an order, two in one cluster and one a gap below: too few in one order to judge the
    // spread within the clusters, enough in both.
    const std::vector<double> d = {0.03, 0.33, 0.35, -0.03, 0.27, 0.29};
    const std::vector<bool> ab = {true, true, true, false, false, false};
    CHECK(verify::pairs_mode_gap({0.03, 0.33, 0.35}, 0.1) == 0);
    CHECK(verify::pairs_mode_gap(d, 0.1, ab) == doctest::Approx(0.31).epsilon(0.01));
    // A gap that the noise within the clusters makes (6 of their standard deviations are more) is none.
    CHECK(verify::pairs_mode_gap({0.0, 0.06, 0.25, 0.33, -0.02, 0.05, 0.22, 0.31}, 0.1,
                                 {true, true, true, true, false, false, false, false}) == 0);
    // Below the floor the caller sets (8 pair noise standard deviations at the doctor's spread): none.
    CHECK(verify::pairs_mode_gap(d, 0.4, ab) == 0);
}

TEST_CASE("doctor_modes: two modes a gap apart are told, one mode with a little noise is not") {
    const auto two = verify::doctor_modes({1.0, 1.01, 0.99, 1.35, 1.0});
    CHECK(two.gap == doctest::Approx(std::log(1.35 / 1.0)).epsilon(0.02));
    CHECK(two.dof == 3);
    CHECK(verify::doctor_modes({1.0, 1.01, 0.99, 1.02, 1.0}).gap == 0);
    CHECK(verify::doctor_modes({1.0, 1.35, 1.0}).gap == 0); // fewer than 4 runs: not told
}

TEST_CASE("the looks spend the campaign's alpha: each candidate's looks sum to alpha / verify_top, later "
          "looks more") {
    verify::Design s;
    s.alpha = 0.01;
    s.candidates = 2;
    s.max_pairs = 16;
    CHECK(s.looks() == 8);
    CHECK(s.first_stage_pairs() == 14);
    double total = 0;
    for (int pairs = 2; pairs <= 16; pairs += 2) {
        total += s.look_alpha(pairs);
        if (pairs > 2) CHECK(s.look_alpha(pairs) > s.look_alpha(pairs - 2));
    }
    CHECK(total == doctest::Approx(0.005));
    CHECK(s.rule(6).min_speedup == 0.03);
    CHECK(s.rule(6).alpha == doctest::Approx(0.005 * 3 / 36));
}

TEST_CASE("a first block whose two pairs disagree far beyond the doctor's noise is no reason to stop: a "
          "1.10x whose candidate ran once in a bimodal host's slow mode takes another block") {
    const verify::Design s;
    const auto c = sim_contract();
    std::mt19937_64 rng(11);
    // A doctor that saw one mode (1% noise); the candidate 1.10x, its first-run pair in the slow mode.
    const auto prior = verify::doctor_prior(std::vector<double>{1.0, 1.02, 0.99, 1.01, 0.98});
    const double slow = std::log(1 / 0.74);
    std::vector<std::pair<verify::Arm, verify::Arm>> p;
    p.emplace_back(run(0, "n1", true, rng), run(-std::log(1.10), "n1", false, rng));
    p.emplace_back(run(0, "n1", false, rng), run(-std::log(1.10) + slow, "n1", true, rng));
    const auto d = verify::decide(p, curve(), c, s.rule(2), false, prior);
    // Order-adjusted, the two pairs' difference is all order effect and the interval the doctor's 1%: its
    // upper bound alone would call this candidate futile.
    CHECK(verify::order_adjusted_interval({std::log(p[0].first.step_s / p[0].second.step_s),
                                           std::log(p[1].first.step_s / p[1].second.step_s)},
                                          {true, false}, prior, 1 - 2 * s.rule(2).futility_alpha)
              .hi < std::log(1 + s.rule(2).min_speedup));
    CHECK_FALSE(d.futile);
    CHECK_FALSE(d.promoted);
    CHECK(verify::after_look(s, d, 2, true) == verify::Next::More);
}

TEST_CASE("a clear loser stops after its first block, a clear winner goes to its re-check after it") {
    const verify::Design s;
    const auto c = sim_contract();
    std::mt19937_64 rng(7);
    const auto prior = verify::doctor_prior(std::vector<double>{1.0, 1.02, 0.99, 1.01, 0.98});
    auto block = [&](double effect) {
        std::vector<std::pair<verify::Arm, verify::Arm>> p;
        p.emplace_back(run(0, "n1", true, rng), run(-std::log(effect), "n1", false, rng));
        p.emplace_back(run(0, "n2", false, rng), run(-std::log(effect), "n2", true, rng));
        return p;
    };
    const auto loser = verify::decide(block(0.8), curve(), c, s.rule(2), false, prior);
    CHECK(loser.futile);
    CHECK(verify::after_look(s, loser, 2, true) == verify::Next::Stop);
    const auto winner = verify::decide(block(1.6), curve(), c, s.rule(2), false, prior);
    CHECK(winner.promoted);
    CHECK(verify::after_look(s, winner, 2, true) == verify::Next::Recheck);
    // Undecided (a 1.05x): another block, until the first stage's cap or the budget.
    const auto close = verify::decide(block(1.05), curve(), c, s.rule(2), false, prior);
    CHECK_FALSE(close.promoted);
    CHECK_FALSE(close.settled);
    CHECK(verify::after_look(s, close, 2, true) == verify::Next::More);
    CHECK(verify::after_look(s, close, 2, false) == verify::Next::Stop);
    CHECK(verify::after_look(s, close, s.first_stage_pairs(), true) == verify::Next::Stop);
    // A reason more pairs do not change (math_changing) stops the sequence however fast.
    const auto math = verify::decide(block(1.6), curve(), c, s.rule(2), true, prior);
    CHECK(math.settled);
    CHECK(verify::after_look(s, math, 2, true) == verify::Next::Stop);
    // The re-check: promoted when the look over all the pairs crosses again and the fresh pairs show a gain.
    CHECK(verify::after_recheck(s, winner, 1.5, 4, true) == verify::Next::Promoted);
    CHECK(verify::after_recheck(s, winner, 0.99, 4, true) == verify::Next::More);
    CHECK(verify::after_recheck(s, close, 1.05, 4, true) == verify::Next::More);
    CHECK(verify::after_recheck(s, close, 1.05, s.max_pairs, true) == verify::Next::Stop);
    CHECK(verify::after_recheck(s, math, 1.6, 4, true) == verify::Next::Stop);
}

TEST_CASE("one stalled step does not move a pair's log-ratio, the Hodges-Lehmann shift of the steps") {
    std::mt19937_64 rng(3);
    const auto a = run(0.0, "n1", true, rng);
    const auto b = run(-std::log(1.2), "n1", false, rng);
    auto stalled = b;
    stalled.step_samples[3] *= 20;
    const double clean = verify::robust_pair_log_ratio(a.step_samples, a.step_s, b.step_samples, b.step_s);
    const double with_stall =
        verify::robust_pair_log_ratio(a.step_samples, a.step_s, stalled.step_samples, stalled.step_s);
    CHECK(clean == doctest::Approx(std::log(1.2)).epsilon(0.1));
    CHECK(std::fabs(with_stall - clean) < 0.02);
    // The mean of the steps would have moved by more than half the effect.
    double ma = 0, mb = 0;
    for (double x : a.step_samples)
        ma += x;
    for (double x : stalled.step_samples)
        mb += x;
    CHECK(std::fabs(std::log(ma / mb) - clean) > 0.5 * std::log(1.2));
    // Without per-step times: the runs' medians.
    CHECK(verify::robust_pair_log_ratio({}, 2.0, {}, 1.0) == doctest::Approx(std::log(2.0)));
}

TEST_CASE("the screen sets aside a pair in another mode of a bimodal host, both directions alike, never with "
          "fewer than 6 pairs or a whole order") {
    const std::vector<double> d = {0.10, 0.09, 0.11, 0.40, 0.10, 0.08, -0.21, 0.12};
    const std::vector<bool> ab = {true, false, true, false, true, false, true, false};
    const auto s = verify::screen_pairs(d, 3.5, ab);
    CHECK(s.center == doctest::Approx(0.10).epsilon(0.1));
    CHECK_FALSE(s.kept[3]);
    CHECK_FALSE(s.kept[6]);
    CHECK(std::count(s.kept.begin(), s.kept.end(), true) == 6);
    // Five pairs: nothing set aside.
    const auto few = verify::screen_pairs({0.1, 0.1, 0.11, 0.09, 0.5}, 3.5, {});
    CHECK(std::count(few.kept.begin(), few.kept.end(), true) == 5);
    // Every BA pair far off: that is an order effect, not outliers; nothing is set aside.
    const auto order =
        verify::screen_pairs({0.1, 0.4, 0.1, 0.41, 0.11, 0.4}, 3.5, {true, false, true, false, true, false});
    CHECK(std::count(order.kept.begin(), order.kept.end(), true) == 6);
    // decide() says which pair it set aside, and its interval is the kept pairs'.
    const auto c = sim_contract();
    std::mt19937_64 rng(11);
    std::vector<std::pair<verify::Arm, verify::Arm>> pairs;
    for (int i = 0; i < 8; ++i) {
        const bool first = i % 2 == 0;
        const std::string node = "n" + std::to_string(i % 4 + 1);
        // Pair 4's baseline ran in the host's slow mode (0.74 against 1.0 s/step).
        pairs.emplace_back(run(i == 3 ? std::log(1 / 0.74) : 0.0, node, first, rng),
                           run(-std::log(1.1), node, !first, rng));
    }
    const auto prior = verify::doctor_prior(std::vector<double>{1.0, 1.01, 0.99, 1.0, 1.02});
    const auto d8 = verify::decide(pairs, curve(), c, verify::Design{}.rule(8), false, prior);
    CHECK(d8.set_aside == 1);
    CHECK(d8.pairs == 7);
    CHECK(d8.speedup == doctest::Approx(1.1).epsilon(0.02));
    bool said = false;
    for (const auto& e : d8.evidence)
        said = said || e.find("pair 4 set aside as an outlier") != std::string::npos;
    CHECK(said);
}

TEST_CASE("[verify]: min_speedup, alpha and max_pairs, with defaults, validated") {
    const std::string file = std::string(INFRARSI_FIXTURES) + "/toyload.contract.toml";
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    const std::string base = text.str();
    REQUIRE(base.find("[verify]") == std::string::npos);
    auto c = contract::load_text(base, file);
    CHECK(c.verify.min_speedup == 0.03);
    CHECK(c.verify.alpha == 0.01);
    CHECK(c.verify.max_pairs == 24);
    c = contract::load_text(base + "[verify]\nmin_speedup = 0.05\nalpha = 0.02\nmax_pairs = 20\n", file);
    CHECK(c.verify.min_speedup == 0.05);
    CHECK(c.verify.alpha == 0.02);
    CHECK(c.verify.max_pairs == 20);
    CHECK(verify::design(c).max_pairs == 20);
    CHECK_THROWS_WITH_AS(contract::load_text(base + "[verify]\nmin_speedup = 1.5\n", file),
                         doctest::Contains("verify.min_speedup"), Error);
    CHECK_THROWS_WITH_AS(contract::load_text(base + "[verify]\nalpha = 0\n", file),
                         doctest::Contains("verify.alpha"), Error);
    CHECK_THROWS_WITH_AS(contract::load_text(base + "[verify]\nmax_pairs = 7\n", file),
                         doctest::Contains("verify.max_pairs"), Error);
    CHECK_THROWS_WITH_AS(contract::load_text(base + "[verify]\nmax_pair = 8\n", file),
                         doctest::Contains("max_pair"), Error);
}

TEST_CASE("a look reads as its speed-up and bounds, an unbounded or astronomic bound as inf") {
    CHECK(verify::look_text(1.8113, 0.0, 3.1e34) == "1.811x [0.000, inf]");
    CHECK(verify::look_text(1.056, 0.531, 2.1) == "1.056x [0.531, 2.100]");
    CHECK(verify::look_text(NAN, -INFINITY, INFINITY) == "?x [0.000, inf]");
}
