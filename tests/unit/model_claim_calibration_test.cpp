// An agent's calibration (issue 31): how far its claims were from what was measured, and the discount its
// next claims get.
#include "model/claim_calibration.hpp"

#include <cmath>
#include <doctest/doctest.h>
#include <random>

using namespace infrarsi::model;

namespace {

// `n` claims of an agent whose log claims are `bias` times the true log effects, with log-normal noise.
std::vector<ClaimPair> agent(int n, double bias, double noise, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> effect(-0.1, 0.5);
    std::normal_distribution<double> z(0, noise);
    std::vector<ClaimPair> out;
    for (int i = 0; i < n; ++i) {
        const double truth = effect(rng);
        out.push_back({std::exp(bias * truth + z(rng)), std::exp(truth)});
    }
    return out;
}

} // namespace

TEST_CASE("no pairs: no error, claims taken as said") {
    const auto c = calibrate_claims({});
    CHECK(c.pairs == 0);
    CHECK(c.error == 0);
    CHECK(c.discount == 1);
}

TEST_CASE("a calibrated agent keeps its claims: discount about 1, error its noise") {
    const auto c = calibrate_claims(agent(30, 1.0, 0.02, 1));
    CHECK(c.pairs == 30);
    CHECK(c.discount == doctest::Approx(1).epsilon(0.08));
    CHECK(c.error < 0.03);
}

TEST_CASE("an agent that claims twice the effect (in log) is discounted to about half, one that claims half "
          "is raised to the cap") {
    const auto over = calibrate_claims(agent(30, 2.0, 0.02, 2));
    CHECK(over.discount == doctest::Approx(0.5).epsilon(0.1));
    CHECK(over.error > 0.1);
    CHECK(over.discounted_error < over.error / 3); // the discount removes most of the error
    const auto under = calibrate_claims(agent(30, 0.5, 0.01, 3));
    CHECK(under.slope > 1.7);
    CHECK(under.discount == doctest::Approx(1.5));
}

TEST_CASE("with few pairs the discount is shrunk toward 1, the more so the smaller their claims") {
    // One pair: claimed 2x, measured 1.41x (a slope of 0.5 alone).
    const auto one = calibrate_claims({{2.0, std::sqrt(2.0)}});
    CHECK(one.slope == doctest::Approx(0.5));
    CHECK(one.discount > 0.55);
    CHECK(one.discount < 0.95);
    // A claim of 1.02x measured at 1.01x says almost nothing of a slope.
    const auto tiny = calibrate_claims({{1.02, 1.01}});
    CHECK(tiny.discount > 0.9);
    // Many such pairs say it.
    std::vector<ClaimPair> many(40, {2.0, std::sqrt(2.0)});
    CHECK(calibrate_claims(many).discount == doctest::Approx(0.5).epsilon(0.02));
}

TEST_CASE("claims that point the wrong way are ignored from then on (discount 0), and unusable pairs are "
          "skipped") {
    std::vector<ClaimPair> wrong;
    for (int i = 0; i < 10; ++i)
        wrong.push_back({1.5, 1 / 1.3});
    wrong.push_back({0, 1.2});
    wrong.push_back({-2, 1.2});
    wrong.push_back({NAN, 1.2});
    wrong.push_back({1.2, HUGE_VAL});
    const auto c = calibrate_claims(wrong);
    CHECK(c.pairs == 10);
    CHECK(c.discount == 0);
    CHECK(c.error == doctest::Approx(std::log(1.5) + std::log(1.3)));
}
