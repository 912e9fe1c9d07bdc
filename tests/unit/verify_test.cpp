#include "contract/contract.hpp"
#include "verify/verify.hpp"

#include <doctest/doctest.h>

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
