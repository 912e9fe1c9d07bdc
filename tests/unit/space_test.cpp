#include "contract/contract.hpp"
#include "space/memory_role.hpp"
#include "space/space.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <set>

using namespace infrarsi;

namespace {
space::Space toy_space() {
    auto c = contract::load(std::string(INFRARSI_FIXTURES) + "/toyload.contract.toml");
    c.space.patches = {"fast_kernel", "math_shortcut"};
    return c.space;
}
} // namespace

TEST_CASE("enumeration yields only candidates that satisfy the constraints") {
    auto s = toy_space();
    auto all = s.enumerate();
    // micro_batch in {1..16} pins grad_accum: 5 x 3 recompute x 4 patch sets.
    CHECK(all.size() == 5 * 3 * 4);
    std::set<std::string> keys;
    for (const auto& c : all) {
        CHECK(s.feasible(c));
        keys.insert(c.key());
    }
    CHECK(keys.size() == all.size());
}

TEST_CASE("neighbours keep the global batch by compensating the accumulation") {
    auto s = toy_space();
    auto base = s.baseline();
    auto n = s.neighbours(base);
    bool found = false;
    for (const auto& c : n) {
        CHECK(s.feasible(c));
        if (std::get<long long>(c.knobs.at("micro_batch")) == 2 &&
            std::get<long long>(c.knobs.at("grad_accum")) == 8)
            found = true;
    }
    CHECK(found);
}

TEST_CASE("encoding uses log2 for powers of two, one-hot for choices and patch indicators") {
    auto s = toy_space();
    auto c = s.baseline();
    c.knobs["micro_batch"] = 4LL;
    c.knobs["grad_accum"] = 4LL;
    c.knobs["recompute"] = std::string("full");
    c.patches = {"math_shortcut"};
    auto f = s.encode(c);
    auto names = s.feature_names();
    REQUIRE(f.size() == static_cast<Eigen::Index>(names.size()));
    auto at = [&](const std::string& name) {
        auto it = std::find(names.begin(), names.end(), name);
        REQUIRE(it != names.end());
        return f[it - names.begin()];
    };
    CHECK(at("log2(micro_batch)") == doctest::Approx(0.5)); // log2(4) / log2(16)
    CHECK(at("recompute=none") == 0.0);
    CHECK(at("recompute=full") == 1.0);
    CHECK(at("patch:fast_kernel") == 0.0);
    CHECK(at("patch:math_shortcut") == 1.0);
}

TEST_CASE("a candidate round-trips through JSON and its environment uses the knobs' variables") {
    auto s = toy_space();
    auto c = s.baseline();
    c.patches = {"fast_kernel"};
    auto back = space::Candidate::from_json(c.to_json());
    CHECK(back.key() == c.key());
    auto env = s.environment(c);
    CHECK(env.at("TOY_MICRO_BATCH") == "1");
    CHECK(env.at("TOY_RECOMPUTE") == "none");
    auto bad = c;
    bad.knobs["micro_batch"] = 3LL;
    CHECK_THROWS(s.check(bad));
}

TEST_CASE("memory roles come from the knob's name and domain") {
    using space::MemoryRole;
    auto knob = [](std::string name, space::KnobKind kind, std::vector<std::string> choices = {}) {
        space::Knob k;
        k.name = std::move(name);
        k.kind = kind;
        k.choices = std::move(choices);
        return k;
    };
    CHECK(space::memory_role(knob("micro_batch", space::KnobKind::Pow2)) == MemoryRole::MicroBatch);
    CHECK(space::memory_role(knob("mbs", space::KnobKind::Integer)) == MemoryRole::MicroBatch);
    CHECK(space::memory_role(knob("micro_batch", space::KnobKind::Choice, {"a"})) == MemoryRole::Other);
    CHECK(space::memory_role(knob("grad_accum", space::KnobKind::Pow2)) == MemoryRole::Accumulation);
    CHECK(space::memory_role(knob("gradient_accumulation_steps", space::KnobKind::Integer)) ==
          MemoryRole::Accumulation);
    CHECK(space::memory_role(knob("recompute", space::KnobKind::Choice, {"none", "selective", "full"})) ==
          MemoryRole::Recompute);
    CHECK(space::memory_role(knob("activation_recompute", space::KnobKind::Bool)) == MemoryRole::Recompute);
    CHECK(space::memory_role(knob("recompute", space::KnobKind::Choice, {"none", "blocks"})) ==
          MemoryRole::Other);
    CHECK(space::memory_role(knob("threads", space::KnobKind::Integer)) == MemoryRole::Other);
    CHECK(space::recompute_strength(space::Value(std::string("none"))) <
          space::recompute_strength(space::Value(std::string("selective"))));
    CHECK(space::recompute_strength(space::Value(std::string("selective"))) <
          space::recompute_strength(space::Value(std::string("full"))));
    CHECK(space::recompute_strength(space::Value(false)) < space::recompute_strength(space::Value(true)));
}

TEST_CASE("every knob kind has one name in the table, printed and parsed back to the same kind") {
    using space::KnobKind;
    std::set<std::string> names;
    for (const auto k : {KnobKind::Integer, KnobKind::Pow2, KnobKind::Choice, KnobKind::Bool}) {
        const std::string name = space::to_string(k);
        CHECK(name != "?");
        CHECK(space::knob_kind_names.parse(name) == k);
        names.insert(name);
    }
    CHECK(names == std::set<std::string>{"integer", "pow2", "choice", "bool"});
    CHECK(!space::knob_kind_names.parse("float"));
}
