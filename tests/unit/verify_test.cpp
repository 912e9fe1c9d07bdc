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
