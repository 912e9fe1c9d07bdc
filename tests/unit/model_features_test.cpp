#include "model/features.hpp"
#include "util/error.hpp"

#include <doctest/doctest.h>

using namespace infrarsi;
using namespace infrarsi::model;

namespace {
FeatureEncoding small_encoding() {
    return FeatureEncoding(
        {{"mb", KnobSpec::Kind::power_of_two, {"1", "2", "4", "8"}, MemoryEffect::increasing, false},
         {"recompute", KnobSpec::Kind::choice, {"none", "full"}, MemoryEffect::decreasing, true},
         {"tp", KnobSpec::Kind::power_of_two, {"1", "2"}, MemoryEffect::unordered, false}},
        {{"flash", MemoryEffect::decreasing, true}, {"fused", MemoryEffect::none, false}});
}
} // namespace

TEST_CASE("features: log2 scaled to [0,1], one-hot choices, patch indicators and pairwise products") {
    auto enc = small_encoding();
    CHECK(enc.size() == 1 + 2 + 1 + 2 + 1);
    Configuration c{{{"mb", "4"}, {"recompute", "full"}, {"tp", "2"}}, {"flash", "fused"}};
    Eigen::VectorXd f = enc.encode(c);
    CHECK(f(0) == doctest::Approx(2.0 / 3.0));
    CHECK(f(1) == 0.0);
    CHECK(f(2) == 1.0);
    CHECK(f(3) == 1.0);
    CHECK(f(4) == 1.0);
    CHECK(f(5) == 1.0);
    CHECK(f(6) == 1.0); // flash x fused
    c.patches = {"flash"};
    CHECK(enc.encode(c)(6) == 0.0);
}

TEST_CASE("features: unknown knobs, values and patches are errors that name them") {
    auto enc = small_encoding();
    Configuration c{{{"mb", "3"}, {"recompute", "full"}, {"tp", "1"}}, {}};
    CHECK_THROWS_WITH_AS(enc.encode(c), doctest::Contains("'3'"), Error);
    c.knobs["mb"] = "2";
    c.patches = {"nope"};
    CHECK_THROWS_WITH_AS(enc.encode(c), doctest::Contains("nope"), Error);
    c.patches.clear();
    c.knobs.erase("tp");
    CHECK_THROWS_AS(enc.encode(c), Error);
}

TEST_CASE("features: memory keys order configurations and savers are one declared step away") {
    auto enc = small_encoding();
    std::vector<Configuration> configs;
    std::vector<double> prior;
    for (std::string mb : {"1", "2"})
        for (std::string rc : {"none", "full"})
            for (bool flash : {false, true}) {
                Configuration c{{{"mb", mb}, {"recompute", rc}, {"tp", "1"}}, {}};
                if (flash) c.patches.insert("flash");
                configs.push_back(c);
                prior.push_back(1e9);
            }
    auto cands = build_candidates(enc, configs, prior);
    REQUIRE(cands.size() == 8);
    // mb=2, none, no flash needs at least as much memory as mb=1, none, no flash.
    CHECK((cands[4].memory_key.array() >= cands[0].memory_key.array()).all());
    // ... but not as much as anything with a different tp (unordered knobs must match): key has +tp and -tp.
    CHECK(cands[0].memory_key.size() == 1 + 1 + 2 + 1);
    // mb=1, none, no flash: savers are recompute=full and +flash.
    REQUIRE(cands[0].savers.size() == 2);
    CHECK(cands[0].savers[0].change == "recompute=full");
    CHECK(cands[cands[0].savers[0].candidate].id == "mb=1 recompute=full tp=1");
    CHECK(cands[0].savers[1].change == "+flash");
    CHECK(cands[7].savers.empty()); // mb=2, full, flash: nothing left to save
}
