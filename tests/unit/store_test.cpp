#include "store/campaign_store.hpp"
#include "store/measurements.hpp"
#include "util/error.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
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
        batch = s.add_batch(store::BatchKind::Search, "/x/manifest.json");
        for (int i = 0; i < 3; ++i) {
            store::TrialRow t;
            t.batch_id = batch;
            t.array_index = i;
            t.candidate_key = "k" + std::to_string(i);
            t.candidate = {{"knobs", {{"a", i}}}, {"patches", nlohmann::json::array()}};
            t.reason = "space-filling";
            s.add_trial(t);
        }
        s.add_array(batch, {.seq = 0, .first_index = 0, .tasks = 3, .options = {}, .job_id = {}});
        s.set_array_submitted(batch, 0, "42");
        s.set_batch_submitted(batch);
    }
    store::CampaignStore s(tmp.path());
    CHECK(s.meta("name") == "toy");
    auto b = s.batch(batch);
    CHECK(b.state == store::BatchState::Submitted);
    CHECK(b.job_id == "42");
    auto trials = s.trials_of_batch(batch);
    REQUIRE(trials.size() == 3);
    CHECK(trials[2].job_id == "42_2");
    CHECK(trials[2].state == store::TrialState::Submitted);
    trials[1].outcome = trial::Outcome::OutOfMemory;
    trials[1].peak_memory_bytes = 3e8;
    trials[1].state = store::TrialState::Finished;
    s.update_trial(trials[1]);
    auto oom = s.trials({.outcome = trial::Outcome::OutOfMemory});
    REQUIRE(oom.size() == 1);
    CHECK(*oom[0].peak_memory_bytes == doctest::Approx(3e8));
}

TEST_CASE("a batch of several arrays: each array's job id is recorded with its trials' as it is submitted") {
    TempDb tmp;
    store::CampaignStore s(tmp.path());
    const auto batch = s.add_batch(store::BatchKind::Search, "/x/manifest.json");
    for (int i = 0; i < 3; ++i) {
        store::TrialRow t;
        t.batch_id = batch;
        t.array_index = i;
        t.candidate_key = "k" + std::to_string(i);
        t.candidate = {{"knobs", {{"cpus", i == 0 ? 1 : 2}}}, {"patches", nlohmann::json::array()}};
        s.add_trial(t);
    }
    s.add_array(batch,
                {.seq = 0, .first_index = 0, .tasks = 1, .options = {"--cpus-per-task=1"}, .job_id = {}});
    s.add_array(batch,
                {.seq = 1, .first_index = 1, .tasks = 2, .options = {"--cpus-per-task=2"}, .job_id = {}});
    s.set_array_submitted(batch, 0, "50");
    // A crash here: the batch is still planned, the first array and its trial recorded, the second not.
    CHECK(s.batch(batch).state == store::BatchState::Planned);
    auto trials = s.trials_of_batch(batch);
    CHECK(trials[0].state == store::TrialState::Submitted);
    CHECK(trials[0].job_id == "50_0");
    CHECK(trials[1].state == store::TrialState::Planned);
    s.set_array_submitted(batch, 1, "51");
    s.set_batch_submitted(batch);
    const auto arrays = s.arrays(batch);
    REQUIRE(arrays.size() == 2);
    CHECK(arrays[1].options == std::vector<std::string>{"--cpus-per-task=2"});
    CHECK(arrays[1].job_id == "51");
    CHECK(s.batch(batch).job_id == "50,51");
    trials = s.trials_of_batch(batch);
    CHECK(trials[1].job_id == "51_1");
    CHECK(trials[2].job_id == "51_2");
}

TEST_CASE("a trial index is unique within its batch") {
    TempDb tmp;
    store::CampaignStore s(tmp.path());
    auto batch = s.add_batch(store::BatchKind::Search, "m");
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

namespace {
// A database as an earlier release left it (a dump in tests/fixtures/store/), with `edit` run on it after.
void load_fixture(const std::string& path, const char* name, const std::string& edit = "") {
    std::ifstream in(std::string(INFRARSI_FIXTURES) + "/store/" + name);
    REQUIRE(in);
    std::stringstream sql;
    sql << in.rdbuf();
    store::Database db(path);
    db.exec(sql.str());
    if (!edit.empty()) db.exec(edit);
}
} // namespace

TEST_CASE("a version-1 campaign database is migrated: each contract violation gets its kind, once") {
    TempDb tmp;
    load_fixture(tmp.path(), "campaign-v1.sql");
    store::CampaignStore s(tmp.path());
    CHECK(s.stage() == store::Stage::Done);
    const auto all = s.trials();
    REQUIRE(all.size() == 21);
    std::map<std::string, int> outcomes;
    for (const auto& t : all) {
        ++outcomes[store::outcome_name(t)];
        if (t.outcome == trial::Outcome::ContractViolation) {
            CHECK(t.violation == trial::Violation::LossInvariant);
        } else {
            CHECK(t.violation == trial::Violation::None);
        }
    }
    CHECK(outcomes == std::map<std::string, int>{
                          {"ok", 15}, {"oom", 1}, {"build_failure", 4}, {"contract_violation", 1}});
    CHECK(s.trials({.outcome = trial::Outcome::OutOfMemory}).size() == 1);
    // The bank the first builds wrote to meta is in the run's row.
    CHECK(s.campaign_run().bank_path == "/tmp/infrarsi-bank.locp2C/bank.sqlite");
    CHECK(s.campaign_run().bank_hardware == nlohmann::json{{"entries", 0}, {"seen", false}});
    // Reopening runs no migration twice.
    store::CampaignStore again(tmp.path());
    CHECK(again.trials({.outcome = trial::Outcome::ContractViolation}).size() == 1);
}

TEST_CASE("a version-2 campaign database gets its stage from the flags it kept, which are gone after") {
    // campaign-v2.sql: a finished toyload campaign (local scheduler) made by the release before
    // the stage (state done, search_done and verify_done set). The edits make the earlier points of its life.
    const std::pair<std::string, store::Stage> cases[] = {
        {"", store::Stage::Done},
        {"UPDATE meta SET value = 'running' WHERE key = 'state'",
         store::Stage::Done}, // verified, not yet marked
        {"UPDATE meta SET value = 'running' WHERE key = 'state'; DELETE FROM meta WHERE key = 'verify_done'",
         store::Stage::Verification},
        {"UPDATE meta SET value = 'running' WHERE key = 'state'; DELETE FROM meta WHERE key IN "
         "('verify_done', 'search_done')",
         store::Stage::Search},
        {"UPDATE meta SET value = 'running' WHERE key = 'state'; DELETE FROM meta WHERE key IN "
         "('verify_done', 'search_done'); DELETE FROM doctor",
         store::Stage::Doctor},
        {"UPDATE meta SET value = 'initialized' WHERE key = 'state'; DELETE FROM meta WHERE key IN "
         "('verify_done', 'search_done'); DELETE FROM doctor",
         store::Stage::Initialized},
    };
    // Not a structured binding: CAPTURE is a lambda, and clang before 16 cannot capture one.
    for (const auto& c : cases) {
        const auto& edit = c.first;
        const auto& stage = c.second;
        CAPTURE(edit);
        TempDb tmp;
        load_fixture(tmp.path(), "campaign-v2.sql", edit);
        store::CampaignStore s(tmp.path());
        CHECK(s.stage() == stage);
        for (const char* gone : {"state", "search_done", "verify_done"})
            CHECK_FALSE(s.meta(gone));
        CHECK(s.trials().size() > 0); // nothing else touched
        // Version 4: each batch so far is one array of its runnable trials, under its job id.
        for (const auto& b : s.batches()) {
            int runnable = 0;
            for (const auto& t : s.trials_of_batch(b.id))
                runnable += t.array_index >= 0;
            const auto arrays = s.arrays(b.id);
            if (runnable == 0) {
                CHECK(arrays.empty());
                continue;
            }
            REQUIRE(arrays.size() == 1);
            CHECK(arrays[0].tasks == runnable);
            CHECK(arrays[0].job_id == b.job_id);
            CHECK(arrays[0].options.empty());
        }
    }
}

TEST_CASE(
    "a version-5 campaign database keeps its stage, batches, verifications, re-queue and run's state in "
    "typed tables") {
    // campaign-v5.sql: a toyload campaign main's build ran to its end (--scheduler local), the last release
    // with the stage and the re-queue in the meta blackboard. The edit makes it a campaign mid-search, as a
    // node failure leaves one: two search trials re-queued (as ingest wrote them), a batch still running, a
    // verification waiting for its re-check. It must open and go on.
    const std::string mid_search =
        "UPDATE meta SET value = 'search' WHERE key = 'stage';"
        "UPDATE meta SET value = "
        "'[{\"attempt\":1,\"candidate\":{\"knobs\":{\"grad_accum\":8,\"micro_batch\":2,"
        "\"recompute\":\"none\"},\"patches\":[]},\"reason\":\"re-queued after node_failure: initial design: "
        "one knob away from the baseline\"},{\"attempt\":2,\"candidate\":{\"knobs\":{\"grad_accum\":16,"
        "\"micro_batch\":1,\"recompute\":\"none\"},\"patches\":[\"fast_kernel\"]},\"reason\":\"re-queued "
        "after "
        "cancelled: re-queued after node_failure: initial design\"}]' WHERE key = 'requeue';"
        "UPDATE batches SET state = 'submitted' WHERE id = 9;"
        "UPDATE verifications SET state = 'recheck', promoted = 0 WHERE id = 1;"
        "DELETE FROM meta WHERE key = 'ended';"
        "INSERT INTO meta VALUES ('paused', ''), ('noise_accepted', 'noise 40%'), "
        "('placement.9', '{\"0\":[\"n1\",\"n2\"]}'), ('submitted_job', 'adopted'), "
        "('submitted_job_output', '/home/u/slurm-12.out'), ('slow_nodes', '[\"n3\"]');";
    for (const bool edited : {false, true}) {
        CAPTURE(edited);
        TempDb tmp;
        load_fixture(tmp.path(), "campaign-v5.sql", edited ? mid_search : "");
        store::CampaignStore s(tmp.path());
        {
            store::Statement v(s.db(), "PRAGMA user_version");
            REQUIRE(v.step());
            CHECK(v.integer(0) == store::CampaignStore::schema_version);
        }
        CHECK_FALSE(s.meta("stage")); // the blackboard keeps settings only
        CHECK_FALSE(s.meta("requeue"));
        CHECK(s.meta("id") == "61b8cdc0");
        CHECK_FALSE(s.meta("equivalence")); // moved to equivalence_checks (schema 8)
        {
            const auto checks = s.equivalence_checks();
            REQUIRE(checks.size() == 1);
            CHECK(checks[0].batch_id == 5);
            CHECK(checks[0].state == "passed");
            CHECK(checks[0].patches == std::vector<std::string>{"fast_kernel"});
            CHECK(checks[0].seed == 1021935298);
            CHECK(checks[0].tolerance == doctest::Approx(1e-5));
        }
        for (const char* key :
             {"started", "ended", "paused", "noise_accepted", "manifest_sha256.1", "placement.9"})
            CHECK_FALSE(s.meta(key));
        const auto run = s.campaign_run();
        CHECK(run.started == doctest::Approx(1796643694.512));
        CHECK(run.ended.has_value() == !edited);
        CHECK_FALSE(run.paused); // a pause cleared ('') is none
        CHECK_FALSE(run.cancelled);
        CHECK(run.noise_accepted == (edited ? std::optional<std::string>("noise 40%") : std::nullopt));
        CHECK(run.submitted_job == (edited ? std::optional<std::string>("adopted") : std::nullopt));
        CHECK(run.submitted_job_output ==
              (edited ? std::optional<std::string>("/home/u/slurm-12.out") : std::nullopt));
        // Version 8: the doctor's step pace and slow nodes are columns of the run's row.
        for (const char* key : {"step_pace", "slow_nodes"})
            CHECK_FALSE(s.meta(key));
        CHECK(run.step_pace == doctest::Approx(0.9984824461994963));
        CHECK(run.step_pace_runs == 3);
        CHECK(run.slow_nodes == (edited ? std::optional<std::vector<std::string>>({"n3"}) : std::nullopt));
        CHECK(s.batch(1).manifest_sha256 ==
              "712268b0f8d6605a26d067341150d1c3783bc7c5c16325694f95f76a308b3e26");
        CHECK(s.batch(9).placement == (edited ? "{\"0\":[\"n1\",\"n2\"]}" : ""));
        CHECK(s.stage() == (edited ? store::Stage::Search : store::Stage::Done));
        const auto batches = s.batches();
        REQUIRE(batches.size() == 9);
        CHECK(batches[0].kind == store::BatchKind::Doctor);
        CHECK(batches[5].kind == store::BatchKind::Verify);
        CHECK(batches[5].job_id == "6,7,8");
        CHECK(s.batches(store::BatchState::Finished).size() == (edited ? 8 : 9));
        CHECK(s.batch(9).state == (edited ? store::BatchState::Submitted : store::BatchState::Finished));
        CHECK(s.trials().size() == 44);
        const auto vs = s.verifications();
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].state == (edited ? store::VerificationState::Recheck : store::VerificationState::Done));
        CHECK(vs[0].promoted == !edited);
        CHECK(vs[0].candidate_key == "grad_accum=4;micro_batch=4;recompute=selective;|fast_kernel;");
        CHECK(s.promotions().size() == 1);
        const auto queue = s.requeued();
        if (!edited) {
            CHECK(queue.empty());
            continue;
        }
        REQUIRE(queue.size() == 2);
        CHECK(queue[0].candidate["knobs"]["micro_batch"] == 2);
        CHECK(queue[0].reason.rfind("re-queued after node_failure: initial design", 0) == 0);
        CHECK(queue[0].attempt == 1);
        CHECK(queue[1].candidate["patches"] == nlohmann::json::array({"fast_kernel"}));
        CHECK(queue[1].attempt == 2);
        // ...and it goes on: the running batch finishes, the queue is taken in order, the stage moves on.
        s.set_batch_finished(9);
        CHECK(s.batch(9).state == store::BatchState::Finished);
        s.dequeue(queue[0].id);
        s.requeue({.candidate = queue[0].candidate, .reason = "again", .attempt = 2});
        const auto after = s.requeued();
        REQUIRE(after.size() == 2);
        CHECK(after[0].id == queue[1].id);
        CHECK(after[1].reason == "again");
        CHECK(s.advance_stage(store::Stage::Verification));
        s.set_paused("too noisy");
        CHECK(s.campaign_run().paused == "too noisy");
        s.set_paused(std::nullopt);
        CHECK_FALSE(s.campaign_run().paused);
        s.set_slow_nodes({"n1", "n4"});
        s.set_step_pace(0.5, 4);
        CHECK(s.campaign_run().slow_nodes == std::vector<std::string>{"n1", "n4"});
        CHECK(s.campaign_run().step_pace == doctest::Approx(0.5));
        CHECK(s.campaign_run().step_pace_runs == 4);
        s.mark_ended(2e9);
        s.mark_ended(3e9); // the first end stays
        s.set_cancelled("first");
        s.set_cancelled("second");
        CHECK(s.campaign_run().ended == doctest::Approx(2e9));
        CHECK(s.campaign_run().cancelled == "first");
        store::CampaignStore again(tmp.path()); // no migration twice
        CHECK(again.stage() == store::Stage::Verification);
        CHECK(again.requeued().size() == 2);
    }
}

namespace {
// An equivalence record as a version-7 build kept it in meta 'equivalence': a passed check, a failed one
// whose largest difference is "inf", an older orchestrator's (no candidate key, a key no build knows) and a
// failed spot check (its pair, no batch).
const char* const v7_equivalence =
    R"([{"attempt":1,"baseline_trial":18,"batch_id":5,"beyond":[],"candidate":"a=1 +p","candidate_key":"a=1;|p;",)"
    R"("candidate_trial":17,"compared":2,"knobs":"a=1","knobs_candidate":{"knobs":{"a":1},"patches":[]},)"
    R"("knobs_key":"a=1;|","knobs_moved":false,"math_changing":false,"max_relative":0.0,"patches":["p"],)"
    R"("reason":"","seed":1021935298,"seed_fresh":true,"seed_note":"seed 1021935298 chosen at random",)"
    R"("state":"passed","tolerance":1e-05,"tolerance_key":"equivalence_tolerance","values":[{"baseline":3.7,)"
    R"("candidate":3.7,"relative":0.0,"step":1},{"baseline":3.5,"candidate":3.5,"relative":0.0,"step":2}]},)"
    R"({"batch_id":6,"patches":["p","q"],"candidate_key":"a=2;|p;q;","state":"failed","seed":7,)"
    R"("max_relative":"inf","reason":"step 2: nan","knobs_moved":true,"knobs_note":"does not fit",)"
    R"("out_of_memory":true,"attempt":2,"beyond":[{"baseline":1.0,"candidate":"nan","relative":"inf","step":2}]},)"
    R"({"patches":["old"],"state":"passed","seed":3,"tolerance":0.001,"legacy":"kept"},)"
    R"({"pair":2,"patches":["p"],"candidate":"a=3 +p","candidate_key":"a=3;|p;","state":"failed",)"
    R"("seed":11,"reason":"differs","max_relative":0.5,"tolerance":1e-05}])";
} // namespace

TEST_CASE("a version-7 campaign database's equivalence records become rows of equivalence_checks") {
    TempDb tmp;
    // campaign-v5.sql with its record replaced by these: migrations 6 and 7 leave meta 'equivalence' as a
    // version-7 build kept it, 8 moves it.
    load_fixture(tmp.path(), "campaign-v5.sql");
    nlohmann::json before;
    {
        store::Database db(tmp.path());
        store::Statement u(db, "UPDATE meta SET value = ?1 WHERE key = 'equivalence'");
        u.bind(1, std::string(v7_equivalence)).run();
        before = nlohmann::json::parse(v7_equivalence);
    }
    store::CampaignStore s(tmp.path());
    CHECK_FALSE(s.meta("equivalence"));
    CHECK(s.meta("id") == "61b8cdc0");
    const auto checks = s.equivalence_checks();
    REQUIRE(checks.size() == 4);
    // Each record reads back as it was, key for key, in its order.
    for (std::size_t i = 0; i < checks.size(); ++i) {
        CAPTURE(i);
        CHECK(store::to_json(checks[i]) == before[i]);
    }
    CHECK(checks[0].values->size() == 2);
    CHECK(checks[0].seed_fresh == true);
    CHECK(checks[0].knobs_candidate == nlohmann::json::parse(R"({"knobs":{"a":1},"patches":[]})"));
    CHECK(std::isinf(*checks[1].max_relative));
    CHECK(checks[1].out_of_memory == true);
    CHECK(checks[1].attempt == 2);
    CHECK_FALSE(checks[2].candidate_key);
    CHECK_FALSE(checks[2].batch_id);
    CHECK(checks[2].other == nlohmann::json{{"legacy", "kept"}});
    CHECK(checks[3].pair == 2);
    CHECK(checks[0].id < checks[1].id);
    store::CampaignStore again(tmp.path()); // no migration twice
    CHECK(again.equivalence_checks().size() == 4);
}

TEST_CASE("equivalence checks are added, updated and listed in the order they were recorded") {
    TempDb tmp;
    store::CampaignStore s(tmp.path());
    CHECK(s.equivalence_checks().empty());
    store::EquivalenceCheck c;
    c.patches = {"a", "b"};
    c.candidate = "x=1 +a +b";
    c.candidate_key = "x=1;|a;b;";
    c.state = "running";
    c.attempt = 1;
    c.seed = 4000000000LL; // beyond 32 bits
    c.seed_fresh = true;
    c.tolerance = 1e-5;
    c.knobs_moved = false;
    c.batch_id = 3;
    c.id = s.add_equivalence_check(c);
    auto second = c;
    second.patches = {"c"};
    second.batch_id = 4;
    second.id = s.add_equivalence_check(second);
    CHECK(second.id > c.id);
    c.state = "failed";
    c.max_relative = std::numeric_limits<double>::infinity();
    c.reason = "step 3: loss nan";
    c.values =
        nlohmann::json::array({{{"step", 1}, {"baseline", 2.0}, {"candidate", 2.0}, {"relative", 0.0}}});
    c.out_of_memory = false;
    s.update_equivalence_check(c);
    const auto all = s.equivalence_checks();
    REQUIRE(all.size() == 2);
    CHECK(all[0].id == c.id);
    CHECK(all[0].state == "failed");
    CHECK(all[0].seed == 4000000000LL);
    CHECK(std::isinf(*all[0].max_relative));
    CHECK(all[0].values == c.values);
    CHECK(all[0].out_of_memory == false);
    CHECK(all[0].knobs_moved == false);
    CHECK_FALSE(all[0].knobs);
    CHECK(all[1].patches == std::vector<std::string>{"c"});
    CHECK(all[1].state == "running");
    CHECK(store::to_json(all[0]) == store::to_json(c));
    CHECK(store::to_json(all[0])["max_relative"] == "inf");
    // A judgement's fields over the record: it keeps its id and what the judgement does not say.
    auto judged = all[1];
    store::update(judged, nlohmann::json{{"state", "passed"}, {"max_relative", 0.0}, {"compared", 8}});
    CHECK(judged.id == all[1].id);
    CHECK(judged.state == "passed");
    CHECK(judged.compared == 8);
    CHECK(judged.seed == 4000000000LL);
    CHECK(judged.other.empty());
}

namespace {
// What a version-8 build kept in meta: the bank's seeds (one with a key no build knows), the agent's pairs
// from the bank, and an agent call's detail as agent_stage.cpp wrote it, with a key no build knows.
const char* const v8_bank_seeds =
    R"([{"candidate":{"knobs":{"grad_accum":4,"micro_batch":4,"recompute":"selective"},)"
    R"("patches":["fast_kernel"]},)"
    R"("hypothesis":false,"provenance":{"campaign":"c1","finding":"f1","similarity":0.9},)"
    R"("reason":"verified 1.4x on similar hardware","weight":0.8,"legacy":"kept"},)"
    R"({"candidate":{"knobs":{"micro_batch":2},"patches":[]},"hypothesis":true,"provenance":{},)"
    R"("reason":"a hypothesis","weight":0.25}])";
const char* const v8_agent_bank_pairs =
    R"({"memory":[{"claimed":0.8,"measured":0.9}],"speedup":[{"claimed":1.5,"measured":1.2},)"
    R"({"claimed":1.1,"measured":1.0}]})";
const char* const v8_agent_call_detail =
    R"({"isolated":true,"isolation":"private view","knob_priors":[{"claim":{"confidence":0.7,)"
    R"("memory_factor":1.0,"speedup":1.3},"knob":"micro_batch","value":"4"}],"leftovers":0,)"
    R"("refused_priors":[{"index":2,"reason":"malformed: no knob"}],"refused_while_reading":[{"index":5,)"
    R"("name":"big","reason":"over the limit"}],"search_batches":2,"seconds":12.5,)"
    R"("stderr_tail":{"job_output":"thinking\n","truncated":false},"legacy_note":"kept"})";
} // namespace

TEST_CASE("a version-8 campaign database's startup and bank facts become columns of the run's row, once") {
    // campaign-v5.sql (whose doctor kept meta 'startup') with the bank's facts added: migrations 6 to 8 leave
    // them as a version-8 build kept them, 9 moves them. The cases: what meta 'bank_ingested' said, and a
    // startup or seeds a build could not read.
    struct Case {
        const char* edit;
        std::optional<store::BankIngested> ingested;
        bool startup, seeds;
    };
    const Case cases[] = {
        {"", store::BankIngested::Done, true, true},
        {"UPDATE meta SET value = 'searched' WHERE key = 'bank_ingested'", store::BankIngested::Searched,
         true, true},
        {"UPDATE meta SET value = '' WHERE key = 'bank_ingested'", std::nullopt, true, true},
        {"DELETE FROM meta WHERE key = 'bank_ingested'", std::nullopt, true, true},
        {"UPDATE meta SET value = '{\"median_s\":\"x\",\"spread_s\":1}' WHERE key = 'startup'",
         store::BankIngested::Done, false, true},
        {"UPDATE meta SET value = 'not json' WHERE key = 'startup'; "
         "UPDATE meta SET value = 'not json' WHERE key = 'bank_seeds'",
         store::BankIngested::Done, false, false},
    };
    for (const auto& c : cases) {
        const std::string edit = c.edit;
        CAPTURE(edit);
        TempDb tmp;
        load_fixture(tmp.path(), "campaign-v5.sql");
        {
            store::Database db(tmp.path());
            store::Statement(db, "INSERT INTO meta (key, value) VALUES ('bank', '/banks/site.sqlite'), "
                                 "('bank_seeds', ?1), ('agent_bank_pairs', ?2), ('bank_ingested', '1')")
                .bind(1, std::string(v8_bank_seeds))
                .bind(2, std::string(v8_agent_bank_pairs))
                .run();
            store::Statement(db, "INSERT INTO agent_calls (id, started, finished, trigger, outcome, detail) "
                                 "VALUES (1, 1796643700, 1796643712.5, 'after_doctor', 'ok', ?1)")
                .bind(1, std::string(v8_agent_call_detail))
                .run();
            if (!edit.empty()) db.exec(edit);
        }
        const auto check = [&](store::CampaignStore& s) {
            {
                store::Statement v(s.db(), "PRAGMA user_version");
                REQUIRE(v.step());
                CHECK(v.integer(0) == store::CampaignStore::schema_version);
            }
            for (const char* key : {"startup", "bank_seeds", "agent_bank_pairs", "bank_ingested"})
                CHECK_FALSE(s.meta(key));
            // The bank's file stayed in meta until schema 10 made it a column of the run's row.
            CHECK_FALSE(s.meta("bank"));
            CHECK(s.campaign_run().bank_path == "/banks/site.sqlite");
            CHECK(s.meta("id") == "61b8cdc0");
            const auto run = s.campaign_run();
            CHECK(run.bank_ingested == c.ingested);
            REQUIRE(run.startup.has_value() == c.startup);
            if (c.startup) {
                CHECK(run.startup->median_s == doctest::Approx(0.14198906300000047));
                CHECK(run.startup->spread_s == doctest::Approx(0.1690114180000002));
                CHECK(run.startup->runs == 3);
                CHECK(run.startup->wall_clock);
                CHECK(run.startup->source == "local parent");
            }
            REQUIRE(run.bank_seeds.has_value() == c.seeds);
            if (c.seeds) {
                const auto& seeds = *run.bank_seeds;
                REQUIRE(seeds.size() == 2);
                CHECK(seeds[0].candidate["patches"] == nlohmann::json::array({"fast_kernel"}));
                CHECK(seeds[0].reason == "verified 1.4x on similar hardware");
                CHECK(seeds[0].weight == doctest::Approx(0.8));
                CHECK_FALSE(seeds[0].hypothesis);
                CHECK(seeds[0].provenance["finding"] == "f1");
                CHECK(seeds[0].other == nlohmann::json{{"legacy", "kept"}});
                CHECK(seeds[1].hypothesis);
                CHECK(seeds[1].other.empty());
                // Each seed reads back as it was, key for key, in its order (the report's bank.seeds).
                CHECK(store::to_json(seeds) == nlohmann::json::parse(v8_bank_seeds));
            }
            REQUIRE(run.agent_bank_pairs);
            REQUIRE(run.agent_bank_pairs->speedup.size() == 2);
            CHECK(run.agent_bank_pairs->speedup[0].claimed == doctest::Approx(1.5));
            CHECK(run.agent_bank_pairs->speedup[0].measured == doctest::Approx(1.2));
            REQUIRE(run.agent_bank_pairs->memory.size() == 1);
            CHECK(run.agent_bank_pairs->memory[0].measured == doctest::Approx(0.9));
            CHECK(store::to_json(*run.agent_bank_pairs) == nlohmann::json::parse(v8_agent_bank_pairs));
            // The rest of the run's row as migrations 7 and 8 made it.
            CHECK(run.started == doctest::Approx(1796643694.512));
            CHECK(run.step_pace_runs == 3);
        };
        store::CampaignStore s(tmp.path());
        check(s);
        // The agent call's detail (no migration: the same document) reads back typed.
        auto calls = s.agent_calls();
        REQUIRE(calls.size() == 1);
        const auto& d = calls[0].detail;
        CHECK(d.search_batches == 2);
        CHECK(d.seconds == doctest::Approx(12.5));
        CHECK(d.isolated == true);
        CHECK(d.isolation == "private view");
        CHECK(d.leftovers == 0);
        CHECK(d.stderr_tail == nlohmann::json{{"job_output", "thinking\n"}, {"truncated", false}});
        REQUIRE(d.knob_priors);
        REQUIRE(d.knob_priors->size() == 1);
        CHECK((*d.knob_priors)[0].knob == "micro_batch");
        CHECK((*d.knob_priors)[0].value == "4");
        CHECK((*d.knob_priors)[0].claim.speedup == doctest::Approx(1.3));
        CHECK((*d.knob_priors)[0].claim.confidence == doctest::Approx(0.7));
        REQUIRE(d.refused_while_reading);
        REQUIRE(d.refused_while_reading->size() == 1);
        CHECK((*d.refused_while_reading)[0].name == "big");
        REQUIRE(d.refused_priors);
        REQUIRE(d.refused_priors->size() == 1);
        CHECK_FALSE((*d.refused_priors)[0].name);
        CHECK(d.other == nlohmann::json{{"legacy_note", "kept"}});
        CHECK(store::to_json(d) == nlohmann::json::parse(v8_agent_call_detail));
        // ...and through an update, the key this build does not know with it.
        calls[0].detail.leftovers = 1;
        s.update_agent_call(calls[0]);
        auto expected = nlohmann::json::parse(v8_agent_call_detail);
        expected["leftovers"] = 1;
        CHECK(store::to_json(s.agent_calls()[0].detail) == expected);

        store::CampaignStore again(tmp.path()); // no migration twice
        check(again);
    }
}

namespace {
// What a version-9 build kept in meta of the experience bank: the bank's file and its hardware match, as
// bank_stage.cpp wrote them (bank::ExperienceBank::match_hardware's JSON, dumped).
const char* const v9_bank_hardware = R"({"entries":3,"nearest":"big1","seen":true,"similarity":0.97})";
} // namespace

TEST_CASE(
    "a version-9 campaign database's bank file and hardware match become columns of the run's row, once") {
    // campaign-v5.sql with the bank's meta keys a version-9 build kept: migrations 6 to 9 leave them as they
    // were, 10 moves them. The cases: both kept, a match that is not JSON (dropped), a match too deep for the
    // bounded reader (kept by the migration, read as none), a file without a match, and neither.
    struct Case {
        const char* name;
        const char* edit;
        std::optional<std::string> path;
        std::optional<nlohmann::json> hardware;
    };
    const std::string deep = std::string(100, '[') + std::string(100, ']');
    const Case cases[] = {
        {"both", "", "/banks/site.sqlite", nlohmann::json::parse(v9_bank_hardware)},
        {"corrupt match", "UPDATE meta SET value = '{\"entries\":' WHERE key = 'bank_hardware'",
         "/banks/site.sqlite", std::nullopt},
        {"no match", "DELETE FROM meta WHERE key = 'bank_hardware'", "/banks/site.sqlite", std::nullopt},
        {"neither", "DELETE FROM meta WHERE key IN ('bank', 'bank_hardware')", std::nullopt, std::nullopt},
        {"deep match", "", "/banks/site.sqlite", std::nullopt},
    };
    for (const auto& c : cases) {
        const std::string name = c.name;
        CAPTURE(name);
        TempDb tmp;
        load_fixture(tmp.path(), "campaign-v5.sql");
        {
            store::Database db(tmp.path());
            store::Statement(db, "INSERT INTO meta (key, value) VALUES ('bank', '/banks/site.sqlite'), "
                                 "('bank_hardware', ?1)")
                .bind(1, name == "deep match" ? deep : std::string(v9_bank_hardware))
                .run();
            if (*c.edit != '\0') db.exec(c.edit);
        }
        const auto check = [&](store::CampaignStore& s) {
            {
                store::Statement v(s.db(), "PRAGMA user_version");
                REQUIRE(v.step());
                CHECK(v.integer(0) == store::CampaignStore::schema_version);
            }
            CHECK_FALSE(s.meta("bank"));
            CHECK_FALSE(s.meta("bank_hardware"));
            CHECK(s.meta("id") == "61b8cdc0"); // the settings stay
            const auto run = s.campaign_run();
            CHECK(run.bank_path == c.path);
            CHECK(run.bank_hardware == c.hardware);
            // The rest of the run's row as migrations 7 to 9 made it.
            CHECK(run.started == doctest::Approx(1796643694.512));
            CHECK(run.step_pace_runs == 3);
            REQUIRE(run.startup);
            CHECK(run.startup->runs == 3);
        };
        {
            store::CampaignStore s(tmp.path());
            check(s);
        }
        store::CampaignStore again(tmp.path()); // no migration twice
        check(again);
    }
}

TEST_CASE("the bank's file and hardware match are set and read back typed") {
    TempDb tmp;
    {
        store::CampaignStore s(tmp.path());
        {
            const auto run = s.campaign_run();
            CHECK_FALSE(run.bank_path);
            CHECK_FALSE(run.bank_hardware);
        }
        const auto match = nlohmann::json::parse(v9_bank_hardware);
        s.set_bank_hardware(match);
        {
            const auto run = s.campaign_run();
            CHECK_FALSE(run.bank_path); // the file is set once the seeds are kept
            CHECK(run.bank_hardware == match);
        }
        s.set_bank_path("/banks/site.sqlite");
        s.set_bank_hardware({{"entries", 0}, {"seen", false}});
        CHECK_FALSE(s.meta("bank"));
        CHECK_FALSE(s.meta("bank_hardware"));
    }
    store::CampaignStore again(tmp.path());
    const auto run = again.campaign_run();
    CHECK(run.bank_path == "/banks/site.sqlite");
    CHECK(run.bank_hardware == nlohmann::json{{"entries", 0}, {"seen", false}});
    // A match this store cannot read back (written by hand, or by an older build) reads as none.
    store::Statement(again.db(), "UPDATE campaign_run SET bank_hardware = '{' WHERE id = 1").run();
    CHECK_FALSE(again.campaign_run().bank_hardware);
    CHECK(again.campaign_run().bank_path == "/banks/site.sqlite");
}

TEST_CASE("the doctor's startup and the bank's facts are set once each and read back typed") {
    TempDb tmp;
    store::CampaignStore s(tmp.path());
    {
        const auto run = s.campaign_run();
        CHECK_FALSE(run.startup);
        CHECK_FALSE(run.bank_seeds);
        CHECK_FALSE(run.agent_bank_pairs);
        CHECK_FALSE(run.bank_ingested);
    }
    trial::Startup st;
    st.median_s = -0.25;
    st.spread_s = 0.125;
    st.runs = 4;
    st.wall_clock = false;
    st.source = "plugin";
    s.set_startup(st);
    s.set_bank_seeds({});
    s.set_agent_bank_pairs({.speedup = {{1.5, 1.25}}, .memory = {}});
    s.set_bank_ingested(store::BankIngested::Searched);
    {
        const auto run = s.campaign_run();
        REQUIRE(run.startup);
        CHECK(trial::to_json(*run.startup) == trial::to_json(st));
        REQUIRE(run.bank_seeds); // looked up, none found: not looked up again
        CHECK(run.bank_seeds->empty());
        REQUIRE(run.agent_bank_pairs);
        REQUIRE(run.agent_bank_pairs->speedup.size() == 1);
        CHECK(run.agent_bank_pairs->speedup[0].measured == doctest::Approx(1.25));
        CHECK(run.agent_bank_pairs->memory.empty());
        CHECK(run.bank_ingested == store::BankIngested::Searched);
    }
    s.set_bank_seeds({{.candidate = {{"knobs", {{"a", 1}}}, {"patches", nlohmann::json::array()}},
                       .reason = "seed",
                       .weight = 0.5,
                       .hypothesis = true,
                       .provenance = {{"finding", "f"}}}});
    s.set_bank_ingested(store::BankIngested::Done);
    store::CampaignStore again(tmp.path());
    const auto run = again.campaign_run();
    REQUIRE(run.bank_seeds);
    REQUIRE(run.bank_seeds->size() == 1);
    CHECK((*run.bank_seeds)[0].candidate["knobs"]["a"] == 1);
    CHECK((*run.bank_seeds)[0].reason == "seed");
    CHECK((*run.bank_seeds)[0].weight == doctest::Approx(0.5));
    CHECK((*run.bank_seeds)[0].hypothesis);
    CHECK((*run.bank_seeds)[0].provenance == nlohmann::json{{"finding", "f"}});
    CHECK(run.bank_ingested == store::BankIngested::Done);
    CHECK(run.startup->runs == 4);
}

TEST_CASE("an agent call's detail is stored typed, and a key this build does not know, or of another shape, "
          "is kept as it was") {
    TempDb tmp;
    store::CampaignStore s(tmp.path());
    store::AgentCallRow row;
    row.started = 1.0;
    row.trigger = "after_doctor";
    row.outcome = "running";
    row.id = s.add_agent_call(row);
    CHECK(to_json(s.agent_calls()[0].detail) == nlohmann::json::object()); // a call killed before it ran
    row.detail.search_batches = 0;
    row.detail.seconds = 3.5;
    row.detail.isolated = false;
    row.detail.isolation = "no user namespaces";
    row.detail.leftovers = 2;
    row.detail.stderr_tail = nlohmann::json{{"job_output", "a\nb"}, {"truncated", true}};
    row.detail.refused_while_reading = std::vector<store::AgentRefusal>{};
    row.detail.knob_priors = std::vector<store::AgentKnobPrior>{{"threads", "8", {1.2, 0.9, 0.4}}};
    row.detail.refused_priors = std::vector<store::AgentRefusal>{{3, std::nullopt, "unknown knob"}};
    row.outcome = "ok";
    s.update_agent_call(row);
    const auto back = s.agent_calls().at(0).detail;
    CHECK(store::to_json(back) == store::to_json(row.detail));
    CHECK(back.leftovers == 2);
    CHECK(back.stderr_tail == row.detail.stderr_tail);
    REQUIRE(back.knob_priors);
    CHECK((*back.knob_priors)[0].claim.memory_factor == doctest::Approx(0.9));
    CHECK(back.refused_while_reading->empty());
    CHECK(back.refused_priors->at(0).index == 3);
    CHECK(store::to_json(back)["refused_priors"][0] ==
          nlohmann::json{{"index", 3}, {"reason", "unknown knob"}});

    // A record whose keys this build does not know, or whose known key has another shape than this build
    // writes: kept in `other`, written back as it was, and not read.
    const auto odd = nlohmann::json::parse(R"({"future":{"a":1},"knob_priors":"none","seconds":"long",)"
                                           R"("refused_priors":[{"index":1,"reason":"r",)"
                                           R"("extra":true}],"search_batches":4})");
    auto d = store::agent_call_detail_from_json(odd);
    CHECK_FALSE(d.knob_priors);
    CHECK_FALSE(d.seconds);
    CHECK_FALSE(d.refused_priors);
    CHECK(d.search_batches == 4);
    CHECK(d.other.size() == 4);
    CHECK(store::to_json(d) == odd);
    row.detail = d;
    s.update_agent_call(row);
    CHECK(store::to_json(s.agent_calls().at(0).detail) == odd);
    // A detail that is not JSON says nothing (as before it was typed).
    store::Statement(s.db(), "UPDATE agent_calls SET detail = 'not json'").run();
    CHECK(store::to_json(s.agent_calls().at(0).detail) == nlohmann::json::object());
}

TEST_CASE("a trial's measurements an earlier build wrote read back typed, and a newer version is refused") {
    // campaign-v2.sql's trials keep the measurements document every build wrote before it had a version.
    TempDb tmp;
    load_fixture(tmp.path(), "campaign-v2.sql");
    store::CampaignStore s(tmp.path());
    const auto all = s.trials();
    REQUIRE(all.size() > 1);
    const auto& m = all[0].measurements;
    REQUIRE(m.losses);
    CHECK(m.losses->size() == 8);
    CHECK(m.losses->front() == doctest::Approx(3.769702));
    CHECK(m.steady_samples.size() == 6);
    CHECK(m.phases.at("forward_s") == doctest::Approx(0.2437435));
    CHECK_FALSE(m.eval_loss);
    // Written back, it reads back the same (and now says its version).
    auto t = all[0];
    t.measurements.eval_loss = 2.5;
    t.measurements.log_signal =
        trial::diagnose("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB");
    t.measurements.control = trial::ControlRatio{7, 0.5, 0.8, 0.75};
    s.update_trial(t);
    const auto back = s.trials({.candidate_key = t.candidate_key}).at(0).measurements;
    CHECK(store::to_json(back) == store::to_json(t.measurements));
    CHECK(store::to_json(back)["version"] == store::kMeasurementsVersion);
    REQUIRE(back.log_signal);
    CHECK(back.log_signal->signal == trial::LogSignal::GpuOom);
    CHECK(back.control->ratio == doctest::Approx(0.8));
    CHECK(back.control->outlier_control_s == 0.75);
    // A document of a later version than this build writes is not guessed at.
    CHECK_THROWS_AS(store::measurements_from_json({{"version", store::kMeasurementsVersion + 1}}), Error);
}

TEST_CASE("a verification's detail an earlier build wrote reads back typed, and a newer version is refused") {
    // campaign-v2.sql's verification keeps the detail every build wrote before it had a version, from before
    // the pairs were ordered and placed.
    TempDb tmp;
    load_fixture(tmp.path(), "campaign-v2.sql");
    store::CampaignStore s(tmp.path());
    const auto vs = s.verifications();
    REQUIRE(vs.size() == 1);
    const auto& d = vs[0].detail;
    CHECK(d.search_trial == 9);
    CHECK(d.reasons.empty());
    REQUIRE(d.evidence.size() == 2);
    CHECK(d.evidence[0] == "peak memory 135 MiB, limit 300M");
    CHECK(d.mde.value() == doctest::Approx(0.07061269357574136));
    REQUIRE(d.pairs.size() == 3);
    CHECK(d.pairs[0].baseline_trial == 16);
    CHECK(d.pairs[0].candidate_trial == 17);
    CHECK(d.pairs[2].candidate_step_s == doctest::Approx(0.171804));
    CHECK_FALSE(d.pairs[0].order);
    CHECK_FALSE(d.pairs[0].seed);
    CHECK_FALSE(d.recheck);
    CHECK_FALSE(d.ablation);
    CHECK(d.first.blocks.empty());
    // Written back, it reads back the same, its pairs in their old layout (no order or node made up), and
    // now says its version.
    s.update_verification(vs[0]);
    const auto back = s.verifications().at(0).detail;
    CHECK(store::to_json(back) == store::to_json(d));
    CHECK(store::to_json(back)["version"] == store::kVerificationDetailVersion);
    CHECK_FALSE(store::to_json(back)["pairs"][0].contains("order"));
    CHECK_FALSE(store::to_json(back)["pairs"][0].contains("same_node"));
    CHECK_THROWS_AS(
        store::verification_detail_from_json({{"version", store::kVerificationDetailVersion + 1}}), Error);
}

TEST_CASE("a verification's detail reads back field for field, an infinite bound stored as null read back "
          "infinite") {
    constexpr double inf = std::numeric_limits<double>::infinity();
    store::VerificationDetail d;
    d.search_trial = 4;
    d.equivalence =
        store::equivalence_check_from_json({{"patches", {"tidy"}}, {"state", "passed"}, {"seed", 11}});
    d.not_equivalent = true;
    d.reasons = {"why not"};
    d.evidence = {"what was checked"};
    d.max_pairs = 16;
    d.alpha = 0.0125;
    d.min_speedup = 0.03;
    d.first.blocks = {5, 6};
    d.first.order_seed = 4000000000u;
    d.first.order_seeds = {4000000000u, 7};
    d.first.plan = {{1, "AB", {"n1"}, 1, 123}, {2, "BA", {"n1"}, 1, std::nullopt}};
    d.first.next = "recheck";
    d.first.spot_check = store::spot_check_from_json({{"pair", 1}, {"state", "passed"}});
    store::MeasuredPair p;
    p.pair = 1;
    p.order = "AB";
    p.baseline_trial = 8;
    p.candidate_trial = 9;
    p.baseline_step_s = 0.5;
    p.candidate_step_s = 0.25;
    p.baseline_node = p.candidate_node = "n1";
    p.same_node = true;
    p.log_ratio = 0.69;
    p.nodes = std::vector<std::string>{"n1"};
    p.block = 1;
    p.seed = 123;
    d.pairs = {p};
    d.pairs_counted = 1;
    d.order_effect = 0.01;
    d.mde = 0.05;
    d.reproduced = true;
    d.sequence = {{"first", 2, 2, 0, std::nan(""), -inf, inf, "recheck"}};
    store::Recheck r;
    r.blocks = {7};
    r.batch = 7;
    r.plan = {{3, "BA", {"n2"}, 1, 99}};
    r.next = "promoted";
    r.pairs = std::vector<store::MeasuredPair>{p};
    r.speedup = 2.0;
    r.ci = std::pair{-inf, 3.0};
    r.all_pairs = store::Recheck::AllPairs{2.0, 1.5, 2.5, 4};
    r.reasons = std::vector<std::string>{};
    r.evidence = std::vector<std::string>{"fresh"};
    r.nodes = 1;
    d.recheck = r;
    d.mfu = store::MfuRecord{1e12, "calibration", false, 1e9, 0.5, 0.25, 0.4, std::nullopt, "above 1"};
    store::Ablation a;
    a.state = "done";
    a.rounds = 2;
    a.bundle = "threads=2;|tidy;";
    a.batch_id = 8;
    store::AblationComponent c;
    c.change = {"knob", "threads", "2", "1", std::nullopt};
    c.name = "threads=2 (baseline 1)";
    c.without = "threads=1;|tidy;";
    c.state = "measured";
    c.effect = 1.9;
    c.lo = 1.8;
    c.hi = 2.0;
    c.carries = true;
    c.measured_by = "ablation";
    c.pairs = std::vector<store::AblationPair>{{10, 11, 0.25, 0.5}};
    a.components = {c};
    a.skipped = {{{"knobs", "a=1 b=2", std::nullopt, std::nullopt, std::vector<std::string>{"a", "b"}},
                  "a=1 b=2 (together)",
                  "not in the space"}};
    d.ablation = a;

    const auto j = store::to_json(d);
    const auto back = store::verification_detail_from_json(nlohmann::json::parse(j.dump()));
    CHECK(store::to_json(back).dump() == j.dump());
    // The names the report and docs/orchestrator.md give them: the first stage at the top level.
    CHECK(j["version"] == store::kVerificationDetailVersion);
    CHECK(j["blocks"] == nlohmann::json::array({5, 6}));
    CHECK(j["order_seed"] == 4000000000u);
    CHECK(j["plan"][0]["seed"] == 123);
    CHECK_FALSE(j["plan"][1].contains("seed"));
    CHECK(j["recheck"]["batch"] == 7);
    CHECK(j["recheck"]["ci"][0].is_null());
    CHECK(j["recheck"]["all_pairs"]["ci"] == nlohmann::json::array({1.5, 2.5}));
    CHECK(j["mfu"]["candidate"].is_null());
    CHECK(j["ablation"]["components"][0]["change"]["baseline"] == "1");
    CHECK(j["ablation"]["skipped"][0]["change"]["names"] == nlohmann::json::array({"a", "b"}));
    // Typed again, each field as it was; a bound that was infinite is infinite again.
    CHECK(back.first.plan[0].seed == 123);
    CHECK_FALSE(back.first.plan[1].seed);
    CHECK(std::isnan(back.sequence[0].estimate));
    CHECK(back.sequence[0].lo == -inf);
    CHECK(back.sequence[0].hi == inf);
    REQUIRE(back.recheck);
    CHECK(back.recheck->pairs.value().at(0).log_ratio == doctest::Approx(0.69));
    CHECK(back.recheck->reasons.value().empty());
    CHECK(back.ablation.value().components.at(0).pairs.value().at(0).without_trial == 11);
    CHECK(back.mfu.value().unknown == "above 1");
    CHECK(back.not_equivalent);
    CHECK(back.equivalence.value().seed == 11);
    CHECK(back.first.spot_check.value().pair == 1);
    CHECK_FALSE(j["spot_check"].contains("patches"));
    // An empty record is an empty document but for its version.
    CHECK(store::to_json(store::VerificationDetail{}) ==
          nlohmann::json{{"version", store::kVerificationDetailVersion}});
}

TEST_CASE("a verification's equivalence check and spot checks stored by an earlier build read typed and "
          "write back unchanged, keys this build does not know kept") {
    // The copy of the equivalence check and the spot checks as builds before they were typed stored them
    // (campaign-v5.sql's, shortened), each with a key no build wrote; no "version" key.
    const auto values = nlohmann::json::parse(
        R"([{"baseline": 3.769702, "candidate": 3.769702, "relative": 0.0, "step": 1},
            {"baseline": 3.557314, "candidate": 3.9, "relative": "inf", "step": 2}])");
    const auto old = nlohmann::json::parse(R"({
        "equivalence": {"attempt": 1, "baseline_trial": 18, "batch_id": 5, "beyond": [],
            "candidate": "micro_batch=4 +fast_kernel", "candidate_key": "micro_batch=4;|fast_kernel;",
            "candidate_trial": 17, "compared": 8, "knobs": "micro_batch=4", "knobs_key": "micro_batch=4;|",
            "knobs_candidate": {"knobs": {"micro_batch": 4}, "patches": []}, "knobs_moved": false,
            "math_changing": false, "max_relative": 0.0, "patches": ["fast_kernel"], "reason": "",
            "seed": 1021935298, "seed_fresh": false, "seed_note": "no fresh seed in effect", "state": "passed",
            "tolerance": 1e-05, "tolerance_key": "equivalence_tolerance", "values": [], "checked_by": "v4"},
        "spot_check": {"baseline_trial": 23, "beyond": [], "candidate_trial": 22, "compared": 8,
            "max_relative": 0.0, "pair": 2, "reason": "", "seed": 1491665770, "seed_note": "one seed: why",
            "state": "passed", "tolerance": 1e-05, "values": [], "drawn_by": "v4"},
        "recheck": {"blocks": [8], "spot_check": {"pair": 1, "seed": 7, "knobs": "chunk=1",
            "knobs_moved": true, "knobs_note": "does not fit", "drawn_by": {"build": 4}}},
        "blocks": [6, 7], "pairs_counted": 4})");
    auto doc = old;
    doc["equivalence"]["values"] = values;
    doc["spot_check"]["beyond"] = values;
    doc["spot_check"]["state"] = "failed";
    doc["spot_check"]["max_relative"] = "inf";
    const auto d = store::verification_detail_from_json(nlohmann::json::parse(doc.dump()));
    // Typed: each field, the unknown keys apart.
    REQUIRE(d.equivalence);
    CHECK(d.equivalence->patches == std::vector<std::string>{"fast_kernel"});
    CHECK(d.equivalence->seed == 1021935298);
    CHECK(d.equivalence->knobs_candidate.value()["knobs"]["micro_batch"] == 4);
    CHECK(d.equivalence->other == nlohmann::json{{"checked_by", "v4"}});
    REQUIRE(d.first.spot_check);
    CHECK(d.first.spot_check->pair == 2);
    CHECK(d.first.spot_check->state == "failed");
    CHECK(d.first.spot_check->max_relative == std::numeric_limits<double>::infinity());
    CHECK(d.first.spot_check->candidate_trial == 22);
    CHECK(d.first.spot_check->patches.empty());
    CHECK(d.first.spot_check->other == nlohmann::json{{"drawn_by", "v4"}});
    REQUIRE(d.recheck);
    REQUIRE(d.recheck->spot_check);
    CHECK(d.recheck->spot_check->state.empty()); // not judged yet
    CHECK(d.recheck->spot_check->knobs_moved == true);
    CHECK(d.recheck->spot_check->other["drawn_by"]["build"] == 4);
    // Written back: the same document, byte for byte, but for its version.
    auto expected = doc;
    expected["version"] = store::kVerificationDetailVersion;
    CHECK(store::to_json(d).dump() == expected.dump());
    // Through the store: the document an earlier build stored, read and written back.
    TempDb tmp;
    store::CampaignStore s(tmp.path());
    store::VerificationRow v;
    v.candidate_key = "micro_batch=4;|fast_kernel;";
    v.candidate = {{"knobs", {{"micro_batch", 4}}}, {"patches", {"fast_kernel"}}};
    v.id = s.add_verification(v);
    store::Statement(s.db(), "UPDATE verifications SET detail = ?").bind(1, doc.dump()).run();
    auto stored = s.verifications().at(0);
    s.update_verification(stored);
    store::Statement raw(s.db(), "SELECT detail FROM verifications");
    REQUIRE(raw.step());
    CHECK(raw.text(0) == expected.dump());
}

TEST_CASE("the stage only moves forward, and an unknown one is refused by name") {
    TempDb tmp;
    store::CampaignStore s(tmp.path());
    CHECK(s.stage() == store::Stage::Initialized);
    CHECK(s.advance_stage(store::Stage::Search));
    CHECK_FALSE(s.advance_stage(store::Stage::Doctor));
    CHECK(s.stage() == store::Stage::Search);
    CHECK_FALSE(s.advance_stage(store::Stage::Search));
    s.db().exec("UPDATE campaign_stage SET stage = 'finishing'");
    CHECK_THROWS_WITH_AS(s.stage(), doctest::Contains("initialized, doctor, search, verification, done"),
                         Error);
}

TEST_CASE("a trial query matches every field it sets") {
    TempDb tmp;
    store::CampaignStore s(tmp.path());
    const auto batch = s.add_batch(store::BatchKind::Search, "m");
    const store::TrialKind kinds[] = {store::TrialKind::Search, store::TrialKind::Doctor,
                                      store::TrialKind::Search};
    for (int i = 0; i < 3; ++i) {
        store::TrialRow t;
        t.batch_id = batch;
        t.array_index = i;
        t.kind = kinds[i];
        t.candidate_key = "k" + std::to_string(i % 2);
        t.candidate = nlohmann::json::object();
        t.id = s.add_trial(t);
        t.state = store::TrialState::Finished;
        t.outcome = i == 2 ? trial::Outcome::ContractViolation : trial::Outcome::Ok;
        if (i == 2) t.violation = trial::Violation::MissingSteps;
        t.counted = i != 1;
        s.update_trial(t);
    }
    CHECK(s.trials().size() == 3);
    CHECK(s.trials({.kinds = {store::TrialKind::Search}}).size() == 2);
    CHECK(s.trials({.kinds = {store::TrialKind::Search, store::TrialKind::Doctor}}).size() == 3);
    CHECK(s.trials({.kinds = {store::TrialKind::Search}, .outcome = trial::Outcome::Ok}).size() == 1);
    CHECK(s.trials({.counted = false}).size() == 1);
    CHECK(s.trials({.candidate_key = "k0"}).size() == 2);
    const auto v = s.trials({.outcome = trial::Outcome::ContractViolation});
    REQUIRE(v.size() == 1);
    CHECK(v[0].violation == trial::Violation::MissingSteps);
    // A value that looks like SQL is a value.
    CHECK(s.trials({.candidate_key = "k0' OR '1'='1"}).empty());
}

TEST_CASE("the doctor's baseline is stored typed and read back whole, a damaged one names its missing key") {
    TempDb tmp;
    store::CampaignStore s(tmp.path());
    CHECK_FALSE(s.baseline());
    store::Baseline b;
    b.repeats = 3;
    b.completed = 3;
    b.median_step_s = 0.25;
    b.minimum_detectable_effect = 0.04;
    b.phases = {{"forward", 0.1}};
    b.reference_losses = {5.0, 4.5};
    b.mfu = 0.2;
    s.put_baseline(b);
    const auto back = s.baseline();
    REQUIRE(back);
    CHECK(back->median_step_s == 0.25);
    CHECK(back->minimum_detectable_effect == 0.04);
    CHECK(back->phases.at("forward") == 0.1);
    CHECK(back->reference_losses == std::vector<double>{5.0, 4.5});
    CHECK(back->mfu == 0.2);
    CHECK_FALSE(back->peak_memory_bytes);

    auto j = store::to_json(b);
    j.erase("minimum_detectable_effect");
    CHECK_THROWS_WITH_AS(store::baseline_from_json(j), doctest::Contains("minimum_detectable_effect"), Error);
}

TEST_CASE("the journal mode follows the filesystem: WAL where local, a rollback journal on network ones") {
    using store::JournalMode;
    CHECK(store::journal_mode_for_filesystem(0xEF53) == JournalMode::Wal);        // ext2/3/4
    CHECK(store::journal_mode_for_filesystem(0x58465342) == JournalMode::Wal);    // XFS
    CHECK(store::journal_mode_for_filesystem(0x01021994) == JournalMode::Wal);    // tmpfs
    CHECK(store::journal_mode_for_filesystem(0x6969) == JournalMode::Delete);     // NFS
    CHECK(store::journal_mode_for_filesystem(0xFF534D42) == JournalMode::Delete); // CIFS
    CHECK(store::journal_mode_for_filesystem(0x0BD00BD0) == JournalMode::Delete); // Lustre
    CHECK(store::journal_mode_for_filesystem(0x47504653) == JournalMode::Delete); // GPFS
    CHECK(store::journal_mode_for_filesystem(0x00C36400) == JournalMode::Delete); // CephFS
    // And what a database opened here (a local temporary directory) got, as SQLite reports it.
    const std::string path = "/tmp/infrarsi-journal-" + std::to_string(::getpid()) + ".db";
    {
        store::Database db(path);
        CHECK(db.journal() == JournalMode::Wal);
        store::Statement q(db, "PRAGMA journal_mode");
        REQUIRE(q.step());
        CHECK(q.text(0) == "wal");
    }
    for (const char* suffix : {"", "-wal", "-shm"})
        std::filesystem::remove(path + suffix);
}
