#include "store/campaign_store.hpp"
#include "util/error.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace infrarsi;

namespace {
struct TempDb {
    fs::path dir = fs::temp_directory_path() / ("infrarsi-store-" + std::to_string(::getpid()));
    TempDb() { fs::create_directories(dir); }
    ~TempDb() { fs::remove_all(dir); }
    std::string path() const { return (dir / "campaign.db").string(); }
};
} // namespace

TEST_CASE("a submitted batch keeps its job id and trials across reopening the store") {
    TempDb tmp;
    std::int64_t batch = 0;
    {
        store::CampaignStore s(tmp.path());
        s.set_meta("name", "toy");
        batch = s.add_batch("search", "/x/manifest.json");
        for (int i = 0; i < 3; ++i) {
            store::TrialRow t;
            t.batch_id = batch;
            t.array_index = i;
            t.candidate_key = "k" + std::to_string(i);
            t.candidate = {{"knobs", {{"a", i}}}, {"patches", nlohmann::json::array()}};
            t.reason = "space-filling";
            s.add_trial(t);
        }
        s.set_batch_submitted(batch, "42");
    }
    store::CampaignStore s(tmp.path());
    CHECK(s.meta("name") == "toy");
    auto b = s.batch(batch);
    CHECK(b.state == "submitted");
    CHECK(b.job_id == "42");
    auto trials = s.trials_of_batch(batch);
    REQUIRE(trials.size() == 3);
    CHECK(trials[2].job_id == "42_2");
    CHECK(trials[2].state == store::TrialState::Submitted);
    trials[1].outcome = "oom";
    trials[1].peak_memory_bytes = 3e8;
    trials[1].state = store::TrialState::Finished;
    s.update_trial(trials[1]);
    auto oom = s.trials("outcome = ?1", {"oom"});
    REQUIRE(oom.size() == 1);
    CHECK(*oom[0].peak_memory_bytes == doctest::Approx(3e8));
}

TEST_CASE("a trial index is unique within its batch") {
    TempDb tmp;
    store::CampaignStore s(tmp.path());
    auto batch = s.add_batch("search", "m");
    store::TrialRow t;
    t.batch_id = batch;
    t.candidate = nlohmann::json::object();
    s.add_trial(t);
    CHECK_THROWS_AS(s.add_trial(t), Error);
}

TEST_CASE("a database from a newer schema is refused") {
    TempDb tmp;
    {
        store::Database db(tmp.path());
        db.exec("PRAGMA user_version = 99");
    }
    CHECK_THROWS_WITH_AS(store::CampaignStore(tmp.path()), doctest::Contains("newer than this build"), Error);
}

TEST_CASE("a transaction rolls back unless committed") {
    TempDb tmp;
    store::CampaignStore s(tmp.path());
    {
        store::Transaction tx(s.db());
        s.set_meta("x", "1");
    }
    CHECK_FALSE(s.meta("x").has_value());
}
