#include "bench/training_simulator.hpp"
#include "model/censored_memory_model.hpp"

#include <cmath>
#include <doctest/doctest.h>
#include <random>

using namespace infrarsi::model;

namespace {
// A synthetic family: 3 features, prior estimate known, truth = factor x prior.
struct Synthetic {
    std::vector<Eigen::VectorXd> x;
    std::vector<double> prior;
    explicit Synthetic(int n, std::uint64_t seed) {
        std::mt19937_64 rng(seed);
        std::uniform_real_distribution<double> u(0.0, 1.0);
        for (int i = 0; i < n; ++i) {
            Eigen::VectorXd f(3);
            f << u(rng), u(rng), u(rng);
            x.push_back(f);
            prior.push_back(20e9 * std::exp(1.2 * f(0) + 0.6 * f(1))); // 20..72 GB
        }
    }
};
} // namespace

TEST_CASE("an OOM trial raises the memory lower bound") {
    Synthetic s(10, 1);
    std::vector<MemoryPoint> pts;
    for (int i = 0; i < 3; ++i)
        pts.push_back({s.x[i], s.prior[i], false, s.prior[i]}); // the prior was right
    CensoredMemoryModel before;
    before.fit(pts, 3);
    // Candidate 5 is predicted below the limit, then OOMs at the limit.
    const double limit = 1.3 * std::exp(before.predict(s.x[5], s.prior[5]).mean_log);
    CHECK(before.probability_over(s.x[5], s.prior[5], limit) < 0.5);
    pts.push_back({s.x[5], s.prior[5], true, limit});
    CensoredMemoryModel after;
    after.fit(pts, 3);
    // The OOMed configuration: its peak is known to exceed the limit.
    CHECK(before.lower_bound(s.x[5], s.prior[5]) < limit);
    CHECK(after.lower_bound(s.x[5], s.prior[5]) >= limit);
    CHECK(after.probability_over(s.x[5], s.prior[5], limit) == 1.0);
    // Its neighbourhood learns too: the correction raises the predicted peak of similar configurations.
    int nearest = -1;
    for (int i = 3; i < 10; ++i)
        if (i != 5 && (nearest < 0 || (s.x[i] - s.x[5]).norm() < (s.x[nearest] - s.x[5]).norm())) nearest = i;
    CHECK(after.predict(s.x[nearest], s.prior[nearest]).mean_log >
          before.predict(s.x[nearest], s.prior[nearest]).mean_log + 0.05);
    CHECK(after.probability_over(s.x[nearest], s.prior[nearest], limit) >
          before.probability_over(s.x[nearest], s.prior[nearest], limit));
}

TEST_CASE("censored fit corrects a prior that is 2x too low after a few OOMs") {
    Synthetic s(400, 2);
    const double limit = 80e9;
    auto truth = [&](int i) { return 2.0 * s.prior[i]; };
    // First trials in order until 4 OOMs and 2 successes have been seen.
    std::vector<MemoryPoint> pts;
    int ooms = 0, oks = 0;
    for (int i = 0; i < 400 && (ooms < 4 || oks < 2); ++i) {
        bool oom = truth(i) > limit;
        if (oom && ooms < 4) pts.push_back({s.x[i], s.prior[i], true, limit}), ++ooms;
        if (!oom && oks < 2) pts.push_back({s.x[i], s.prior[i], false, truth(i)}), ++oks;
    }
    REQUIRE(ooms == 4);
    CensoredMemoryModel m;
    m.fit(pts, 3);
    // Held out: predicted peak within 25% of the truth, and OOMs predicted where the prior said "fits".
    int fooled_prior = 0, caught = 0;
    double worst = 0;
    for (int i = 100; i < 400; ++i) {
        double err = std::abs(m.predict(s.x[i], s.prior[i]).mean_log - std::log(truth(i)));
        worst = std::max(worst, err);
        if (s.prior[i] < limit && truth(i) > limit) {
            ++fooled_prior;
            caught += m.probability_over(s.x[i], s.prior[i], limit) > 0.5;
        }
    }
    CHECK(worst < std::log(1.25));
    REQUIRE(fooled_prior > 20);
    CHECK(caught >= 0.9 * fooled_prior);
}

// Calibration on held-out points of a simulated table: fit on 80 random trials, then bin the predicted
// P(OOM) of 3000 other configurations in five bins. Tolerance: expected calibration error <= 0.10 and each
// bin with at least 100 points within 0.2 of its observed OOM frequency.
TEST_CASE("P(OOM) is calibrated on held-out simulator points") {
    TrainingSimulator sim(TrainingSimulator::presets()[2]);
    const auto& c = sim.candidates();
    std::mt19937_64 rng(11);
    std::vector<int> order(sim.size());
    for (int i = 0; i < sim.size(); ++i)
        order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<MemoryPoint> pts;
    for (int k = 0; k < 80; ++k) {
        auto t = sim.run(order[k], rng);
        int i = order[k];
        if (t.outcome == ObservationKind::ok)
            pts.push_back({c[i].features, c[i].prior_peak_bytes, false, t.peak_bytes});
        else
            pts.push_back({c[i].features, c[i].prior_peak_bytes, true, sim.spec().memory_limit_bytes});
    }
    CensoredMemoryModel m;
    m.fit(pts, static_cast<int>(c[0].features.size()));
    std::vector<double> sum_p(5, 0), sum_oom(5, 0), count(5, 0);
    const int held = 3000;
    for (int k = 80; k < 80 + held; ++k) {
        int i = order[k];
        double p = m.probability_over(c[i].features, c[i].prior_peak_bytes, sim.spec().memory_limit_bytes);
        int b = std::min(4, static_cast<int>(p * 5));
        sum_p[b] += p, sum_oom[b] += sim.fits(i) ? 0 : 1, count[b] += 1;
    }
    double ece = 0;
    for (int b = 0; b < 5; ++b) {
        if (count[b] == 0) continue;
        double gap = std::abs(sum_p[b] - sum_oom[b]) / count[b];
        ece += gap * count[b] / held;
        if (count[b] >= 100)
            CHECK_MESSAGE(gap <= 0.2, "bin " << b << " predicted " << sum_p[b] / count[b] << " observed "
                                             << sum_oom[b] / count[b]);
    }
    CHECK(ece <= 0.10);
}

// A job without an analytic estimate: every configuration gets one constant prior (half the limit, as
// search::ModelProposer gives it), so the features must carry the whole memory effect. The evidence picks a
// wide feature scale, and the averaged prediction's 90% interval covers the held-out peaks; the narrow scale
// alone (what an analytic estimate needs) shrinks the effect and reads the rest as noise: worse predictions
// behind wider intervals.
TEST_CASE("without an estimate the memory model learns the effect from the features") {
    Synthetic s(300, 5);
    std::mt19937_64 rng(9);
    std::normal_distribution<double> noise(0.0, 0.05);
    std::vector<double> truth(300);
    for (int i = 0; i < 300; ++i)
        truth[i] = s.prior[i] * std::exp(noise(rng)); // 20..72 GB, 5% noise
    const double constant = 40e9;
    std::vector<MemoryPoint> pts;
    for (int i = 0; i < 25; ++i)
        pts.push_back({s.x[i], constant, false, truth[i]});
    auto held_out = [&](const CensoredMemoryModel& m, double& coverage, double& mean_sd) {
        double worst = 0;
        int covered = 0;
        mean_sd = 0;
        for (int i = 25; i < 300; ++i) {
            const auto p = m.predict(s.x[i], constant);
            worst = std::max(worst, std::abs(p.mean_log - std::log(truth[i])));
            covered += std::abs(std::log(truth[i]) - p.mean_log) <= 1.645 * p.sd_log;
            mean_sd += p.sd_log / 275.0;
        }
        coverage = covered / 275.0;
        return worst;
    };
    CensoredMemoryModel wide;
    wide.fit(pts, 3);
    double wide_coverage = 0, wide_sd = 0;
    const double wide_worst = held_out(wide, wide_coverage, wide_sd);
    CHECK(wide_worst < std::log(1.25));
    CHECK(wide_coverage >= 0.85);
    MemoryModelSettings narrow_only;
    narrow_only.feature_prior_sd_grid = {0.15};
    CensoredMemoryModel narrow;
    narrow.fit(pts, 3, narrow_only);
    double narrow_coverage = 0, narrow_sd = 0;
    const double narrow_worst = held_out(narrow, narrow_coverage, narrow_sd);
    CHECK(narrow_worst > wide_worst);
    CHECK(narrow_sd > 1.5 * wide_sd);
}
