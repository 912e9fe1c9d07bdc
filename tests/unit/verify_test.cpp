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
    return {true, step, curve(scale), peak};
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
    auto d = verify::decide({{arm(1.0), arm(0.5)}, {arm(1.02), arm(0.51)}, {arm(0.98), arm(0.5)}}, curve(1),
                            c, 0.05, false);
    CHECK(d.promoted);
    CHECK(d.speedup == doctest::Approx(2.0).epsilon(0.02));
    CHECK(d.lo > 1.05);
}

TEST_CASE("a speed-up inside the noise floor is not promoted") {
    auto c = toy();
    auto d = verify::decide({{arm(1.0), arm(0.97)}, {arm(1.0), arm(1.01)}, {arm(1.0), arm(0.96)}}, curve(1),
                            c, 0.05, false);
    CHECK_FALSE(d.promoted);
}

TEST_CASE("the math-changing patch is never promoted, even when fast") {
    auto c = toy();
    auto d = verify::decide({{arm(1.0), arm(0.3)}, {arm(1.0), arm(0.3)}, {arm(1.0), arm(0.3)}}, curve(1), c,
                            0.05, true);
    CHECK_FALSE(d.promoted);
    auto loss =
        verify::decide({{arm(1.0), arm(0.3, 0.9)}, {arm(1.0), arm(0.3, 0.9)}}, curve(1), c, 0.05, false);
    CHECK_FALSE(loss.promoted);
    CHECK(loss.reasons[0].find("loss invariant broken") != std::string::npos);
}

TEST_CASE("a candidate at or over the memory limit is not promoted") {
    auto c = toy();
    const double limit = static_cast<double>(c.resources.mem_bytes);
    auto d = verify::decide({{arm(1.0), arm(0.5, 1.0, limit)}, {arm(1.0), arm(0.5, 1.0, limit)}}, curve(1), c,
                            0.05, false);
    CHECK_FALSE(d.promoted);
}

TEST_CASE("two consistent pairs: the doctor's noise calibration decides what one degree of freedom cannot") {
    auto c = toy();
    // Measured in a demo campaign: baseline 0.993 / 0.957 s, candidate 0.716 / 0.722 s; the doctor's 3
    // baseline runs had a CV of 1.06 % between them, so the minimum detectable effect was 3 %.
    const std::vector<std::pair<verify::Arm, verify::Arm>> pairs = {{arm(0.993), arm(0.716)},
                                                                    {arm(0.957), arm(0.722)}};
    auto alone = verify::decide(pairs, curve(1), c, 0.03, false);
    CHECK_FALSE(alone.promoted); // t(1 dof) = 12.7: [1.02, 1.80]
    CHECK(alone.lo < 1.03);
    auto pooled = verify::decide(pairs, curve(1), c, 0.03, false, {0.0106, 2});
    CHECK(pooled.promoted);
    CHECK(pooled.speedup == doctest::Approx(alone.speedup));
    CHECK(pooled.lo > 1.2);
    CHECK(pooled.hi < alone.hi);
    // A noisy calibration widens the interval again: no promotion on noise.
    CHECK_FALSE(verify::decide(pairs, curve(1), c, 0.03, false, {0.25, 2}).promoted);
}

TEST_CASE(
    "the pooled interval: no prior is the t interval of the pairs; a prior adds its degrees of freedom") {
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
          doctest::Approx(measure::t_quantile(8) / measure::t_quantile(3)));
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

    // decide() uses it instead of the per-step curve: a candidate whose curve differs (another split of the
    // micro-batches) but whose final evaluation agrees is promoted; one whose evaluation is off is not.
    auto with_eval = [](double step, double scale, double eval) {
        verify::Arm a = arm(step, scale);
        a.eval_loss = eval;
        return a;
    };
    auto d = verify::decide({{with_eval(1.0, 1, 2.0), with_eval(0.5, 1.05, 2.01)},
                             {with_eval(1.0, 1, 1.99), with_eval(0.5, 1.05, 2.02)},
                             {with_eval(1.0, 1, 2.0), with_eval(0.5, 1.05, 1.99)}},
                            curve(1), c, 0.05, false, {}, ref);
    CHECK(d.promoted);
    d = verify::decide(
        {{with_eval(1.0, 1, 2.0), with_eval(0.5, 1, 2.2)}, {with_eval(1.0, 1, 2.0), with_eval(0.5, 1, 2.2)}},
        curve(1), c, 0.05, false, {}, ref);
    CHECK_FALSE(d.promoted);
    REQUIRE_FALSE(d.reasons.empty());
    CHECK(d.reasons[0].find("final evaluation loss 2.2") != std::string::npos);
}
