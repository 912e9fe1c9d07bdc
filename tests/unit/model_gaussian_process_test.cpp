#include "model/gaussian_process.hpp"
#include "util/error.hpp"

#include <cmath>
#include <doctest/doctest.h>
#include <random>

using namespace infrarsi;
using namespace infrarsi::model;

namespace {
double known(const Eigen::VectorXd& x) {
    return std::sin(3.0 * x(0)) + 0.5 * x(1) * x(1);
} // x(2) is irrelevant
} // namespace

TEST_CASE("GP recovers a known function from noisy samples and is unsure far from data") {
    std::mt19937_64 rng(3);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::normal_distribution<double> noise(0.0, 0.01);
    const int n = 60;
    Eigen::MatrixXd X(n, 3);
    Eigen::VectorXd y(n);
    for (int i = 0; i < n; ++i) {
        X.row(i) << u(rng), u(rng), u(rng);
        y(i) = known(X.row(i).transpose()) + noise(rng);
    }
    GaussianProcess gp;
    GpSettings s;
    s.noise_variance_floor = 1e-4;
    gp.fit(X, y, s);

    Eigen::MatrixXd T(200, 3);
    Eigen::VectorXd truth(200);
    for (int i = 0; i < 200; ++i) {
        T.row(i) << u(rng), u(rng), u(rng);
        truth(i) = known(T.row(i).transpose());
    }
    auto post = gp.posterior(T);
    double rmse = std::sqrt((post.mean - truth).squaredNorm() / 200);
    CHECK(rmse < 0.05); // the function's range is about 1.5
    // ARD: the irrelevant third feature gets a longer length scale than the first.
    CHECK(gp.hyperparameters().log_lengthscales(2) > gp.hyperparameters().log_lengthscales(0));
    CHECK(gp.noise_variance() >= 1e-4);

    Eigen::MatrixXd far(1, 3);
    far << 4.0, 4.0, 4.0;
    auto p_far = gp.posterior(far);
    CHECK(std::sqrt(p_far.variance(0)) > 10 * std::sqrt(post.variance.mean()));
    CHECK(gp.mean(T).isApprox(post.mean, 1e-9));
}

TEST_CASE("GP with a subset of data stays accurate above max_points") {
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    const int n = 900;
    Eigen::MatrixXd X(n, 3);
    Eigen::VectorXd y(n);
    for (int i = 0; i < n; ++i) {
        X.row(i) << u(rng), u(rng), u(rng);
        y(i) = known(X.row(i).transpose());
    }
    GaussianProcess gp;
    GpSettings s;
    s.max_points = 200;
    s.fit_points = 80;
    gp.fit(X, y, s);
    CHECK(gp.points_used() == 200);
    Eigen::MatrixXd T(100, 3);
    Eigen::VectorXd truth(100);
    for (int i = 0; i < 100; ++i) {
        T.row(i) << u(rng), u(rng), u(rng);
        truth(i) = known(T.row(i).transpose());
    }
    CHECK(std::sqrt((gp.mean(T) - truth).squaredNorm() / 100) < 0.05);
}

TEST_CASE("GP refuses empty or mismatched input") {
    GaussianProcess gp;
    CHECK_THROWS_AS(gp.fit(Eigen::MatrixXd(0, 2), Eigen::VectorXd(0), {}), Error);
    CHECK_THROWS_AS(gp.fit(Eigen::MatrixXd::Zero(3, 2), Eigen::VectorXd::Zero(2), {}), Error);
    CHECK_THROWS_AS(gp.posterior(Eigen::MatrixXd::Zero(1, 2)), Error);
}
