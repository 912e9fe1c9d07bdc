// The batch manifest, as the trial wrapper and the plugin's trial mode read it: each array index gets exactly
// its declared knobs plus INFRARSI_*; anything undeclared, malformed or oversized is refused with where and
// why; the writer is held to the reader's rules; an older orchestrator's manifest is rewritten once.
#include "trial/manifest.hpp"

#include "util/error.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

using namespace infrarsi;
using namespace infrarsi::trial;
using nlohmann::json;

namespace {
json good() {
    return json::parse(R"({
      "format": "infrarsi-manifest/2",
      "campaign": "toy-1",
      "knobs": {"OMP_NUM_THREADS": ["1", "2", "4"], "MICRO_BATCH": null},
      "tasks": [
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
    j["tasks"][0]["env"]["LD_PRELOAD"] = "/tmp/x.so";
    refused(j, "does not declare");
    j = good();
    j["tasks"][1]["env"]["OMP_NUM_THREADS"] = "3";
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
    j["tasks"][0]["env"]["MICRO_BATCH"] = "8\nEVIL=1";
    refused(j, "NUL or newline");
    j = good();
    j["tasks"][0]["env"]["MICRO_BATCH"] = std::string("8\0x", 3);
    refused(j, "NUL or newline");
    j = good();
    j["tasks"][0]["env"]["MICRO_BATCH"] = std::string(kMaxEnvValueBytes + 1, '8');
    refused(j, "longer than");
    j = good();
    j["tasks"][0]["env"]["MICRO_BATCH"] = 8;
    refused(j, "must be a string");
}

TEST_CASE("the orchestrator's fields round-trip, and the writer is held to the reader's rules") {
    auto j = good();
    j["batch"] = 3;
    j["kind"] = "search";
    j["tasks"][0].update(json::parse(R"({"kind": "search", "candidate": {"knobs": {"micro_batch": 8}},
        "command": ["bash", "x.sbatch"], "build": "/c/b", "workdir": "/c/batches/3/0", "log": "/c/l.txt"})"));
    auto m = parse_manifest(j.dump(), "m.json");
    CHECK(m.tasks[0].command == std::vector<std::string>{"bash", "x.sbatch"});
    CHECK(m.tasks[0].candidate["knobs"]["micro_batch"] == 8);
    CHECK(m.tasks[1].command.empty());
    CHECK(manifest_from_json(to_json(m), "again") == m);

    auto dir = std::filesystem::temp_directory_path() / ("infrarsi-manifest-w-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    write_manifest(dir / "m.json", m);
    CHECK(read_manifest(dir / "m.json") == m);
    m.tasks[0].env["UNDECLARED"] = "1";
    CHECK_THROWS_WITH_AS(write_manifest(dir / "m.json", m), doctest::Contains("does not declare"), Error);
    CHECK(read_manifest(dir / "m.json").tasks[0].env.count("UNDECLARED") == 0); // the old file stands
    m = parse_manifest(j.dump(), "m.json");
    m.tasks[0].command = {};
    m.tasks[0].workdir = "relative";
    CHECK_THROWS_WITH_AS(write_manifest(dir / "m.json", m), doctest::Contains("'workdir'"), Error);
    std::filesystem::remove_all(dir);
}

TEST_CASE("format /3 carries each task's knob arguments and sbatch options, /2 is still read, without them") {
    auto j = good(); // an infrarsi-manifest/2, as the previous release wrote it
    auto m2 = parse_manifest(j.dump(), "m.json");
    CHECK(m2.tasks[0].args.empty());
    j["tasks"][0]["args"] = {"--x=1"};
    refused(j, "'args' and 'sbatch_options' are fields of infrarsi-manifest/3");

    j = good();
    j["format"] = "infrarsi-manifest/3";
    j["tasks"][0]["command"] = {"bash", "/w/train.sbatch", "--fixed"};
    j["tasks"][0]["args"] = {"--batch_size=8", "--name=a b $(touch /tmp/pwned)", ""};
    j["tasks"][0]["sbatch_options"] = {"--cpus-per-task=2", "--exclusive"};
    auto m = parse_manifest(j.dump(), "m.json");
    CHECK(m.tasks[0].args ==
          std::vector<std::string>{"--batch_size=8", "--name=a b $(touch /tmp/pwned)", ""});
    CHECK(m.tasks[0].sbatch_options == std::vector<std::string>{"--cpus-per-task=2", "--exclusive"});
    CHECK(to_json(m)["format"] == "infrarsi-manifest/3");
    CHECK(manifest_from_json(to_json(m), "again") == m);
    // What the plugin sets is the environment alone, whatever the arguments.
    CHECK(trial_environment(m, 0).size() == 5);

    for (const char* bad : {"-c2", "cpus=2", "--Cpus=2", "--x=a\nb"}) {
        CAPTURE(bad);
        auto k = j;
        k["tasks"][0]["sbatch_options"] = {bad};
        refused(k, "is not --name or --name=value");
    }
    auto k = j;
    k["tasks"][0]["args"] = {std::string("a\0b", 3)};
    refused(k, "'args' has a NUL byte");
    k = j;
    k["tasks"][0]["args"] = "--x=1";
    refused(k, "'args'");
}

TEST_CASE(
    "older shapes: a version-1 batch manifest is rewritten once, the plugin refuses both with what to do") {
    const auto v1 = json::parse(R"({
      "version": 1, "campaign": "0badc0de", "batch": 3, "kind": "search", "step_prefix": "INFRARSI_STEP",
      "knobs": {"TOY_MICRO_BATCH": ["1", "2", "4"], "TOY_STEPS": null},
      "tasks": [{"index": 0, "trial_id": 17, "kind": "search", "candidate": {"knobs": {}},
                 "env": {"TOY_MICRO_BATCH": "2", "TOY_STEPS": "20"}, "command": ["bash", "x.sbatch"],
                 "workdir": "/c/batches/3/0", "result": "/c/batches/3/0/result.json", "log": "/c/l.txt"}]})");
    refused(v1, "`infrarsi run` on its campaign directory rewrites it");
    auto hand = good();
    hand["format"] = "infrarsi-manifest/1";
    refused(hand, "instead of \"trials\"");

    auto dir =
        std::filesystem::temp_directory_path() / ("infrarsi-manifest-v1-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const auto path = dir / "manifest.json";
    std::ofstream(path) << v1.dump();
    CHECK(upgrade_manifest(path));
    auto m = read_manifest(path);
    CHECK(m.batch == 3);
    auto env = trial_environment(m, 0);
    CHECK(env.at("INFRARSI_TRIAL_ID") == "17");
    CHECK(env.at("INFRARSI_CAMPAIGN") == "0badc0de");
    CHECK(env.at("TOY_MICRO_BATCH") == "2");
    CHECK(env.size() == 5);
    CHECK(m.tasks[0].command == std::vector<std::string>{"bash", "x.sbatch"});
    CHECK_FALSE(upgrade_manifest(path)); // already current
    CHECK(read_manifest(path) == m);

    // The first version-1 writers declared no knobs: the names and values the tasks set are declared.
    auto bare = v1;
    bare.erase("knobs");
    std::ofstream(path) << bare.dump();
    CHECK(upgrade_manifest(path));
    CHECK(read_manifest(path).knobs.at("TOY_STEPS") == std::vector<std::string>{"20"});

    std::ofstream(path) << R"({"version": 2, "tasks": []})";
    CHECK_THROWS_WITH_AS(upgrade_manifest(path), doctest::Contains("version 2"), Error);
    std::filesystem::remove_all(dir);
}

TEST_CASE("structural errors name the field") {
    refused(json::parse(R"({"format":"infrarsi-manifest/4"})"), "unknown manifest format");
    refused(json::parse(R"({"tasks":[]})"), "'format'");
    auto j = good();
    j.erase("knobs");
    refused(j, "'knobs'");
    j = good();
    j["tasks"][1]["index"] = 0;
    refused(j, "appears twice");
    j = good();
    j["tasks"][0]["index"] = -1;
    refused(j, "'index'");
    j = good();
    j["tasks"][0]["result"] = "relative/result.json";
    refused(j, "absolute path");
    j = good();
    j["tasks"][0]["trial_id"] = "../../x";
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
    CHECK(read_manifest(path).tasks.size() == 2);
    CHECK_THROWS_WITH_AS(read_manifest("m.json"), doctest::Contains("absolute"), Error);
    CHECK_THROWS_WITH_AS(read_manifest(dir.string()), doctest::Contains("regular file"), Error);
    REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0); // a FIFO neither blocks nor passes
    CHECK_THROWS_WITH_AS(read_manifest((dir / "fifo").string()), doctest::Contains("regular file"), Error);
    CHECK_THROWS_WITH_AS(read_manifest((dir / "missing").string()), doctest::Contains("cannot open"), Error);
    {
        std::ofstream big(dir / "big.json");
        big << std::string(kMaxManifestBytes + 1, ' ');
    }
    CHECK_THROWS_WITH_AS(read_manifest((dir / "big.json").string()), doctest::Contains("at most"), Error);
    std::filesystem::remove_all(dir);
}

TEST_CASE(
    "a manifest whose version or a task's candidate is nested a million levels deep is refused, clearly") {
    const std::string deep = std::string(1'000'000, '[') + std::string(1'000'000, ']');
    // As root slurmstepd reads it (INFRARSI_MANIFEST): refused while parsing, not crashed in dump() or a
    // copy.
    CHECK_THROWS_WITH_AS(
        parse_manifest(R"({"version": )" + deep + "}", "m.json"),
        "m.json: JSON nested more than 64 levels deep (expected at most 64 levels: a manifest "
        "written by the orchestrator)",
        Error);
    auto j = good();
    j["tasks"][1]["candidate"] = "DEEP";
    std::string text = j.dump();
    text.replace(text.find("\"DEEP\""), 6, deep);
    CHECK_THROWS_WITH_AS(parse_manifest(text, "m.json"), doctest::Contains("nested more than 64"), Error);
    auto dir =
        std::filesystem::temp_directory_path() / ("infrarsi-manifest-deep-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "m.json") << text;
    CHECK_THROWS_WITH_AS(read_manifest(dir / "m.json"), doctest::Contains("nested more than 64"), Error);
    std::filesystem::remove_all(dir);
    // A version that is a long string is quoted in the error, not all of it.
    json old = {{"version", std::string(100000, 'x')}};
    CHECK_THROWS_WITH_AS(parse_manifest(old.dump(), "m.json"), doctest::Contains("older infrarsi"), Error);
    try {
        parse_manifest(old.dump(), "m.json");
    } catch (const Error& e) {
        CHECK(std::string(e.what()).size() < 1000);
    }
}

TEST_CASE(
    "a 4 MiB manifest of 43k tasks, each checked against 43k allowed values, validates in linear time") {
    // Before: a linear search of the allowed values per task, 75 s per step in slurmstepd; now sets. Every
    // task but the first sets the last allowed value, the worst case for a search.
    constexpr int kTasks = 43'000;
    const std::string last = std::to_string(kTasks - 1);
    json values = json::array();
    json tasks = json::array();
    for (int i = 0; i < kTasks; ++i) {
        const std::string v = std::to_string(i);
        values.push_back(v);
        tasks.push_back({{"index", i},
                         {"trial_id", "t" + v},
                         {"env", {{"K", i == 0 ? v : last}}},
                         {"result", "/r/" + v}});
    }
    json j = {
        {"format", "infrarsi-manifest/3"}, {"campaign", "big"}, {"knobs", {{"K", values}}}, {"tasks", tasks}};
    const std::string text = j.dump();
    REQUIRE(text.size() <= kMaxManifestBytes);
    // Timed against the same manifest with the knob unconstrained (its values not checked): the parse and the
    // rest of the validation cost the same, so the ratio is the values' check alone, whatever the host's
    // load. The fastest of three runs each, interleaved.
    json open = j;
    open["knobs"]["K"] = nullptr;
    const std::string open_text = open.dump();
    auto seconds = [&](const std::string& t) {
        const auto start = std::chrono::steady_clock::now();
        const auto parsed = parse_manifest(t, "m.json");
        CHECK(parsed.tasks.size() == kTasks);
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    double checked = INFINITY, unchecked = INFINITY;
    for (int i = 0; i < 3; ++i) {
        checked = std::min(checked, seconds(text));
        unchecked = std::min(unchecked, seconds(open_text));
    }
    MESSAGE("43k tasks validated in " << checked << " s against 43k allowed values, " << unchecked
                                      << " s unconstrained");
    // With sets about 1.1x; the linear search was 10x and more (2.9 s against 0.3 s in a Release build).
    CHECK(checked < 3 * unchecked + 0.2);
    const auto m = parse_manifest(text, "m.json");
    REQUIRE(m.tasks.size() == kTasks);
    CHECK(m.task(kTasks - 1).env.at("K") == last);
    CHECK(m.task(0).env.at("K") == "0");
    CHECK(trial_environment(m, 12345).at("INFRARSI_TRIAL_ID") == "t12345");
    CHECK(m.knobs.at("K")->size() == kTasks);
    // Still every rule: a value outside the list, in the last task, is refused.
    j["tasks"][kTasks - 1]["env"]["K"] = "43000";
    CHECK_THROWS_WITH_AS(
        parse_manifest(j.dump(), "m.json"),
        doctest::Contains("tasks[42999]: env.K=43000 is not one of the contract's allowed values"), Error);
}
