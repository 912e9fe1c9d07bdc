// Trial mode's manifest: each array index gets exactly its declared knobs plus INFRARSI_*; anything
// undeclared, malformed or oversized is refused with where and why.
#include "manifest.hpp"

#include "util/error.hpp"

#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

using namespace infrarsi;
using namespace infrarsi::spank;
using nlohmann::json;

namespace {
json good() {
    return json::parse(R"({
      "format": "infrarsi-manifest/1",
      "campaign": "toy-1",
      "knobs": {"OMP_NUM_THREADS": ["1", "2", "4"], "MICRO_BATCH": null},
      "trials": [
        {"index": 0, "trial_id": "t0001", "env": {"OMP_NUM_THREADS": "2", "MICRO_BATCH": "8"},
         "result": "/tmp/c/t0001/result.json"},
        {"index": 1, "trial_id": "t0002", "env": {"OMP_NUM_THREADS": "4"}, "result": "/tmp/c/t0002/result.json"}
      ]})");
}
void refused(const json& j, const char* what) {
    CHECK_THROWS_WITH_AS(parse_manifest(j.dump(), "m.json"), doctest::Contains(what), Error);
}
} // namespace

TEST_CASE("each array index gets its knobs and the campaign, trial id and result path") {
    auto m = parse_manifest(good().dump(), "m.json");
    auto e0 = trial_environment(m, 0);
    CHECK(e0 == std::map<std::string, std::string>{{"OMP_NUM_THREADS", "2"},
                                                   {"MICRO_BATCH", "8"},
                                                   {"INFRARSI_CAMPAIGN", "toy-1"},
                                                   {"INFRARSI_TRIAL_ID", "t0001"},
                                                   {"INFRARSI_RESULT", "/tmp/c/t0001/result.json"}});
    auto e1 = trial_environment(m, 1);
    CHECK(e1.size() == 4);
    CHECK_FALSE(e1.contains("MICRO_BATCH"));
    CHECK_THROWS_WITH_AS(trial_environment(m, 2), doctest::Contains("array index 2"), Error);
}

TEST_CASE("a manifest that sets an undeclared name or a disallowed value is refused") {
    auto j = good();
    j["trials"][0]["env"]["LD_PRELOAD"] = "/tmp/x.so";
    refused(j, "does not declare");
    j = good();
    j["trials"][1]["env"]["OMP_NUM_THREADS"] = "3";
    refused(j, "allowed values");
}

TEST_CASE("knob names must be environment names outside Slurm's and InfraRSI's own") {
    for (const char* bad : {"lower", "1ABC", "A-B", "SLURM_NTASKS", "INFRARSI_RESULT", "SPANK_X", ""}) {
        auto j = good();
        j["knobs"][bad] = nullptr;
        refused(j, "knob name");
    }
    CHECK(valid_knob_name("_X1"));
    CHECK(valid_knob_name(std::string(128, 'A')));
    CHECK_FALSE(valid_knob_name(std::string(129, 'A')));
}

TEST_CASE("values with newlines, NULs or beyond the length bound are refused") {
    auto j = good();
    j["trials"][0]["env"]["MICRO_BATCH"] = "8\nEVIL=1";
    refused(j, "NUL or newline");
    j = good();
    j["trials"][0]["env"]["MICRO_BATCH"] = std::string("8\0x", 3);
    refused(j, "NUL or newline");
    j = good();
    j["trials"][0]["env"]["MICRO_BATCH"] = std::string(kMaxEnvValueBytes + 1, '8');
    refused(j, "longer than");
    j = good();
    j["trials"][0]["env"]["MICRO_BATCH"] = 8;
    refused(j, "must be a string");
}

TEST_CASE("the orchestrator's batch manifest (version 1, tasks, numeric trial ids) reads the same") {
    auto j = json::parse(R"({
      "version": 1, "campaign": "0badc0de", "batch": 3, "kind": "search", "step_prefix": "INFRARSI_STEP",
      "knobs": {"TOY_MICRO_BATCH": ["1", "2", "4"], "TOY_STEPS": null},
      "tasks": [{"index": 0, "trial_id": 17, "kind": "search", "candidate": {"knobs": {}},
                 "env": {"TOY_MICRO_BATCH": "2", "TOY_STEPS": "20"}, "command": ["bash", "x.sbatch"],
                 "workdir": "/c/batches/3/0", "result": "/c/batches/3/0/result.json", "log": "/c/l.txt"}]})");
    auto env = trial_environment(parse_manifest(j.dump(), "m.json"), 0);
    CHECK(env.at("INFRARSI_TRIAL_ID") == "17");
    CHECK(env.at("INFRARSI_CAMPAIGN") == "0badc0de");
    CHECK(env.at("TOY_MICRO_BATCH") == "2");
    CHECK(env.size() == 5);
    j.erase("knobs");
    refused(j, "'knobs'"); // without declared names the plugin cannot tell a knob from anything else
    j = json::parse(R"({"version": 2, "tasks": []})");
    refused(j, "version");
}

TEST_CASE("structural errors name the field") {
    refused(json::parse(R"({"format":"infrarsi-manifest/2"})"), "unknown manifest format");
    refused(json::parse(R"({"trials":[]})"), "needs");
    auto j = good();
    j.erase("knobs");
    refused(j, "'knobs'");
    j = good();
    j["trials"][1]["index"] = 0;
    refused(j, "appears twice");
    j = good();
    j["trials"][0]["index"] = -1;
    refused(j, "non-negative");
    j = good();
    j["trials"][0]["result"] = "relative/result.json";
    refused(j, "absolute path");
    j = good();
    j["trials"][0]["trial_id"] = "../../x";
    refused(j, "trial_id");
    j = good();
    j["campaign"] = "a b";
    refused(j, "campaign");
    CHECK_THROWS_WITH_AS(parse_manifest("{\"format\": ", "m.json"), doctest::Contains("not valid JSON"),
                         Error);
    CHECK_THROWS_WITH_AS(parse_manifest("[]", "m.json"), doctest::Contains("JSON object"), Error);
}

TEST_CASE("reading a manifest: absolute path, regular file, size-limited") {
    auto dir = std::filesystem::temp_directory_path() / ("infrarsi-manifest-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    auto path = (dir / "m.json").string();
    std::ofstream(path) << good().dump();
    CHECK(read_manifest(path).trials.size() == 2);
    CHECK_THROWS_WITH_AS(read_manifest("m.json"), doctest::Contains("absolute"), Error);
    CHECK_THROWS_WITH_AS(read_manifest(dir.string()), doctest::Contains("regular file"), Error);
    CHECK_THROWS_WITH_AS(read_manifest((dir / "missing").string()), doctest::Contains("cannot open"), Error);
    {
        std::ofstream big(dir / "big.json");
        big << std::string(kMaxManifestBytes + 1, ' ');
    }
    CHECK_THROWS_WITH_AS(read_manifest((dir / "big.json").string()), doctest::Contains("at most"), Error);
    std::filesystem::remove_all(dir);
}
