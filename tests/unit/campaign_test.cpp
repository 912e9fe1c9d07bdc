// Campaign pieces that need no cluster: init's locks and refusals, and the trial wrapper's result file.
#include "campaign/campaign.hpp"
#include "campaign/trial_exec.hpp"
#include "util/error.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace infrarsi;

namespace {
struct TempDir {
    fs::path path = fs::temp_directory_path() / ("infrarsi-campaign-ut-" + std::to_string(::getpid()));
    TempDir() {
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~TempDir() { fs::remove_all(path); }
};

// A private copy of the toyload fixture (workload, patches, contract) that the test may change.
fs::path copy_fixture(const fs::path& to) {
    const fs::path fx = INFRARSI_FIXTURES;
    fs::copy(fx / "toyload", to / "toyload", fs::copy_options::recursive);
    fs::copy(fx / "toyload-patches", to / "toyload-patches", fs::copy_options::recursive);
    fs::copy_file(fx / "toyload.contract.toml", to / "toyload.contract.toml");
    return to / "toyload.contract.toml";
}
} // namespace

TEST_CASE("init locks the inputs; a changed protected file stops every later command") {
    TempDir tmp;
    auto contract = copy_fixture(tmp.path);
    campaign::Campaign::init(contract, tmp.path / "c");
    {
        campaign::Campaign c(tmp.path / "c");
        CHECK(c.contract().space.patches ==
              std::vector<std::string>{"broken_build", "fast_kernel", "math_shortcut"});
        CHECK(c.store().locks().size() == 5); // contract, tree, catalog, 2 protected files
    }
    CHECK_THROWS_WITH_AS(campaign::Campaign::init(contract, tmp.path / "c"),
                         doctest::Contains("already exists"), Error);
    std::ofstream(tmp.path / "toyload" / "loss.c", std::ios::app) << "/* edited */\n";
    CHECK_THROWS_WITH_AS(campaign::Campaign(tmp.path / "c"), doctest::Contains("protected loss.c"), Error);
}

TEST_CASE("the trial wrapper resolves its index in the manifest and writes result.json with the step lines") {
    TempDir tmp;
    nlohmann::json m = {
        {"version", 1},
        {"step_prefix", "INFRARSI_STEP"},
        {"summary_prefix", "INFRARSI_SUMMARY"},
        {"tasks",
         {{{"index", 0},
           {"trial_id", 1},
           {"env", {{"X", "a"}}},
           {"command", {"true"}},
           {"result", (tmp.path / "0/result.json").string()},
           {"log", (tmp.path / "0/log.txt").string()}},
          {{"index", 1},
           {"trial_id", 2},
           {"env", {{"STEPTIME", "0.5"}}},
           {"command",
            {"sh", "-c",
             "echo \"INFRARSI_STEP {\\\"step\\\":1,\\\"loss\\\":2.5,\\\"step_time_s\\\":$STEPTIME}\"; "
             "echo noise; exit 3"}},
           {"result", (tmp.path / "1/result.json").string()},
           {"log", (tmp.path / "1/log.txt").string()}}}}};
    std::ofstream(tmp.path / "manifest.json") << m.dump();
    CHECK(campaign::execute_trial(tmp.path / "manifest.json", 1) == 3);
    std::ifstream in(tmp.path / "1/result.json");
    auto r = nlohmann::json::parse(in);
    CHECK(r["trial_id"] == 2);
    CHECK(r["exit_code"] == 3);
    REQUIRE(r["steps"].size() == 1);
    CHECK(r["steps"][0]["step_time_s"] == 0.5);
    CHECK_THROWS_AS(campaign::execute_trial(tmp.path / "manifest.json", 7), Error);
}
