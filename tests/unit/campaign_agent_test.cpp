// The agent stage in a whole campaign on the local scheduler (the toyload fixture, no catalog): the patches a
// stand-in agent (tests/fixtures/agents/toy-agent) writes are stored, scope-checked, searched, built,
// equivalence-checked and verified like catalog patches; a hostile agent's answers are recorded for what they
// are and the campaign completes.
#include "campaign/campaign.hpp"
#include "util/error.hpp"
#include "util/sha256.hpp"

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>

namespace fs = std::filesystem;
using namespace infrarsi;
using test::TempDir;
using namespace std::chrono_literals;

namespace {

// The toyload contract without its catalog, with an agent of the given mode. `short_runs`: 4 steps a run
// instead of 8, for the tests of what the agent stage does with an answer (not of what a patch measures).
fs::path agent_campaign(const TempDir& d, const std::string& mode, int trials = 8, bool short_runs = false) {
    const fs::path fx = INFRARSI_FIXTURES;
    fs::copy(fx / "toyload", d.path / "toyload", fs::copy_options::recursive);
    fs::copy(fx / "toyload-patches", d.path / "toyload-patches", fs::copy_options::recursive);
    fs::create_directories(d.path / "agents");
    fs::copy_file(fx / "agents" / "toy-agent", d.path / "agents" / "toy-agent");
    std::string text = test::read_file(fx / "toyload.contract.toml");
    text = std::regex_replace(text, std::regex("catalog = \"toyload-patches/catalog.toml\"\n"), "");
    text = std::regex_replace(text, std::regex("trials = 8"), "trials = " + std::to_string(trials));
    text = std::regex_replace(text, std::regex("doctor = 3"), "doctor = 2");
    if (short_runs) {
        text = std::regex_replace(text, std::regex("steps = 8"), "steps = 4");
        text = std::regex_replace(text, std::regex("warmup_steps = 2"), "warmup_steps = 1");
    }
    text += "\n[agent]\ncommand = [\"python3\", \"{contract_dir}/agents/toy-agent\", \"" + mode +
            "\"]\nname = \"toy\"\ngoal = \"faster steps\"\ncalls = 2\ncall_time_limit = \"0:20\"\n"
            "max_patches_per_call = 4\n";
    std::ofstream(d.path / "toyload.contract.toml") << text;
    campaign::Campaign::init(d.path / "toyload.contract.toml", d.path / "c");
    return d.path / "c";
}

campaign::RunOptions local_options() {
    campaign::RunOptions o;
    o.verbose = false;
    o.scheduler = "local";
    o.poll = 50ms;
    o.accept_noise = true;
    return o;
}

std::map<std::string, store::PatchRow> patches(campaign::Campaign& c) {
    std::map<std::string, store::PatchRow> out;
    for (const auto& p : c.store().patches()) // the first of each name: a later offer of it is refused
        if (p.info.value("call", 0) == 1) out.emplace(p.info.value("name", ""), p);
    return out;
}

} // namespace

TEST_CASE("an agent's patches go the way of catalog patches: its speed-up searched and measured, its "
          "math-changing patch refused by the loss check although it did not say so, its repeats refused") {
    // Verification of an agent's patch is that of any patch (53-agent promotes one on the cluster).
    TempDir d;
    const auto dir = agent_campaign(d, "honest", 6);
    campaign::Campaign c(dir);
    auto o = local_options();
    o.verify = false;
    c.run(o);
    CHECK(c.store().stage() == store::Stage::Verification);
    const auto calls = c.store().agent_calls();
    REQUIRE(!calls.empty());
    CHECK(calls[0].outcome == "ok");
    CHECK(calls[0].trigger == "after_doctor");
    CHECK(calls[0].accepted == 2);
    CHECK(calls[0].tokens == 1000);
    auto ps = patches(c);
    REQUIRE(ps.count("fast-kernel"));
    REQUIRE(ps.count("math-shortcut"));
    const auto fast = ps["fast-kernel"];
    CHECK(fast.accepted);
    CHECK(fast.info["claim"]["speedup"].get<double>() == doctest::Approx(1.5));
    CHECK(fs::is_regular_file(fast.info["file"].get<std::string>()));
    // Later calls see the earlier patches' fates (the second call's request names them).
    if (calls.size() > 1) {
        const auto req = test::read_file(dir / "agent" / "calls" / "2" / "request.json");
        CHECK(req.find(fast.id) != std::string::npos);
        int again = 0; // the same patches offered again: refused as such, not tried twice
        for (const auto& p : c.store().patches())
            if (p.info.value("call", 0) == 2 && p.reason.find("same change") != std::string::npos) ++again;
        CHECK(again == 2);
    }
    // The math-changing patch never ran to an ok trial (the loss invariant), the fast one was measured.
    const auto math_id = ps["math-shortcut"].id;
    bool fast_measured = false, math_refused = false;
    for (const auto& t : c.store().trials({.kinds = {store::TrialKind::Search}})) {
        if (t.candidate_key.find(fast.id) != std::string::npos && t.outcome == trial::Outcome::Ok)
            fast_measured = true;
        if (t.candidate_key.find(math_id) != std::string::npos) {
            CHECK(t.outcome != trial::Outcome::Ok);
            if (t.violation == trial::Violation::LossInvariant) math_refused = true;
        }
    }
    CHECK(fast_measured);
    CHECK(math_refused);
    const auto effect = c.agent().measured_patch_effect(fast.id);
    if (effect) CHECK(effect->speedup > 1.0);
}

TEST_CASE("hostile agents: out of scope, protected, symlink, 100 copies, a flood, a hang: each refused or "
          "failed with its reason, nothing of theirs searched, the campaign completes") {
    for (const std::string mode : {"scope", "copies", "flood", "invalid"}) {
        CAPTURE(mode);
        TempDir d;
        const auto dir = agent_campaign(d, mode, 1, true);
        campaign::Campaign c(dir);
        auto o = local_options();
        o.verify = false; // the agent stage is what is under test
        c.run(o);
        CHECK(c.store().stage() == store::Stage::Verification);
        const auto calls = c.store().agent_calls();
        REQUIRE(!calls.empty());
        auto ps = patches(c);
        if (mode == "scope") {
            CHECK(calls[0].outcome == "ok");
            CHECK(calls[0].accepted == 0);
            REQUIRE(ps.size() == 3);
            CHECK(ps["outside"].reason.find("out of scope") != std::string::npos);
            CHECK(ps["protected"].reason.find("out of scope") != std::string::npos);
            CHECK(ps["symlink"].reason.find("symbolic link") != std::string::npos);
            for (const auto& [n, p] : ps)
                CHECK_FALSE(p.accepted);
        } else if (mode == "copies") {
            // Four read (max_patches_per_call), one accepted, three the same change; the rest never read.
            CHECK(calls[0].accepted == 1);
            REQUIRE(calls[0].detail.refused_while_reading);
            CHECK(calls[0].detail.refused_while_reading->size() == 96);
            int same = 0;
            for (const auto& p : c.store().patches())
                if (p.reason.find("same change") != std::string::npos) ++same;
            CHECK(same == 3);
        } else if (mode == "flood") {
            CHECK(calls[0].outcome == "output_exceeded");
            CHECK(ps.empty());
        } else {
            CHECK(calls[0].outcome == "invalid_output");
            CHECK(ps.empty());
        }
        // Nothing an agent patch failed to earn is searched.
        for (const auto& t : c.store().trials({.kinds = {store::TrialKind::Search}})) {
            const auto cand = space::Candidate::from_json(t.candidate);
            for (const auto& id : cand.patches) {
                bool accepted = false;
                for (const auto& p : c.store().patches())
                    if (p.id == id) accepted = p.accepted;
                CHECK(accepted);
            }
        }
    }
}

TEST_CASE("an agent patch changed on disk after it was stored is refused when the campaign opens to run, and "
          "named when it opens read-only") {
    TempDir d;
    const auto dir = agent_campaign(d, "honest", 1);
    const std::string diff = test::read_file(d.path / "toyload-patches" / "fast_kernel.patch");
    const auto file = dir / "agent" / "patches" / "agent1-fast.patch";
    {
        campaign::Campaign c(dir);
        fs::create_directories(file.parent_path());
        std::ofstream(file) << diff;
        c.store().put_patch({"agent1-fast",
                             true,
                             "",
                             {{"source", "agent"},
                              {"call", 1},
                              {"name", "fast"},
                              {"touches", {"kernels/compute.c"}},
                              {"file", file.string()},
                              {"sha256", sha256_hex(diff)}}});
    }
    auto open = [&] { campaign::Campaign opened(dir); };
    CHECK_NOTHROW(open());
    std::ofstream(file, std::ios::app) << "+int planted;\n";
    CHECK_THROWS_AS(open(), Error);
    campaign::Campaign ro(dir, campaign::Campaign::Open::read_only);
    REQUIRE(ro.changed_inputs().size() == 1);
    CHECK(ro.changed_inputs()[0].find("agent1-fast.patch") != std::string::npos);
}
