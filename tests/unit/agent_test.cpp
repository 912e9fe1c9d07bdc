// The agent protocol read as hostile input, and one call of an agent contained: a stand-in agent
// (tests/fixtures/agents/toy-agent, named as such) that hangs, floods, crashes, lies about JSON or snoops.
#include "agent/exec.hpp"
#include "agent/protocol.hpp"
#include "util/error.hpp"
#include "util/install_paths.hpp"

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <fstream>

namespace fs = std::filesystem;
using namespace infrarsi;
using nlohmann::json;
using test::TempDir;

namespace {

std::string patch_json(const std::string& name, const std::string& diff, json claim = nullptr) {
    json p = {{"name", name}, {"diff", diff}};
    if (!claim.is_null()) p["claim"] = claim;
    return p.dump();
}

const std::string kDiff = "--- a/kernels/compute.c\n+++ b/kernels/compute.c\n@@ -1,2 +1,2 @@\n-a\n+b\n c\n";

// A directory laid out like a campaign (campaign.db, a sandbox tree) for one agent call.
struct FakeCampaign {
    TempDir d{"infrarsi-agent"};
    fs::path dir = d.path / "c";
    fs::path tree = dir / "sandboxes" / "base" / "src";
    fs::path call = dir / "agent" / "calls" / "1";
    FakeCampaign() {
        fs::create_directories(tree);
        std::ofstream(dir / "campaign.db") << "db";
        std::ofstream(tree / "main.c") << "int main(){}";
        fs::create_directories(call);
    }
    agent::CallSpec spec(const std::string& mode, int limit_s = 20) const {
        agent::CallSpec s;
        s.campaign = dir;
        s.call_dir = call;
        s.tree = tree;
        s.command = {"python3", (fs::path(INFRARSI_FIXTURES) / "agents" / "toy-agent").string(), mode};
        s.time_limit = std::chrono::seconds(limit_s);
        s.max_output_bytes = 1u << 20;
        s.request = json{{"protocol", 1}, {"tree", tree.string()}, {"call", 1}}.dump();
        return s;
    }
};

} // namespace

TEST_CASE("an agent's answer: patches with claims read, a malformed one refused alone, the rest kept") {
    const std::string text =
        R"({"protocol": 1, "patches": [)" +
        patch_json("Fast Kernel!", kDiff, {{"speedup", 1.5}, {"confidence", 0.7}}) + "," +
        R"({"name": "no diff"},)" + patch_json("bad claim", kDiff, {{"speedup", -2}}) + "," +
        R"({"name": "bad tag", "diff": "x", "tags": ["expected_build_failure"]}],)" +
        R"("knob_priors": [{"knob": "micro_batch", "value": 4, "speedup": 1.2}, {"knob": 3}],)" +
        R"("usage": {"tokens": 1234, "cost": 0.5, "model": "m"}})";
    agent::Limits limits;
    const auto r = agent::parse_response(text, limits);
    REQUIRE(r.patches.size() == 1);
    CHECK(r.patches[0].name == "fast-kernel");
    CHECK(r.patches[0].claimed);
    CHECK(r.patches[0].claim.speedup == doctest::Approx(1.5));
    CHECK(r.patches[0].claim.memory_factor == doctest::Approx(1.0));
    REQUIRE(r.refused.size() == 3);
    CHECK(r.refused[0].reason.find("no 'diff'") != std::string::npos);
    CHECK(r.refused[1].reason.find("speedup") != std::string::npos);
    CHECK(r.refused[2].reason.find("unknown tag") != std::string::npos);
    REQUIRE(r.knob_priors.size() == 1);
    CHECK(r.knob_priors[0].value == "4");
    CHECK(r.refused_priors.size() == 1);
    CHECK(r.usage.tokens == 1234);
    CHECK(r.usage.model == "m");
}

TEST_CASE("an agent's answer past max_patches_per_call: the extra patches are refused, not read") {
    std::string text = R"({"patches": [)";
    for (int i = 0; i < 100; ++i)
        text += (i ? "," : "") + patch_json("p", kDiff);
    text += "]}";
    agent::Limits limits;
    limits.max_patches = 4;
    const auto r = agent::parse_response(text, limits);
    CHECK(r.patches.size() == 4);
    CHECK(r.refused.size() == 96);
    CHECK(r.refused.back().reason.find("max_patches_per_call") != std::string::npos);
}

TEST_CASE(
    "an unusable answer is an error of the call: empty, not JSON, too deep, too large, other protocol") {
    agent::Limits limits;
    CHECK_THROWS_AS(agent::parse_response("", limits), Error);
    CHECK_THROWS_AS(agent::parse_response("{ not json", limits), Error);
    CHECK_THROWS_AS(agent::parse_response(std::string(100000, '[') + std::string(100000, ']'), limits),
                    Error);
    CHECK_THROWS_AS(agent::parse_response("[1, 2]", limits), Error);
    CHECK_THROWS_AS(agent::parse_response(R"({"protocol": 2})", limits), Error);
    limits.max_response_bytes = 1000;
    CHECK_THROWS_AS(
        agent::parse_response(R"({"patches": [)" + patch_json("p", std::string(2000, 'x')) + "]}", limits),
        Error);
    limits = {};
    limits.max_diff_bytes = 100;
    const auto r =
        agent::parse_response(R"({"patches": [)" + patch_json("p", std::string(200, '+')) + "]}", limits);
    CHECK(r.patches.empty());
    CHECK(r.refused.size() == 1);
}

TEST_CASE("the same change from other context lines and positions has the same digest, another change not") {
    const std::string a = "--- a/k.c\t2026-01-01\n+++ b/k.c\t2026-01-02\n@@ -1,3 +1,3 @@\n x\n-a\n+b\n y\n";
    const std::string b = "diff -ruN a/k.c b/k.c\n--- a/k.c\n+++ b/k.c\n@@ -7,2 +7,2 @@\n-a\n+b\n z\n";
    const std::string c = "--- a/k.c\n+++ b/k.c\n@@ -1,2 +1,2 @@\n-a\n+c\n";
    CHECK(agent::change_digest(a) == agent::change_digest(b));
    CHECK(agent::change_digest(a) != agent::change_digest(c));
    CHECK(agent::sanitize_name("../../etc/Passwd") == "etc-passwd");
    CHECK(agent::sanitize_name("!!!") == "patch");
}

TEST_CASE("an agent that hangs is killed at its time limit with what it left running") {
    FakeCampaign f;
    const auto start = std::chrono::steady_clock::now();
    const auto r = agent::call_agent(infrarsi_command(), f.spec("hang", 2));
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(r.outcome == agent::CallOutcome::timeout);
    CHECK(took < 30);
    CHECK(r.leftovers >= 1); // its setsid child, killed by agent-exec (a child subreaper)
}

TEST_CASE("an agent that floods its output, or answers with a 50 MiB diff, is killed at the bound: its call "
          "fails, nothing grows") {
    FakeCampaign f;
    for (const char* mode : {"flood", "huge"}) {
        CAPTURE(mode);
        const auto r = agent::call_agent(infrarsi_command(), f.spec(mode));
        CHECK(r.outcome == agent::CallOutcome::output_exceeded);
        CHECK(r.out.size() <= (1u << 20));
    }
}

TEST_CASE("an agent that exits non-zero, crashes or prints no JSON: each recorded for what it is") {
    FakeCampaign f;
    CHECK(agent::call_agent(infrarsi_command(), f.spec("nonzero")).outcome ==
          agent::CallOutcome::exit_nonzero);
    CHECK(agent::call_agent(infrarsi_command(), f.spec("crash")).outcome == agent::CallOutcome::crashed);
    const auto invalid = agent::call_agent(infrarsi_command(), f.spec("invalid"));
    REQUIRE(invalid.outcome == agent::CallOutcome::ok);
    CHECK_THROWS_AS(agent::parse_response(invalid.out, {}), Error);
    const auto deep = agent::call_agent(infrarsi_command(), f.spec("deep"));
    REQUIRE(deep.outcome == agent::CallOutcome::ok);
    CHECK_THROWS_AS(agent::parse_response(deep.out, {}), Error);
}

TEST_CASE("an agent sees neither the campaign directory nor the campaign's variables") {
    FakeCampaign f;
    setenv("INFRARSI_SECRET_TEST", "1", 1);
    const auto r = agent::call_agent(infrarsi_command(), f.spec("snoop"));
    unsetenv("INFRARSI_SECRET_TEST");
    REQUIRE(r.outcome == agent::CallOutcome::ok);
    CHECK(r.err_tail.find("env INFRARSI: []") != std::string::npos);
    if (r.isolated) {
        CHECK(r.err_tail.find("campaign.db: absent") != std::string::npos);
        CHECK(r.err_tail.find("batches: absent") != std::string::npos);
        CHECK(test::read_file(f.dir / "campaign.db") == "db");
    } else {
        MESSAGE("no private view on this host: " << r.isolation);
    }
}
