#include "contract/contract.hpp"
#include "verify/verify.hpp"

#include <doctest/doctest.h>

#include <cmath>

using namespace infrarsi;

namespace {
contract::Contract toy() {
    return contract::load(std::string(INFRARSI_FIXTURES) + "/toyload.contract.toml");
}
std::vector<double> curve(double scale) {
    std::vector<double> l;
    for (int i = 0; i < 8; ++i)
        l.push_back(scale * (4.0 - 0.2 * i));
    return l;
}
verify::Arm arm(double step, double scale = 1.0, double peak = 1e8) {
    verify::Arm a;
    a.ok = true;
    a.step_s = step;
    a.losses = curve(scale);
    a.peak_memory_bytes = peak;
    return a;
}
// The rule of the tests written for the fixed-sample design: a two-sided 95% interval's lower bound
// (one-sided error 2.5%) above 1 + m.
verify::Rule rule(double m) {
    verify::Rule r;
    r.min_speedup = m;
    r.alpha = 0.025;
    return r;
}
// Pairs in alternating order (AB, BA, ...), as verification runs them (counterbalanced).
std::vector<std::pair<verify::Arm, verify::Arm>> abba(std::vector<std::pair<verify::Arm, verify::Arm>> p) {
    for (std::size_t i = 0; i < p.size(); ++i)
        (i % 2 == 0 ? p[i].first : p[i].second).first = true;
    return p;
}
} // namespace

TEST_CASE("the loss invariant: last-K mean within the relative tolerance, and all step lines present") {
    auto c = toy();
    CHECK(verify::check_loss(curve(1), curve(1.01), c.invariants).empty());
    CHECK(verify::check_loss(curve(1), curve(0.9), c.invariants).find("mean loss of the last 3") !=
          std::string::npos);
    auto short_curve = curve(1);
    short_curve.pop_back();
    CHECK(verify::check_loss(curve(1), short_curve, c.invariants).find("7 of 8 step lines") !=
          std::string::npos);
    c.invariants.loss_mode = contract::LossMode::PerStep;
    auto one_off = curve(1);
    one_off[2] *= 1.5;
    CHECK(verify::check_loss(curve(1), one_off, c.invariants).find("step 3") != std::string::npos);
}

TEST_CASE("a clear, consistent speed-up with the loss held is promoted") {
    auto c = toy();
    auto d = verify::decide(abba({{arm(1.0), arm(0.5)}, {arm(1.02), arm(0.51)}, {arm(0.98), arm(0.5)}}),
                            curve(1), c, rule(0.05), false);
    CHECK(d.promoted);
    CHECK(d.speedup == doctest::Approx(2.0).epsilon(0.02));
    CHECK(d.lo > 1.05);
}

TEST_CASE("a speed-up inside the noise floor is not promoted") {
    auto c = toy();
    auto d = verify::decide(abba({{arm(1.0), arm(0.97)}, {arm(1.0), arm(1.01)}, {arm(1.0), arm(0.96)}}),
                            curve(1), c, rule(0.05), false);
    CHECK_FALSE(d.promoted);
}

TEST_CASE("the math-changing patch is never promoted, even when fast") {
    auto c = toy();
    auto d = verify::decide(abba({{arm(1.0), arm(0.3)}, {arm(1.0), arm(0.3)}, {arm(1.0), arm(0.3)}}),
                            curve(1), c, rule(0.05), true);
    CHECK_FALSE(d.promoted);
    auto loss = verify::decide(abba({{arm(1.0), arm(0.3, 0.9)}, {arm(1.0), arm(0.3, 0.9)}}), curve(1), c,
                               rule(0.05), false);
    CHECK_FALSE(loss.promoted);
    CHECK(loss.reasons[0].find("loss invariant broken") != std::string::npos);
}

TEST_CASE("a candidate at or over the memory limit is not promoted") {
    auto c = toy();
    const double limit = static_cast<double>(c.resources.mem_bytes);
    auto d = verify::decide(abba({{arm(1.0), arm(0.5, 1.0, limit)}, {arm(1.0), arm(0.5, 1.0, limit)}}),
                            curve(1), c, rule(0.05), false);
    CHECK_FALSE(d.promoted);
}

TEST_CASE("two consistent pairs: the doctor's noise calibration decides what one degree of freedom cannot") {
    auto c = toy();
    // Measured in a demo campaign: baseline 0.993 / 0.957 s, candidate 0.716 / 0.722 s; the doctor's 3
    // baseline runs had a CV of 1.06 % between them, so the minimum detectable effect was 3 %.
    const std::vector<std::pair<verify::Arm, verify::Arm>> pairs = {{arm(0.993), arm(0.716)},
                                                                    {arm(0.957), arm(0.722)}};
    auto alone = verify::decide(abba(pairs), curve(1), c, rule(0.03), false);
    CHECK_FALSE(alone.promoted); // one pair per order and no prior: no degree of freedom left
    CHECK(alone.lo < 1.03);
    auto pooled = verify::decide(abba(pairs), curve(1), c, rule(0.03), false, {0.0106, 2});
    CHECK(pooled.promoted);
    CHECK(pooled.speedup == doctest::Approx(alone.speedup));
    CHECK(pooled.lo > 1.2);
    CHECK(pooled.hi < alone.hi);
    // A noisy calibration widens the interval again: no promotion on noise.
    CHECK_FALSE(verify::decide(abba(pairs), curve(1), c, rule(0.03), false, {0.25, 2}).promoted);
}

TEST_CASE(
    "the pooled interval: no prior is the t interval of the pairs, a prior adds its degrees of freedom") {
    const std::vector<double> logs = {0.10, 0.12, 0.08, 0.11};
    auto plain = verify::speedup_interval(logs, {});
    auto t = measure::mean_ci(logs);
    CHECK(plain.lo == doctest::Approx(t.lo));
    CHECK(plain.hi == doctest::Approx(t.hi));
    // A prior equal to the pairs' own spread leaves the variance and only raises the degrees of freedom.
    const double cv = measure::stddev(logs) / std::sqrt(2.0);
    auto pooled = verify::speedup_interval(logs, {cv, 5});
    CHECK(pooled.estimate == doctest::Approx(plain.estimate));
    CHECK(pooled.hi - pooled.lo < plain.hi - plain.lo);
    CHECK((pooled.hi - pooled.lo) / (plain.hi - plain.lo) ==
          doctest::Approx(measure::student_t_quantile(0.975, 8) / measure::student_t_quantile(0.975, 3)));
}

TEST_CASE("final_eval: the final evaluation loss within a tolerance calibrated from the doctor's seeds") {
    auto c = toy();
    c.invariants.loss_mode = contract::LossMode::FinalEval;
    c.invariants.loss_tolerance = 0.001;
    // Five seeds: mean 2.0, sample sd 0.0158.
    const auto ref = verify::eval_reference({1.98, 2.0, 2.02, 1.99, 2.01});
    CHECK(ref.runs == 5);
    CHECK(ref.mean == doctest::Approx(2.0));
    CHECK(ref.sd == doctest::Approx(0.015811).epsilon(1e-3));
    // t(4, 95%) = 2.776: one run within 2.776 * 0.0158 * sqrt(1.2) = 0.0481 of the mean; a pair within
    // 2.776 * 0.0158 * sqrt(2) = 0.0621 of each other.
    CHECK(verify::eval_tolerance(ref, c.invariants) == doctest::Approx(0.04808).epsilon(1e-3));
    CHECK(verify::eval_tolerance(ref, c.invariants, true) == doctest::Approx(0.06207).epsilon(1e-3));
    CHECK(verify::check_eval_loss(ref, 2.04, c.invariants).empty());
    CHECK(verify::check_eval_loss(ref, 2.06, c.invariants).find("final evaluation loss 2.06, baseline 2") !=
          std::string::npos);
    CHECK(verify::check_eval_loss(ref, std::nullopt, c.invariants).find("no evaluation loss") !=
          std::string::npos);
    CHECK(verify::check_eval_loss(ref, std::nan(""), c.invariants).find("not finite") != std::string::npos);
    CHECK(verify::check_eval_loss(ref, 2.06, c.invariants, 2.01).empty()); // as a pair
    // Seeds that agree exactly (a deterministic job): the floor, loss_tolerance relative.
    const auto same = verify::eval_reference({2.0, 2.0, 2.0});
    CHECK(verify::eval_tolerance(same, c.invariants) == doctest::Approx(0.002));
    // ... and a rejection says it is the floor, not a calibration (a seed the job never read looks like
    // this).
    const auto floor_why = verify::check_eval_loss(same, 2.01, c.invariants);
    CHECK(floor_why.find("the floor loss_tolerance x |mean|") != std::string::npos);
    CHECK(floor_why.find("calibrated") == std::string::npos);
    CHECK(verify::check_eval_loss(ref, 2.06, c.invariants).find("calibrated from 5 baseline runs") !=
          std::string::npos);

    // decide() uses it instead of the per-step curve: a candidate whose curve differs (another split of the
    // micro-batches) but whose final evaluation agrees is promoted; one whose evaluation is off is not.
    auto with_eval = [](double step, double scale, double eval) {
        verify::Arm a = arm(step, scale);
        a.eval_loss = eval;
        return a;
    };
    auto d = verify::decide(abba({{with_eval(1.0, 1, 2.0), with_eval(0.5, 1.05, 2.01)},
                                  {with_eval(1.0, 1, 1.99), with_eval(0.5, 1.05, 2.02)},
                                  {with_eval(1.0, 1, 2.0), with_eval(0.5, 1.05, 1.99)}}),
                            curve(1), c, rule(0.05), false, {}, ref);
    CHECK(d.promoted);
    d = verify::decide(abba({{with_eval(1.0, 1, 2.0), with_eval(0.5, 1, 2.2)},
                             {with_eval(1.0, 1, 2.0), with_eval(0.5, 1, 2.2)}}),
                       curve(1), c, rule(0.05), false, {}, ref);
    CHECK_FALSE(d.promoted);
    REQUIRE_FALSE(d.reasons.empty());
    CHECK(d.reasons[0].find("final evaluation loss 2.2") != std::string::npos);
}

namespace {
// A pair on `node` in the given order; `second` is the factor a pair's second run takes (an order effect).
std::pair<verify::Arm, verify::Arm> pair_on(const std::string& node, verify::PairOrder o, double base_s,
                                            double cand_s, double second = 1.0) {
    verify::Arm a = arm(o == verify::PairOrder::AB ? base_s : base_s * second);
    verify::Arm b = arm(o == verify::PairOrder::AB ? cand_s * second : cand_s);
    a.node = b.node = node;
    (o == verify::PairOrder::AB ? a : b).first = true;
    return {a, b};
}
} // namespace

TEST_CASE(
    "counterbalanced orders: as many AB as BA, shuffled by the recorded seed, the same for the same seed") {
    for (int n : {1, 2, 3, 4, 7, 10}) {
        const auto o = verify::counterbalanced_orders(n, 42);
        REQUIRE(static_cast<int>(o.size()) == n);
        const auto ab = std::count(o.begin(), o.end(), verify::PairOrder::AB);
        CHECK(ab == (n + 1) / 2);
        CHECK(o == verify::counterbalanced_orders(n, 42));
    }
    // Not always AB first: some seed puts BA first.
    bool ba_first = false;
    for (std::uint64_t seed = 0; seed < 20 && !ba_first; ++seed)
        ba_first = verify::counterbalanced_orders(4, seed)[0] == verify::PairOrder::BA;
    CHECK(ba_first);
}

TEST_CASE("pairs are node-blocked: a block's two pairs on one node (or one group of nodes), the blocks "
          "rotating over the nodes") {
    const std::vector<std::string> nodes = {"n1", "n2", "n3"};
    const auto p = verify::spread_pairs(8, nodes);
    REQUIRE(p.size() == 8);
    const std::vector<std::string> expect = {"n1", "n1", "n2", "n2", "n3", "n3", "n1", "n1"};
    for (std::size_t i = 0; i < expect.size(); ++i)
        CHECK(p[i] == std::vector<std::string>{expect[i]});
    const auto two = verify::spread_pairs(6, {"n1", "n2", "n3", "n4"}, 2);
    REQUIRE(two.size() == 6);
    CHECK(two[0] == std::vector<std::string>{"n1", "n2"});
    CHECK(two[1] == std::vector<std::string>{"n1", "n2"});
    CHECK(two[2] == std::vector<std::string>{"n3", "n4"});
    CHECK(two[3] == std::vector<std::string>{"n3", "n4"});
    CHECK(two[4] == std::vector<std::string>{"n1", "n2"});
    CHECK(verify::spread_pairs(3, {}).empty());        // the local backend: one host, nothing to pin
    CHECK(verify::spread_pairs(3, {"n1"}, 2).empty()); // too few nodes for a group: the scheduler places
}

TEST_CASE("a pure order effect is not promoted: the second run of every pair is 15% faster, A = B") {
    auto c = toy();
    using verify::PairOrder;
    const std::vector<std::pair<verify::Arm, verify::Arm>> pairs = {
        pair_on("n1", PairOrder::AB, 1.0, 1.0, 0.85), pair_on("n2", PairOrder::BA, 1.0, 1.0, 0.85),
        pair_on("n3", PairOrder::AB, 1.0, 1.0, 0.85), pair_on("n4", PairOrder::BA, 1.0, 1.0, 0.85)};
    auto d = verify::decide(pairs, curve(1), c, rule(0.03), false, {0.01, 4});
    CHECK_FALSE(d.promoted);
    CHECK(d.speedup == doctest::Approx(1.0));
    CHECK(d.order_effect == doctest::Approx(-std::log(0.85)));
    // The same runs with the baseline always first (the old design) would credit the order to the candidate:
    // refused as not counterbalanced.
    const std::vector<std::pair<verify::Arm, verify::Arm>> ab_only = {
        pair_on("n1", PairOrder::AB, 1.0, 1.0, 0.85), pair_on("n2", PairOrder::AB, 1.0, 1.0, 0.85),
        pair_on("n3", PairOrder::AB, 1.0, 1.0, 0.85)};
    auto old = verify::decide(ab_only, curve(1), c, rule(0.03), false, {0.01, 4});
    CHECK(old.speedup == doctest::Approx(1 / 0.85));
    CHECK_FALSE(old.promoted);
    bool named = false;
    for (const auto& r : old.reasons)
        named = named || r.find("not counterbalanced") != std::string::npos;
    CHECK(named);
}

TEST_CASE("an order effect does not hide a real speed-up: 1.25x with the second run 10% faster") {
    auto c = toy();
    using verify::PairOrder;
    std::vector<std::pair<verify::Arm, verify::Arm>> pairs;
    for (int i = 0; i < 4; ++i)
        pairs.push_back(pair_on("n" + std::to_string(i + 1), i % 2 ? PairOrder::BA : PairOrder::AB,
                                1.0 + 0.01 * i, (1.0 + 0.01 * i) / 1.25, 0.9));
    auto d = verify::decide(pairs, curve(1), c, rule(0.03), false, {0.01, 4});
    CHECK(d.promoted);
    CHECK(d.speedup == doctest::Approx(1.25).epsilon(0.005));
    CHECK(d.nodes == 4);
}

TEST_CASE(
    "a node effect is not credited to the candidate: pairs within a node, cross-node pairs not counted") {
    auto c = toy();
    using verify::PairOrder;
    // n2 is 20% slower than n1 for both arms; A = B. Within-node differences cancel it.
    std::vector<std::pair<verify::Arm, verify::Arm>> pairs = {
        pair_on("n1", PairOrder::AB, 1.0, 1.0), pair_on("n2", PairOrder::BA, 1.2, 1.2),
        pair_on("n1", PairOrder::BA, 1.0, 1.0), pair_on("n2", PairOrder::AB, 1.2, 1.2)};
    auto d = verify::decide(pairs, curve(1), c, rule(0.03), false, {0.01, 4});
    CHECK_FALSE(d.promoted);
    CHECK(d.speedup == doctest::Approx(1.0));
    CHECK(d.nodes == 2);
    // The baseline on the slow node and the candidate on the fast one: that pair says nothing about the
    // candidate, so it is not counted, and the verification is not promoted on it.
    std::vector<std::pair<verify::Arm, verify::Arm>> split = pairs;
    for (auto& [a, b] : split) {
        a.node = "n2", a.step_s = 1.2;
        b.node = "n1", b.step_s = 1.0;
    }
    auto s = verify::decide(split, curve(1), c, rule(0.03), false, {0.01, 4});
    CHECK_FALSE(s.promoted);
    CHECK(s.pairs == 0);
    REQUIRE_FALSE(s.reasons.empty());
    CHECK(s.reasons[0].find("not one node") != std::string::npos);
}

TEST_CASE("reproduction: a promotion whose re-check in a fresh allocation fails is not promoted") {
    auto c = toy();
    using verify::PairOrder;
    const std::vector<std::pair<verify::Arm, verify::Arm>> fast = {pair_on("n1", PairOrder::AB, 1.0, 0.7),
                                                                   pair_on("n2", PairOrder::BA, 1.0, 0.7),
                                                                   pair_on("n1", PairOrder::BA, 1.0, 0.7)};
    const std::vector<std::pair<verify::Arm, verify::Arm>> same = {pair_on("n3", PairOrder::BA, 1.0, 1.0),
                                                                   pair_on("n4", PairOrder::AB, 1.0, 0.99),
                                                                   pair_on("n3", PairOrder::AB, 1.0, 1.01)};
    const auto first = verify::decide(fast, curve(1), c, rule(0.03), false, {0.01, 4});
    REQUIRE(first.promoted);
    const auto again = verify::decide(fast, curve(1), c, rule(0.03), false, {0.01, 4});
    const auto kept = verify::reproduce(first, again);
    CHECK(kept.promoted);
    CHECK(kept.speedup == doctest::Approx(first.speedup));
    CHECK(kept.evidence.back().find("reproduced in a fresh allocation") != std::string::npos);
    const auto failed =
        verify::reproduce(first, verify::decide(same, curve(1), c, rule(0.03), false, {0.01, 4}));
    CHECK_FALSE(failed.promoted);
    REQUIRE_FALSE(failed.reasons.empty());
    CHECK(failed.reasons[0].find("did not reproduce") != std::string::npos);
    // A first verification that did not promote stays not promoted whatever the re-check says.
    const auto none = verify::decide(same, curve(1), c, rule(0.03), false, {0.01, 4});
    CHECK_FALSE(verify::reproduce(none, first).promoted);
}

TEST_CASE("one MFU denominator: the MFU ratio equals the speed-up at fixed model FLOPs, whatever peak each "
          "trial measured for itself") {
    // Two trials' step lines: the same model FLOPs, MFU over a peak each measured itself (the second's probe
    // ran with other threads and saw 30% more): their own MFU ratio is not the speed-up.
    auto steps = [](double step_s, double own_peak) {
        std::vector<measure::StepSample> s(6);
        for (auto& x : s) {
            x.step_time_s = step_s;
            x.model_flops = 2e9;
            x.mfu = 2e9 / step_s / own_peak;
        }
        return s;
    };
    const auto a = measure::reported_mfu_parts(steps(1.0, 1e10), 1);
    const auto b = measure::reported_mfu_parts(steps(0.7, 1.3e10), 1);
    REQUIRE(a);
    REQUIRE(b);
    CHECK(a->model_flops_per_step == doctest::Approx(2e9));
    CHECK(a->peak_flops == doctest::Approx(1e10));
    CHECK(b->peak_flops == doctest::Approx(1.3e10));
    const double own_ratio = *steps(0.7, 1.3e10)[0].mfu / *steps(1.0, 1e10)[0].mfu;
    CHECK(own_ratio != doctest::Approx(1.0 / 0.7));
    // The campaign's: the doctor's peak for both, the baseline's FLOPs.
    const double speedup = 1.0 / 0.7;
    const auto m = verify::compare_mfu(a->model_flops_per_step, a->peak_flops, "doctor", 1.0, speedup);
    CHECK(m.baseline == doctest::Approx(0.2));
    CHECK(m.candidate / m.baseline == doctest::Approx(speedup));
    CHECK(m.candidate == doctest::Approx(measure::mfu(2e9, 0.7, 1e10)));
    CHECK(m.candidate_step_s == doctest::Approx(0.7));
    // No model FLOPs in the step lines: nothing to compute MFU from.
    std::vector<measure::StepSample> none(3);
    CHECK_FALSE(measure::reported_mfu_parts(none, 1));
}

TEST_CASE("one MFU denominator: the contract's, else the node's calibration, else the job's probe, an MFU "
          "above 1 unknown") {
    const verify::PeakFlops calibration{4e9, "calibration record"};
    const verify::PeakFlops probe{3e9, "job's probe"};
    CHECK(verify::mfu_denominator(5e9, calibration, probe, 1e9).flops == 5e9);
    CHECK(verify::mfu_denominator(5e9, calibration, probe, 1e9).source.find("contract") != std::string::npos);
    CHECK(verify::mfu_denominator(0, calibration, probe, 1e9).source == "calibration record");
    CHECK(verify::mfu_denominator(0, std::nullopt, probe, 1e9).source == "job's probe");
    CHECK(verify::mfu_denominator(0, std::nullopt, std::nullopt, 1e9).flops == 0);
    // The demo's case: a peak below what the baseline achieved is raised to what it achieved, and says so.
    const auto low = verify::mfu_denominator(0, calibration, probe, 6e9);
    CHECK(low.flops == 6e9);
    CHECK(low.source.find("lower than achieved") != std::string::npos);
    CHECK(low.source.find("calibration record") != std::string::npos);
    // A candidate faster than the peak allows: the denominator stays the measured peak, the baseline's MFU is
    // known, the candidate's (2 here) is unknown and says why; never 1.0000 by a raised denominator.
    const auto m = verify::compare_mfu(2e9, 4e9, "calibration record", 1.0, 4.0);
    CHECK(m.peak_flops == doctest::Approx(4e9));
    CHECK(m.baseline == doctest::Approx(0.5));
    CHECK(m.baseline_known());
    CHECK_FALSE(m.candidate_known());
    CHECK(m.unknown.find("above the peak") != std::string::npos);
    CHECK(m.peak_source == "calibration record");
    // Below the peak: both known.
    const auto ok = verify::compare_mfu(2e9, 1e10, "calibration record", 1.0, 2.0);
    CHECK(ok.peak_flops == 1e10);
    CHECK(ok.peak_source == "calibration record");
    CHECK(ok.unknown.empty());
    CHECK(ok.candidate == doctest::Approx(0.4));
}

TEST_CASE("pairs each at a seed of their own: the candidate is held to its pair's baseline at that seed, not "
          "to the reference curve of the contract's seed") {
    auto c = toy();
    using verify::PairOrder;
    // Another seed: both runs of each pair have another curve than the reference (curve(1)), the same one.
    auto seeded = [](std::pair<verify::Arm, verify::Arm> p, double scale) {
        p.first.losses = p.second.losses = curve(scale);
        p.first.at_reference_seed = p.second.at_reference_seed = false;
        return p;
    };
    const std::vector<std::pair<verify::Arm, verify::Arm>> fresh = {
        seeded(pair_on("n1", PairOrder::AB, 0.2, 0.1), 0.8),
        seeded(pair_on("n2", PairOrder::BA, 0.2, 0.1), 1.2)};
    auto d = verify::decide(fresh, curve(1), c, rule(0.01), false, {0.0, 1});
    CHECK(d.promoted);
    // The same losses at the contract's seed would break the invariant against the reference.
    auto at_contract_seed = fresh;
    for (auto& [a, b] : at_contract_seed)
        a.at_reference_seed = b.at_reference_seed = true;
    CHECK_FALSE(verify::decide(at_contract_seed, curve(1), c, rule(0.01), false, {0.0, 1}).promoted);
    // A candidate that differs from its pair's baseline at the pair's seed is caught.
    auto differs = fresh;
    differs[1].second.losses = curve(1.0);
    d = verify::decide(differs, curve(1), c, rule(0.01), false, {0.0, 1});
    CHECK_FALSE(d.promoted);
    CHECK(std::any_of(d.reasons.begin(), d.reasons.end(), [](const std::string& r) {
        return r.find("loss differs from the interleaved baseline") != std::string::npos;
    }));
}

TEST_CASE("two pairs, one in each order, and a doctor that measured no noise: the plain interval decides") {
    // Deterministic step times (no noise, no order effect): 2x in both pairs is promoted, as without
    // counterbalancing; a pure order effect over the same two pairs is not (its pairs disagree).
    auto c = toy();
    using verify::PairOrder;
    const std::vector<std::pair<verify::Arm, verify::Arm>> real = {
        pair_on("n1", PairOrder::AB, 0.2, 0.1, 1.0), pair_on("n2", PairOrder::BA, 0.2, 0.1, 1.0)};
    auto d = verify::decide(real, curve(1), c, rule(0.01), false, {0.0, 1});
    CHECK(d.promoted);
    CHECK(d.speedup == doctest::Approx(2.0));
    const std::vector<std::pair<verify::Arm, verify::Arm>> order = {
        pair_on("n1", PairOrder::AB, 0.2, 0.2, 0.85), pair_on("n2", PairOrder::BA, 0.2, 0.2, 0.85)};
    CHECK_FALSE(verify::decide(order, curve(1), c, rule(0.01), false, {0.0, 1}).promoted);
}
