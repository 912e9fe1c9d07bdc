// The noise calibration: stays within its budget, measures positive rates, and its summary statistics.
#include "node/calibration.hpp"
#include "util/error.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

using namespace infrarsi;
using namespace infrarsi::node;

TEST_CASE("summary statistics: median, range and coefficient of variation") {
    auto s = summarize({4, 1, 3, 2});
    CHECK(s.median == doctest::Approx(2.5));
    CHECK(s.min == 1);
    CHECK(s.max == 4);
    CHECK(s.cv == doctest::Approx(1.2909944 / 2.5));
    CHECK(summarize({5, 5, 5}).cv == 0);
    CHECK(summarize({}).median == 0);
}

TEST_CASE("a 150 ms calibration measures every probe a few times and stays near its budget") {
    CalibrationOptions o;
    o.budget = std::chrono::milliseconds(150);
    o.repeats = 3;
    o.memory_bytes = 6u << 20;
    auto c = calibrate(o);
    CHECK(c.compute_gflops.samples.size() == 3);
    CHECK(c.memory_gbs.samples.size() == 3);
    CHECK(c.timer_overshoot_us.samples.size() == 3);
    CHECK(c.compute_gflops.median > 0.01);
    CHECK(c.memory_gbs.median > 0.01);
    // The vector FMA probe: the CPU's widest unit, several times the scalar chains' rate (x86-64 has SSE2 at
    // least: 4 floats a lane; AVX2 + FMA does 8 a lane and fuses the add).
    CHECK(c.vector_gflops.samples.size() == 3);
    CHECK((c.vector_isa == "avx512f" || c.vector_isa == "avx2+fma" || c.vector_isa == "sse2"));
    CHECK(c.vector_gflops.max > c.compute_gflops.max);
    CHECK(c.timer_resolution_ns > 0);
    // Budget plus one iteration's overshoot per slice; a loaded CI machine can be late, not 2x late.
    CHECK(c.elapsed_ms < 2 * 150);
    CHECK(c.elapsed_ms > 150 * 0.5);
    CHECK_FALSE(c.nccl.has_value());
}

TEST_CASE("a zero budget runs no probe") {
    CalibrationOptions o;
    o.budget = std::chrono::milliseconds(0);
    auto c = calibrate(o);
    CHECK(c.compute_gflops.samples.empty());
    CHECK(c.elapsed_ms < 50);
}

TEST_CASE("NCCL is looked for only when asked, and absent here is not an error") {
    CalibrationOptions o;
    o.budget = std::chrono::milliseconds(0);
    o.nccl = true;
    auto c = calibrate(o);
    REQUIRE(c.nccl.has_value());
    CHECK(c.nccl->available == (c.nccl->version > 0));
}

TEST_CASE("calibration JSON round-trips and rejects negative samples") {
    CalibrationOptions o;
    o.budget = std::chrono::milliseconds(30);
    o.repeats = 2;
    o.memory_bytes = 1u << 20;
    auto c = calibrate(o);
    auto j = to_json(c);
    CHECK(calibration_from_json(j) == c);
    j["memory_gbs"]["samples"] = {1.0, -2.0};
    CHECK_THROWS_WITH_AS(calibration_from_json(j), doctest::Contains("memory_gbs"), Error);
    j.erase("memory_gbs");
    CHECK_THROWS_WITH_AS(calibration_from_json(j), doctest::Contains("memory_gbs"), Error);
    // An older plugin's record has no vector probe: read as empty, and written back without it.
    auto old_record = to_json(c);
    old_record.erase("vector_gflops");
    old_record.erase("vector_isa");
    const auto read = calibration_from_json(old_record);
    CHECK(read.vector_gflops.samples.empty());
    CHECK_FALSE(to_json(read).contains("vector_gflops"));
}
