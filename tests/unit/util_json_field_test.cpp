#include "util/json_field.hpp"

#include <doctest/doctest.h>

using infrarsi::Error;
using infrarsi::json_field;

TEST_CASE("a JSON field is there, of its type, and an unsigned one is a non-negative integer in range") {
    const auto j = nlohmann::json::parse(R"({"n": 3, "neg": -1, "big": 4294967296, "f": 1.5, "s": "x"})");
    CHECK(json_field<unsigned>(j, "n", "test") == 3u);
    CHECK(json_field<int>(j, "neg", "test") == -1);
    CHECK(json_field<std::uint64_t>(j, "big", "test") == 4294967296ull);
    CHECK(json_field<double>(j, "f", "test") == 1.5);
    CHECK_THROWS_WITH_AS(json_field<unsigned>(j, "neg", "rec.json"),
                         "rec.json: field 'neg' must be an integer in 0..4294967295", Error);
    CHECK_THROWS_WITH_AS(json_field<std::uint32_t>(j, "big", "t"), doctest::Contains("0..4294967295"), Error);
    CHECK_THROWS_WITH_AS(json_field<unsigned>(j, "f", "t"), doctest::Contains("must be an integer"), Error);
    CHECK_THROWS_WITH_AS(json_field<int>(j, "s", "t"), "t: field 's' has the wrong type", Error);
    CHECK_THROWS_WITH_AS(json_field<int>(j, "absent", "t"), "t: missing field 'absent'", Error);
    CHECK_THROWS_WITH_AS(json_field<int>(nlohmann::json::array(), "n", "t"), "t: missing field 'n'", Error);
}
