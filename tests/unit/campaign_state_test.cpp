#include "store/campaign_state.hpp"
#include "store/campaign_store.hpp"
#include "util/error.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace infrarsi;
using store::BatchState;
using store::Stage;
using store::VerificationState;

TEST_CASE("each state machine allows its transitions and no other, and names the refused move") {
    CHECK(store::allowed(BatchState::Planned, BatchState::Submitted));
    CHECK(store::allowed(BatchState::Planned, BatchState::Finished));
    CHECK(store::allowed(BatchState::Submitted, BatchState::Finished));
    CHECK_FALSE(store::allowed(BatchState::Finished, BatchState::Submitted));
    CHECK_FALSE(store::allowed(BatchState::Submitted, BatchState::Planned));
    CHECK_FALSE(store::allowed(BatchState::Finished, BatchState::Finished));
    CHECK_THROWS_WITH_AS(store::transition(7, BatchState::Finished, BatchState::Submitted),
                         doctest::Contains("batch 7 is finished: it cannot become submitted"), Error);

    CHECK(store::allowed(VerificationState::Running, VerificationState::Recheck));
    CHECK(store::allowed(VerificationState::Recheck, VerificationState::Done));
    CHECK(store::allowed(VerificationState::Done, VerificationState::Done)); // its record grows
    CHECK_FALSE(store::allowed(VerificationState::Done, VerificationState::Running));
    CHECK_FALSE(store::allowed(VerificationState::Skipped, VerificationState::Running));
    CHECK_FALSE(store::allowed(VerificationState::Recheck, VerificationState::Running));
    CHECK_THROWS_WITH_AS(store::transition(3, VerificationState::Done, VerificationState::Recheck),
                         doctest::Contains("running -> recheck"), Error);
    CHECK_THROWS_AS(store::start(VerificationState::Recheck), Error);

    CHECK(store::advance(Stage::Initialized, Stage::Search) == Stage::Search);
    CHECK_FALSE(store::advance(Stage::Search, Stage::Doctor));
    CHECK_FALSE(store::advance(Stage::Search, Stage::Search));
    CHECK_THROWS_WITH_AS(store::parse_batch_state("queued", "db"),
                         doctest::Contains("planned, submitted, finished"), Error);
}

namespace {
struct TempDb {
    fs::path dir = fs::temp_directory_path() / ("infrarsi-state-" + std::to_string(::getpid()));
    TempDb() { fs::create_directories(dir); }
    ~TempDb() { fs::remove_all(dir); }
    std::string path() const { return (dir / "campaign.db").string(); }
};
} // namespace

TEST_CASE("the store refuses a batch or a verification moved against its state machine") {
    TempDb tmp;
    store::CampaignStore s(tmp.path());
    const auto b = s.add_batch(store::BatchKind::Search, "m");
    CHECK(s.batch(b).state == BatchState::Planned);
    s.set_batch_submitted(b);
    CHECK(s.batch(b).state == BatchState::Submitted);
    CHECK_THROWS_WITH_AS(s.set_batch_submitted(b), doctest::Contains("cannot become submitted"), Error);
    s.set_batch_finished(b);
    CHECK(s.batches(BatchState::Finished).size() == 1);
    CHECK_THROWS_WITH_AS(s.set_batch_finished(b), doctest::Contains("is finished"), Error);
    CHECK(s.batch(b).state == BatchState::Finished);

    store::VerificationRow v;
    v.candidate_key = "k";
    v.candidate = nlohmann::json::object();
    v.id = s.add_verification(v);
    v.state = VerificationState::Recheck;
    s.update_verification(v);
    v.state = VerificationState::Done;
    v.promoted = true;
    s.update_verification(v);
    s.update_verification(v); // a decided record may grow
    v.state = VerificationState::Running;
    CHECK_THROWS_WITH_AS(s.update_verification(v), doctest::Contains("verification 1 is done"), Error);
    REQUIRE(s.verifications().size() == 1);
    CHECK(s.verifications()[0].state == VerificationState::Done);
    CHECK(s.verifications()[0].promoted);
}
