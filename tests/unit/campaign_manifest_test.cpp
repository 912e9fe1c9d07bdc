// The batch manifest, as the campaign writes it, is what the trial wrapper and the plugin's trial mode read:
// every env name a task sets is declared in "knobs" with its value allowed, and each array index gets the
// task's env. Uses the toyload fixture; plans a batch (sandboxes built with cc) and submits nothing.
#include "trial/manifest.hpp"

#include "campaign/campaign.hpp"
#include "infrarsi/build_info.hpp"

#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

using namespace infrarsi;
namespace fs = std::filesystem;

TEST_CASE("a batch manifest written by the campaign is accepted by the plugin's manifest reader") {
    const fs::path tmp =
        fs::temp_directory_path() / ("infrarsi-spank-manifest-" + std::to_string(::getpid()));
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    const fs::path fx = fs::path(build::source_dir) / "tests" / "fixtures";
    fs::copy(fx / "toyload", tmp / "toyload", fs::copy_options::recursive);
    fs::copy(fx / "toyload-patches", tmp / "toyload-patches", fs::copy_options::recursive);
    fs::copy_file(fx / "toyload.contract.toml", tmp / "toyload.contract.toml");

    campaign::Campaign::init(tmp / "toyload.contract.toml", tmp / "c");
    campaign::Campaign c(tmp / "c");
    std::vector<campaign::Task> tasks(3);
    tasks[0].candidate = c.contract().space.baseline();
    tasks[1].candidate = c.contract().space.baseline();
    tasks[1].candidate.knobs["micro_batch"] = 4LL;
    tasks[1].candidate.knobs["grad_accum"] = 4LL;
    tasks[1].candidate.knobs["recompute"] = std::string("selective");
    tasks[1].candidate.patches = {"fast_kernel"};
    tasks[2].candidate = c.contract().space.baseline();
    tasks[2].candidate.patches = {"broken_build"}; // recorded as a build failure, not in the manifest
    const auto id = c.batches().plan(store::BatchKind::Search, tasks).id;
    const auto path = c.store().batch(id).manifest;
    REQUIRE(fs::is_regular_file(path));

    auto m = trial::read_manifest(path);
    nlohmann::json written = nlohmann::json::parse(std::ifstream(path));
    REQUIRE(written["tasks"].size() == 2);
    CHECK(m.tasks.size() == 2);
    CHECK(m.batch == id);
    CHECK(m.kind == "search");
    CHECK(m.campaign == c.store().meta("id").value());
    CHECK(m.knobs.at("TOY_MICRO_BATCH") == std::vector<std::string>{"1", "2", "4", "8", "16"});
    for (const auto& task : written["tasks"]) {
        auto env = trial::trial_environment(m, task["index"].get<uint32_t>());
        for (const auto& [name, value] : task["env"].items())
            CHECK(env.at(name) == value.get<std::string>());
        CHECK(env.at("INFRARSI_TRIAL_ID") == task["trial_id"].get<std::string>());
        CHECK(env.at("INFRARSI_RESULT") == task["result"].get<std::string>());
    }
    CHECK(trial::trial_environment(m, 1).at("TOY_RECOMPUTE") == "selective");
    fs::remove_all(tmp);
}
