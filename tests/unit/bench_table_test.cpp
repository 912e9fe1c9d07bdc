// The recorded-table reader of the tuner benchmark (tests/bench/tables/README.md): tables without a memory
// estimate, timeouts, and tables cut short or half-annotated are read or refused with the line named.
#include "bench/environment.hpp"
#include "util/error.hpp"

#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

using namespace infrarsi;

namespace {

const char* kHeader =
    R"({"format": "infrarsi-bench-table/1", "table": "t", "memory_limit_bytes": 1000.0, "noise_variance": 0.01,)"
    R"( "trial_steps": 8, "startup_s": 5, "knobs": [{"name": "mb", "kind": "power_of_two", "values": ["1", "2"],)"
    R"( "memory": "increasing"}], "patches": [], "baseline": {"knobs": {"mb": "1"}, "patches": []}})";

std::string write(const std::string& text) {
    static int n = 0;
    const auto path =
        std::filesystem::temp_directory_path() /
        ("infrarsi-bench-table-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + ".jsonl");
    std::ofstream(path) << text;
    return path.string();
}

} // namespace

TEST_CASE("a table without a memory estimate gets half the limit everywhere, and a timeout is censored") {
    const auto path = write(
        std::string(kHeader) + "\n" +
        R"({"knobs": {"mb": "1"}, "repeats": [{"outcome": "ok", "step_time_s": 1.0, "cost_s": 13}]})"
        "\n" +
        R"({"knobs": {"mb": "2"}, "repeats": [{"outcome": "timeout", "step_time_s": 2.0, "cost_s": 60},)"
        R"( {"outcome": "failed", "cost_s": 3}]})"
        "\n");
    bench::RecordedTableEnvironment env(path);
    CHECK_FALSE(env.analytic_prior());
    for (const auto& c : env.candidates())
        CHECK(c.prior_peak_bytes == doctest::Approx(500.0));
    CHECK_FALSE(env.feasible(1));
    std::mt19937_64 rng(1);
    bool timeout = false, crash = false;
    for (int i = 0; i < 50; ++i) {
        const auto t = env.run(1, rng);
        if (t.outcome == model::ObservationKind::timeout) {
            timeout = true;
            CHECK(t.step_time_censored);
        }
        if (t.outcome == model::ObservationKind::infeasible) crash = true; // the job's own failure
    }
    CHECK(timeout);
    CHECK(crash);
    // Its only variant is "none": it has no estimate to halve or double.
    bench::PriorVariantEnvironment none(env, bench::PriorVariant::none);
    CHECK_FALSE(none.analytic_prior());
    std::filesystem::remove(path);
}

TEST_CASE(
    "hostile tables are refused naming the line: priors on some lines only, unknown outcomes, cut short") {
    auto refused = [](const std::string& body, const std::string& says) {
        const auto path = write(body);
        try {
            bench::RecordedTableEnvironment env(path);
            FAIL("accepted: " << body);
        } catch (const Error& e) {
            CHECK_MESSAGE(std::string(e.what()).find(says) != std::string::npos, e.what());
        }
        std::filesystem::remove(path);
    };
    const std::string ok1 =
        R"({"knobs": {"mb": "1"}, "prior_peak_bytes": 300.0, "repeats": [{"outcome": "ok", "step_time_s": 1.0, "cost_s": 13}]})";
    refused(
        std::string(kHeader) + "\n" + ok1 + "\n" +
            R"({"knobs": {"mb": "2"}, "repeats": [{"outcome": "ok", "step_time_s": 1.0, "cost_s": 13}]})" +
            "\n",
        "prior_peak_bytes on some configurations only");
    refused(std::string(kHeader) + "\n" +
                R"({"knobs": {"mb": "1"}, "repeats": [{"outcome": "exploded", "cost_s": 1}]})" + "\n",
            "outcome 'exploded'");
    refused(std::string(kHeader) + "\n" + ok1.substr(0, 40) + "\n", "not JSON");
    refused("", "empty table");
}
