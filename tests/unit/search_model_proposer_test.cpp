#include "contract/contract.hpp"
#include "search/model_proposer.hpp"
#include "search/proposer.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>

using namespace infrarsi;

namespace {

// micro_batch 1..32 x recompute x an unordered layout knob, two tagged patches; no constraints.
space::Space memory_space() {
    space::Space s;
    space::Knob mb;
    mb.name = "micro_batch";
    mb.kind = space::KnobKind::Pow2;
    mb.min = 1;
    mb.max = 32;
    mb.env = "MB";
    mb.baseline = 1LL;
    space::Knob rc;
    rc.name = "recompute";
    rc.kind = space::KnobKind::Choice;
    rc.choices = {"none", "selective", "full"};
    rc.env = "RC";
    rc.baseline = std::string("none");
    space::Knob layout;
    layout.name = "layout";
    layout.kind = space::KnobKind::Choice;
    layout.choices = {"a", "b"};
    layout.env = "LAYOUT";
    layout.baseline = std::string("a");
    s.knobs = {mb, rc, layout};
    s.patches = {"big_buffer", "fused_attn"};
    return s;
}

space::Candidate make(long long mb, const std::string& rc, const std::string& layout,
                      std::vector<std::string> patches = {}) {
    space::Candidate c;
    c.knobs["micro_batch"] = mb;
    c.knobs["recompute"] = rc;
    c.knobs["layout"] = layout;
    std::sort(patches.begin(), patches.end());
    c.patches = patches;
    return c;
}

search::ProposalContext memory_context(const space::Space& s) {
    search::ProposalContext ctx;
    ctx.space = &s;
    ctx.patches = {{"big_buffer", {"memory_hungry"}}, {"fused_attn", {"memory_saver"}}};
    ctx.memory_limit_bytes = 80e9;
    ctx.noise_floor = 0.03;
    ctx.seed = 7;
    return ctx;
}

long long mb_of(const space::Candidate& c) {
    return std::get<long long>(c.knobs.at("micro_batch"));
}

} // namespace

TEST_CASE("model proposer: an OOM at micro_batch=16 is never repeated nor dominated") {
    auto s = memory_space();
    auto ctx = memory_context(s);
    const auto oom = make(16, "none", "a");
    ctx.history.push_back({make(1, "none", "a"), trial::Outcome::Ok, 2.0, 20e9, 100});
    ctx.history.push_back({make(4, "none", "b"), trial::Outcome::Ok, 1.4, 45e9, 100});
    ctx.history.push_back({make(8, "full", "a"), trial::Outcome::Ok, 1.3, 40e9, 100});
    ctx.history.push_back({oom, trial::Outcome::OutOfMemory, {}, 80e9, 30});
    ctx.history.push_back({make(2, "selective", "b"), trial::Outcome::Crash, {}, {}, 10});

    for (int q : {1, 4, 12, 40}) {
        CAPTURE(q);
        search::ModelProposer p;
        ctx.q = q;
        auto batch = p.propose(ctx);
        // A large batch holds only what is worth a trial (P(failure) <= 0.5, some expected gain).
        if (q <= 12)
            REQUIRE(static_cast<int>(batch.size()) == q);
        else
            REQUIRE(batch.size() >= 12u);
        std::set<std::string> keys;
        for (const auto& b : batch) {
            CAPTURE(b.candidate.describe());
            CHECK(s.feasible(b.candidate));
            CHECK_NOTHROW(s.check(b.candidate));
            CHECK_FALSE(b.reason.empty());
            const bool again = b.reason.rfind("re-measure", 0) == 0; // measured once, measured again
            for (const auto& h : ctx.history)
                CHECK((again || b.candidate.key() != h.candidate.key()));
            // Dominates the OOM: at least its micro-batch, no more recompute, same layout, no saver patch.
            const bool saver =
                std::count(b.candidate.patches.begin(), b.candidate.patches.end(), "fused_attn");
            const bool dominating = mb_of(b.candidate) >= 16 &&
                                    std::get<std::string>(b.candidate.knobs.at("recompute")) == "none" &&
                                    std::get<std::string>(b.candidate.knobs.at("layout")) == "a" && !saver;
            CHECK_FALSE(dominating);
            keys.insert(b.candidate.key());
        }
        CHECK(keys.size() == batch.size());
    }
}

TEST_CASE("model proposer: reasons carry P(OOM), the constant memory prior is said") {
    auto s = memory_space();
    auto ctx = memory_context(s);
    ctx.q = 3;
    auto batch = search::ModelProposer().propose(ctx);
    REQUIRE(batch.size() == 3);
    for (const auto& b : batch) {
        CHECK(b.reason.find("P(OOM)") != std::string::npos);
        CHECK(b.reason.find("memory prior: constant") != std::string::npos);
    }
    // With an analytic estimate, no such note.
    ctx.memory_estimate = [](const space::Candidate& c) -> std::optional<double> {
        return 5e9 * static_cast<double>(mb_of(c));
    };
    for (const auto& b : search::ModelProposer().propose(ctx))
        CHECK(b.reason.find("memory prior: constant") == std::string::npos);
}

TEST_CASE("model proposer: seeds come first, as hints") {
    auto s = memory_space();
    auto ctx = memory_context(s);
    ctx.q = 2;
    ctx.seeds = {make(8, "selective", "b", {"fused_attn"})};
    auto batch = search::ModelProposer().propose(ctx);
    REQUIRE(!batch.empty());
    CHECK(batch[0].candidate.key() == ctx.seeds[0].key());
    CHECK(batch[0].reason.find("hint") != std::string::npos);
}

TEST_CASE("model proposer on a constrained contract space: feasible, no broken patch sets, exhausts") {
    auto c = contract::load(std::string(INFRARSI_FIXTURES) + "/toyload.contract.toml");
    auto& s = c.space;
    s.patches = {"broken_build", "fast_kernel"};
    search::ProposalContext ctx;
    ctx.space = &s;
    ctx.memory_limit_bytes = 300e6;
    ctx.q = 100;
    auto broken = s.baseline();
    broken.patches = {"broken_build"};
    ctx.history.push_back({broken, trial::Outcome::BuildFailure, {}, {}, 0});
    search::ModelProposer p;
    auto all = p.propose(ctx);
    CHECK(all.size() == 30); // 5 micro-batches x 3 recompute modes x fast_kernel on/off
    for (const auto& a : all) {
        CHECK(s.feasible(a.candidate));
        CHECK(std::count(a.candidate.patches.begin(), a.candidate.patches.end(), "broken_build") == 0);
        ctx.history.push_back({a.candidate, trial::Outcome::Ok, 1.0, 1e8, 10});
    }
    CHECK(p.propose(ctx).empty());
}

TEST_CASE("make_proposer: model is the default, simple stays selectable") {
    CHECK(search::make_proposer("")->name().rfind("model", 0) == 0);
    CHECK(search::make_proposer("model")->name().rfind("model", 0) == 0);
    CHECK(search::make_proposer("simple")->name().rfind("simple", 0) == 0);
    CHECK_THROWS(search::make_proposer("nope"));
}

TEST_CASE("model proposer without a memory limit falls back to the simple one, and says so") {
    auto s = memory_space();
    auto ctx = memory_context(s);
    ctx.memory_limit_bytes = 0;
    ctx.q = 2;
    auto batch = search::ModelProposer().propose(ctx);
    REQUIRE(batch.size() == 2);
    CHECK(batch[0].reason.find("no memory limit") != std::string::npos);
}

TEST_CASE("model proposer: an OOM at micro_batch=16 reaches the knobs it cannot recognise (threads, BLAS), a "
          "timeout with no step done reaches the BLAS it alone had, and the log says so") {
    space::Space s;
    space::Knob mb;
    mb.name = "micro_batch";
    mb.kind = space::KnobKind::Pow2;
    mb.min = 1;
    mb.max = 32;
    mb.env = "MB";
    mb.baseline = 1LL;
    space::Knob th;
    th.name = "threads";
    th.kind = space::KnobKind::Integer;
    th.min = 1;
    th.max = 4;
    th.env = "THREADS";
    th.baseline = 1LL;
    space::Knob blas;
    blas.name = "blas";
    blas.kind = space::KnobKind::Choice;
    blas.choices = {"openblas", "reference"};
    blas.env = "BLAS";
    blas.baseline = std::string("openblas");
    s.knobs = {mb, th, blas};
    s.patches = {"fused_attn"}; // untagged: no memory claim
    auto cand = [](long long m, long long t, const std::string& b, bool patch = false) {
        space::Candidate c;
        c.knobs = {{"micro_batch", m}, {"threads", t}, {"blas", b}};
        if (patch) c.patches = {"fused_attn"};
        return c;
    };
    search::ProposalContext ctx;
    ctx.space = &s;
    ctx.patches = {{"fused_attn", {}}};
    ctx.memory_limit_bytes = 8e9;
    ctx.noise_floor = 0.03;
    ctx.seed = 3;
    ctx.history.push_back({cand(1, 1, "openblas"), trial::Outcome::Ok, 2.0, 2e9, 100});
    ctx.history.push_back({cand(4, 2, "openblas"), trial::Outcome::Ok, 1.2, 4e9, 100});
    ctx.history.push_back({cand(8, 1, "openblas", true), trial::Outcome::Ok, 1.3, 6e9, 100});
    ctx.history.push_back({cand(16, 1, "openblas"), trial::Outcome::OutOfMemory, {}, 8e9, 30});
    ctx.history.push_back({cand(1, 1, "reference"), trial::Outcome::Timeout, {}, {}, 60});
    ctx.time_limit_s = 60;
    ctx.trial_steps = 8;
    ctx.trial_overhead_s = 7;
    ctx.q = 40;
    search::ModelProposer p;
    const auto batch = p.propose(ctx);
    REQUIRE_FALSE(batch.empty());
    for (const auto& b : batch) {
        CAPTURE(b.candidate.describe());
        CHECK(mb_of(b.candidate) < 16);
        CHECK(std::get<std::string>(b.candidate.knobs.at("blas")) == "openblas");
    }
    const auto notes = p.notes();
    CHECK(std::any_of(notes.begin(), notes.end(),
                      [](const std::string& n) { return n.find("OOM edge") != std::string::npos; }));
    CHECK(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
        return n.find("timeout edge") != std::string::npos && n.find("blas=reference") != std::string::npos;
    }));
}

namespace {

// The demo's contract (workloads/minigpt/presets/dense-1node.contract.toml) after its opening batch: the
// baseline and its three first one-knob moves, two ranks the best (scripts/demo's measurements, s/step).
search::ProposalContext demo_after_opening(const space::Space& s, bool tag_claims, std::uint64_t seed) {
    search::ProposalContext ctx;
    ctx.space = &s;
    ctx.memory_limit_bytes = 1400.0 * (1 << 20);
    ctx.noise_floor = 0.10;
    ctx.seed = seed;
    ctx.q = 3;
    const std::vector<std::pair<std::string, std::vector<std::string>>> catalog = {
        {"fused-attention", {"speedup", "memory_saver", "conflicts_with=window-attention"}},
        {"window-attention", {"speedup", "memory_saver", "math_changing", "conflicts_with=fused-attention"}},
        {"broken-simd-gelu", {"speedup", "expected_build_failure"}}};
    for (const auto& [id, tags] : catalog)
        ctx.patches.push_back({id, tags, tag_claims ? search::tag_claim(tags) : std::nullopt});
    auto at = [&](long long mb, long long ga, long long ranks, long long threads, const char* rc) {
        auto c = s.baseline();
        c.knobs["micro_batch"] = mb;
        c.knobs["grad_accum"] = ga;
        c.knobs["ranks_per_node"] = ranks;
        c.knobs["threads"] = threads;
        c.knobs["recompute"] = std::string(rc);
        return c;
    };
    for (double t : {1.087, 0.971, 1.021})
        ctx.history.push_back({s.baseline(), trial::Outcome::Ok, t, 4e8, 12});
    ctx.history.push_back({at(2, 8, 1, 2, "none"), trial::Outcome::Ok, 0.921, 3e8, 12});
    ctx.history.push_back({at(4, 4, 1, 2, "selective"), trial::Outcome::Ok, 1.088, 3e8, 12});
    ctx.history.push_back({at(4, 2, 2, 1, "none"), trial::Outcome::Ok, 0.852, 5e8, 12});
    return ctx;
}

} // namespace

TEST_CASE("model proposer: a catalog patch tagged speedup is tried on the best knobs right after the opening "
          "batch (the demo)") {
    auto c = contract::load(std::string(INFRARSI_FIXTURES) +
                            "/../../workloads/minigpt/presets/dense-1node.contract.toml");
    auto& s = c.space;
    s.patches = {"fused-attention", "window-attention",
                 "broken-simd-gelu"}; // the scope check accepts all three
    CHECK(search::tag_claim({"speedup", "memory_saver"}));
    CHECK_FALSE(search::tag_claim({"speedup", "math_changing"}));
    CHECK_FALSE(search::tag_claim({"speedup", "expected_build_failure"}));
    CHECK_FALSE(search::tag_claim({"memory_saver"}));
    // The tags' claims are vague (confidence 0): the opening batch is the baseline's one-knob moves in their
    // order, as without them (two ranks among them).
    std::vector<std::string> opening[2];
    for (bool claims : {true, false}) {
        auto ctx = demo_after_opening(s, claims, 1);
        ctx.history.resize(3); // the doctor's runs of the baseline
        search::ModelProposer p;
        for (const auto& a : p.propose(ctx))
            opening[claims].push_back(a.candidate.key());
    }
    CHECK(opening[0] == opening[1]);
    CHECK(std::count(opening[1].begin(), opening[1].end(),
                     "grad_accum=2;micro_batch=4;ranks_per_node=2;recompute=none;threads=1;|") == 1);
    int with_claims = 0, without = 0;
    const int seeds = 20;
    for (std::uint64_t seed = 1; seed <= seeds; ++seed)
        for (bool claims : {true, false}) {
            auto ctx = demo_after_opening(s, claims, seed);
            search::ModelProposer p;
            bool tried = false;
            for (const auto& a : p.propose(ctx)) {
                const auto& k = a.candidate.knobs;
                tried |= std::get<long long>(k.at("ranks_per_node")) == 2 &&
                         a.candidate.patches == std::vector<std::string>{"fused-attention"};
            }
            (claims ? with_claims : without) += tried;
        }
    MESSAGE("two ranks with fused attention in the next batch: ", with_claims, "/", seeds,
            " with the tags' claims, ", without, "/", seeds, " without");
    CHECK(with_claims == seeds);
}
