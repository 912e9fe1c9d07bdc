// The capacity rule (space/capacity.hpp): micro-batch and recompute carried as settings relative to memory
// when the memory limit changes, the global batch kept by gradient accumulation.
#include "contract/contract.hpp"
#include "space/capacity.hpp"
#include "space/space.hpp"
#include "util/error.hpp"

#include "test_support.hpp"
#include <algorithm>

#include <doctest/doctest.h>
#include <string>
#include <vector>

using namespace infrarsi;
using space::scale_capacity;
using test::toy;

namespace {

space::Space toyload_space() {
    return contract::load(std::string(INFRARSI_FIXTURES) + "/toyload.contract.toml").space;
}

} // namespace

TEST_CASE("capacity rule: micro-batch scales with the memory limit, the global batch stays fixed") {
    auto space = toyload_space();

    auto same = scale_capacity(space, toy(8, 2, "none"), 1.0);
    REQUIRE(same);
    CHECK(same->candidate == toy(8, 2, "none"));
    CHECK(same->change.empty());

    // 160M instead of 300M: 8 x 0.53 = 4.3, rounded down to the power of two 4; accumulation follows.
    auto less = scale_capacity(space, toy(8, 2, "none"), 160.0 / 300.0);
    REQUIRE(less);
    CHECK(less->candidate == toy(4, 4, "none"));
    CHECK(less->change == "grad_accum 2 -> 4, micro_batch 8 -> 4");

    // Twice the memory: twice the micro-batch, clamped to the space.
    CHECK(scale_capacity(space, toy(4, 4, "selective"), 2.0)->candidate == toy(8, 2, "selective"));
    CHECK(scale_capacity(space, toy(16, 1, "full"), 4.0)->candidate == toy(16, 1, "full"));

    // Less memory than even the smallest micro-batch allows: one step more recompute.
    auto tiny = scale_capacity(space, toy(2, 8, "none"), 0.25);
    REQUIRE(tiny);
    CHECK(tiny->candidate == toy(1, 16, "selective"));
    CHECK(scale_capacity(space, toy(1, 16, "full"), 0.1)->candidate == toy(1, 16, "full"));

    CHECK_THROWS_AS(scale_capacity(space, toy(8, 2, "none"), 0.0), Error);
}

TEST_CASE("capacity rule: layout knobs and patches are kept, a space it cannot satisfy refuses") {
    space::Space s = toyload_space();
    // Without a gradient-accumulation knob the fixed global batch cannot follow the micro-batch.
    space::Space fixed = s;
    fixed.knobs.erase(std::remove_if(fixed.knobs.begin(), fixed.knobs.end(),
                                     [](const space::Knob& k) { return k.name == "grad_accum"; }),
                      fixed.knobs.end());
    fixed.constraints = {{space::Constraint::Kind::ProductEquals, {"micro_batch"}, "", 8, "micro_batch = 8"}};
    space::Candidate c;
    c.knobs = {{"micro_batch", 8LL}, {"recompute", std::string("none")}};
    CHECK_FALSE(scale_capacity(fixed, c, 0.5));

    // A layout knob and the patches never move.
    space::Knob tp;
    tp.name = "tensor_parallel";
    tp.kind = space::KnobKind::Pow2;
    tp.min = 1;
    tp.max = 8;
    tp.env = "TP";
    tp.baseline = 1LL;
    s.knobs.push_back(tp);
    s.patches = {"fast_kernel"};
    auto with = toy(8, 2, "none");
    with.knobs["tensor_parallel"] = 4LL;
    with.patches = {"fast_kernel"};
    auto r = scale_capacity(s, with, 0.5);
    REQUIRE(r);
    CHECK(std::get<long long>(r->candidate.knobs.at("tensor_parallel")) == 4);
    CHECK(std::get<long long>(r->candidate.knobs.at("micro_batch")) == 4);
    CHECK(r->candidate.patches == std::vector<std::string>{"fast_kernel"});
}
