#include "measure/noise.hpp"
#include "measure/statistics.hpp"
#include "measure/steps.hpp"

#include <doctest/doctest.h>

#include <fmt/core.h>

using namespace infrarsi::measure;

namespace {
std::string step_line(int step, double t, double loss) {
    return fmt::format(
        "INFRARSI_STEP {{\"step\":{},\"loss\":{},\"step_time_s\":{},\"phases\":{{\"forward_s\":{}}},"
        "\"tokens\":100,\"tokens_per_s\":{},\"mfu\":0.1,\"peak_rss_bytes\":{}}}\n",
        step, loss, t, t / 2, 100 / t, 1000 * step);
}
} // namespace

TEST_CASE("step lines are parsed, other lines are ignored and malformed ones counted") {
    std::string text = "hello\n[1,0]<stdout>:" + step_line(1, 2.0, 4.0) + step_line(2, 1.0, 3.5) +
                       "INFRARSI_STEP {broken\nINFRARSI_SUMMARY {\"final_loss\":3.5}\n";
    auto log = parse_step_log(text, "INFRARSI_STEP", "INFRARSI_SUMMARY");
    REQUIRE(log.steps.size() == 2);
    CHECK(log.steps[0].step_time_s == 2.0);
    CHECK(log.steps[1].phases.at("forward_s") == 0.5);
    CHECK(log.malformed == 1);
    REQUIRE(log.summary);
    CHECK((*log.summary)["final_loss"] == 3.5);
}

TEST_CASE("a trial summary splits cold start from steady state") {
    std::string text;
    text += step_line(1, 5.0, 4.0);
    for (int s = 2; s <= 9; ++s)
        text += step_line(s, 1.0 + 0.01 * (s % 3), 4.0 - 0.1 * s);
    auto sum = summarize(parse_step_log(text, "INFRARSI_STEP", "INFRARSI_SUMMARY"), 1);
    CHECK(sum.cold_step_s == 5.0);
    CHECK(sum.steady_step_s.estimate == doctest::Approx(1.01));
    CHECK(sum.steady_step_s.lo <= sum.steady_step_s.estimate);
    CHECK(sum.steady_step_s.hi >= sum.steady_step_s.estimate);
    CHECK(*sum.peak_rss_bytes == 9000);
    CHECK(sum.losses.size() == 9);
}

TEST_CASE("statistics helpers") {
    CHECK(median({3, 1, 2}) == 2);
    CHECK(median({4, 1, 2, 3}) == 2.5);
    CHECK(t_quantile(2) == doctest::Approx(4.303).epsilon(1e-3));
    CHECK(student_t_quantile(0.975, 2) == doctest::Approx(4.302653).epsilon(1e-6));
    CHECK(student_t_quantile(0.999, 10) == doctest::Approx(4.143700).epsilon(1e-6));
    CHECK(student_t_quantile(0.01, 5) == doctest::Approx(-3.364930).epsilon(1e-6));
    CHECK(normal_quantile(0.995) == doctest::Approx(2.575829).epsilon(1e-6));
    CHECK(student_t_cdf(2.228139, 10) == doctest::Approx(0.975).epsilon(1e-6));
    auto ci = mean_ci({1, 2, 3});
    CHECK(ci.estimate == 2);
    CHECK(ci.lo == doctest::Approx(2 - 4.302653 / std::sqrt(3.0)));
}

TEST_CASE("the minimum detectable effect grows with noise and shrinks with repeats") {
    CHECK(minimum_detectable_effect(0.05, 3) > minimum_detectable_effect(0.02, 3));
    CHECK(minimum_detectable_effect(0.05, 10) < minimum_detectable_effect(0.05, 3));
    CHECK(minimum_detectable_effect(0.0, 3) == 0.01);
    auto m = calibrate({1.0, 1.1, 0.9, 1.0, 1.0}, {0.01, 0.01, 0.02, 0.01, 0.01}, 3);
    CHECK(m.cv_between == doctest::Approx(0.0707).epsilon(0.01));
    CHECK(m.minimum_detectable_effect == doctest::Approx(2.8016 * 0.0707 * std::sqrt(2.0 / 3)).epsilon(0.01));
}

TEST_CASE("a step's memory is its node's peak when the workload reports one (the limit is per node)") {
    auto both = step_from_json(nlohmann::json::parse(
        R"({"step":0,"loss":1.0,"step_time_s":0.5,"peak_rss_bytes":100,"peak_rss_node_bytes":250})"));
    CHECK(*both.peak_rss_bytes == 250);
    auto rank_only = step_from_json(
        nlohmann::json::parse(R"({"step":0,"loss":1.0,"step_time_s":0.5,"peak_rss_bytes":100})"));
    CHECK(*rank_only.peak_rss_bytes == 100);
}

TEST_CASE("the within-run noise is robust to one outlier step (an evaluation inside a timed step)") {
    std::vector<double> steps{1.00, 1.01, 0.99, 1.02, 0.98, 1.00, 1.01, 0.99};
    const double quiet = robust_cv(steps);
    CHECK(quiet > 0);
    CHECK(quiet < 0.03);
    steps.push_back(20.0); // nanoGPT's final evaluation inside the last timed step
    CHECK(robust_cv(steps) < 0.03);
    CHECK(stddev(steps) / mean(steps) > 1.0); // what the plain coefficient of variation would have said
    CHECK(robust_cv({1.0}) == 0);
    CHECK(robust_cv({0.0, 0.0}) == 0);
}
