// The experience bank: similarity over synthetic machines, priors from verified findings only,
// export/import without duplicates, and refusal of bad files that leaves the bank untouched.
#include "bank/experience_bank.hpp"
#include "campaign/experience.hpp"
#include "util/error.hpp"

#include "test_support.hpp"

#include <cstdlib>
#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace infrarsi;
using test::TempDir;
using namespace infrarsi::bank;
using namespace infrarsi::node;
namespace fs = std::filesystem;

namespace {

SoftwareStack stack() {
    return {"g++ 12.2.0", "Open MPI 4.1.4", "", "minigpt@abc"};
}

// Two-socket 16-core servers (A and a near twin A'), and a small 4-core machine with a quarter of the memory.
HardwareKey machine_a() {
    return {topology_from_synthetic("pack:2(memory=64GB) l3:1(size=32MB) l2:8(size=1MB) core:1 pu:2"), 0,
            stack()};
}
HardwareKey machine_a_twin() {
    return {topology_from_synthetic("pack:2(memory=64GB) l3:1(size=32MB) l2:8(size=1MB) core:1 pu:2"),
            0,
            {"g++ 12.3.0", "Open MPI 4.1.4", "", "minigpt@abc"}};
}
HardwareKey machine_b() {
    return {topology_from_synthetic("pack:1(memory=16GB) l3:1(size=8MB) l2:4(size=256KB) core:1 pu:1"), 0,
            stack()};
}

Finding verified_setting(double speedup) {
    Finding f;
    f.kind = "knob_setting";
    f.workload = "minigpt/dense-1node";
    f.verified = true;
    f.content = {
        {"knobs", {{"micro_batch", 8}, {"recompute", "none"}}}, {"speedup", speedup}, {"memory_ratio", 0.6}};
    f.campaign = "c1";
    f.trials = {3, 7};
    return f;
}

} // namespace

TEST_CASE("similarity ranks a near-identical machine above a different one") {
    auto a = machine_a(), twin = machine_a_twin(), b = machine_b();
    CHECK(a.topology.cores == 16);
    CHECK(similarity(a, a) == doctest::Approx(1.0));
    CHECK(similarity(a, twin) > 0.8);
    CHECK(similarity(a, twin) > similarity(a, b));
    CHECK(similarity(a, b) < kSeenHardwareSimilarity);
    CHECK(similarity(a, b) == doctest::Approx(similarity(b, a)));
}

TEST_CASE("only verified findings become priors, weighted by similarity and age") {
    TempDir dir;
    ExperienceBank bank((dir.path / "bank.sqlite").string(), "cluster-a");
    CHECK(bank.add_finding(machine_a(), verified_setting(1.4)));
    auto unverified = verified_setting(3.0);
    unverified.verified = false;
    CHECK(bank.add_finding(machine_a(), unverified));
    CHECK(bank.findings("minigpt/dense-1node").size() == 2);

    double now = bank.findings()[0].created;
    auto near = bank.priors(machine_a_twin(), "minigpt/dense-1node", now);
    REQUIRE(near.size() == 1);
    CHECK(near[0].finding.content["speedup"] == 1.4);
    CHECK_FALSE(near[0].hypothesis);
    auto later = bank.priors(machine_a_twin(), "minigpt/dense-1node", now + 180 * 86400.0);
    REQUIRE(later.size() == 1);
    CHECK(later[0].weight == doctest::Approx(near[0].weight / 2).epsilon(0.01));

    // On dissimilar hardware the finding is at most a hypothesis (or too weak to count at all).
    auto far = bank.priors(machine_b(), "minigpt/dense-1node", now, 180, 0.0);
    REQUIRE(far.size() == 1);
    CHECK(far[0].hypothesis);
    CHECK(far[0].weight < near[0].weight);
    CHECK(bank.priors(machine_a(), "other-workload", now).empty());
}

TEST_CASE("naming the default bank creates nothing, opening a bank makes its directory") {
    TempDir dir;
    const char* saved = std::getenv("INFRARSI_BANK");
    const std::string keep = saved ? saved : "";
    const char* xdg = std::getenv("XDG_DATA_HOME");
    const std::string keep_xdg = xdg ? xdg : "";
    ::unsetenv("INFRARSI_BANK");
    ::setenv("XDG_DATA_HOME", (dir.path / "data").c_str(), 1);
    // A trial run as a user whose home does not exist names no bank, so it must not fail making one.
    CHECK(default_bank_path() == (dir.path / "data" / "infrarsi" / "bank.sqlite").string());
    CHECK_FALSE(std::filesystem::exists(dir.path / "data"));
    {
        ExperienceBank bank(default_bank_path());
        CHECK(bank.findings().empty());
    }
    CHECK(std::filesystem::is_regular_file(dir.path / "data" / "infrarsi" / "bank.sqlite"));
    saved ? ::setenv("INFRARSI_BANK", keep.c_str(), 1) : ::unsetenv("INFRARSI_BANK");
    xdg ? ::setenv("XDG_DATA_HOME", keep_xdg.c_str(), 1) : ::unsetenv("XDG_DATA_HOME");
}

TEST_CASE("adding the same finding twice keeps one") {
    TempDir dir;
    ExperienceBank bank((dir.path / "bank.sqlite").string());
    CHECK(bank.add_finding(machine_a(), verified_setting(1.4)));
    CHECK_FALSE(bank.add_finding(machine_a(), verified_setting(1.4)));
    CHECK(bank.findings().size() == 1);
}

TEST_CASE("export then import into another bank round-trips, and importing twice changes nothing") {
    TempDir dir;
    std::string exported = (dir.path / "a.json").string();
    {
        ExperienceBank a((dir.path / "a.sqlite").string(), "cluster-a");
        a.add_finding(machine_a(), verified_setting(1.4));
        a.add_finding(machine_b(), verified_setting(1.1));
        a.upsert_hardware(machine_a(), "n1");
        a.export_to(exported);
    }
    ExperienceBank b((dir.path / "b.sqlite").string(), "cluster-b");
    b.add_finding(machine_b(), verified_setting(1.2));
    auto first = b.import_from(exported);
    CHECK(first.origin == "cluster-a");
    CHECK(first.findings_new == 2);
    CHECK(first.hardware_new == 1); // machine_b was known already
    auto after_first = b.findings();
    auto second = b.import_from(exported);
    CHECK(second.findings_new == 0);
    CHECK(second.findings_known == 2);
    CHECK(second.hardware_new == 0);
    CHECK(b.findings().size() == after_first.size());
    CHECK(b.findings().size() == 3);
    // Provenance survives: the imported findings say where they were measured.
    int from_a = 0;
    for (const auto& f : b.findings())
        from_a += f.origin == "cluster-a";
    CHECK(from_a == 2);
}

TEST_CASE("a corrupted or foreign-version export is refused and the bank is untouched") {
    TempDir dir;
    std::string exported = (dir.path / "a.json").string();
    {
        ExperienceBank a((dir.path / "a.sqlite").string(), "cluster-a");
        a.add_finding(machine_a(), verified_setting(1.4));
        a.export_to(exported);
    }
    ExperienceBank b((dir.path / "b.sqlite").string(), "cluster-b");
    b.add_finding(machine_b(), verified_setting(1.2));

    std::ifstream in(exported);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

    auto write = [&](const std::string& name, const std::string& body) {
        auto p = (dir.path / name).string();
        std::ofstream(p) << body;
        return p;
    };
    // Truncated file.
    CHECK_THROWS_WITH_AS(b.import_from(write("cut.json", text.substr(0, text.size() / 2))),
                         doctest::Contains("not valid JSON"), Error);
    // A future version.
    auto future = nlohmann::json::parse(text);
    future["version"] = 99;
    CHECK_THROWS_WITH_AS(b.import_from(write("v99.json", future.dump())), doctest::Contains("version 99"),
                         Error);
    // Something else entirely.
    CHECK_THROWS_WITH_AS(b.import_from(write("other.json", R"({"format":"something-else"})")),
                         doctest::Contains("not an InfraRSI bank export"), Error);
    // A format that is not a string, a number out of double's range: reported, not a type error that aborts.
    CHECK_THROWS_WITH_AS(b.import_from(write("number.json", R"({"format": 1})")),
                         doctest::Contains("not an InfraRSI bank export"), Error);
    CHECK_THROWS_WITH_AS(b.import_from(write("huge.json", R"({"format": 1e999})")), doctest::Contains("JSON"),
                         Error);
    // A finding added by hand to a valid file, pointing at a machine the file does not describe.
    auto tampered = nlohmann::json::parse(text);
    auto extra = tampered["findings"][0];
    extra["hardware"] = "0000000000000000";
    tampered["findings"].push_back(extra);
    CHECK_THROWS_WITH_AS(b.import_from(write("tampered.json", tampered.dump())),
                         doctest::Contains("unknown hardware"), Error);
    // A finding whose content was edited (a better speed-up) under its old uid.
    auto edited = nlohmann::json::parse(text);
    edited["findings"][0]["content"]["speedup"] = 9.9;
    CHECK_THROWS_WITH_AS(b.import_from(write("edited.json", edited.dump())),
                         doctest::Contains("does not match its content"), Error);
    // A version that wraps to 1 as an int, and one nested a million levels deep (its dump or destruction
    // would recurse and crash the import): refused, with what was expected.
    auto wraps = nlohmann::json::parse(text);
    wraps["version"] = 4294967297ull;
    CHECK_THROWS_WITH_AS(b.import_from(write("wraps.json", wraps.dump())),
                         doctest::Contains("version 4294967297"), Error);
    std::string deep = text;
    const auto version = deep.find("\"version\"");
    REQUIRE(version != std::string::npos);
    const auto value = deep.find(':', version) + 1;
    deep.replace(value, deep.find_first_of(",}", value) - value,
                 std::string(1'000'000, '[') + std::string(1'000'000, ']'));
    CHECK_THROWS_WITH_AS(b.import_from(write("deep.json", deep)),
                         doctest::Contains("nested more than 64 levels"), Error);
    CHECK(b.findings().size() == 1);
    CHECK(b.hardware().size() == 1);
}

TEST_CASE("a database that is not a bank, or a newer bank, is refused") {
    TempDir dir;
    auto other = (dir.path / "other.sqlite").string();
    {
        store::Database db(other);
        db.exec("CREATE TABLE t(x)");
    }
    CHECK_THROWS_WITH_AS(ExperienceBank{other}, doctest::Contains("not an InfraRSI experience bank"), Error);
    auto newer = (dir.path / "newer.sqlite").string();
    { ExperienceBank b(newer); }
    {
        store::Database db(newer);
        db.exec("PRAGMA user_version=7");
    }
    CHECK_THROWS_WITH_AS(ExperienceBank{newer}, doctest::Contains("newer than this build"), Error);
}

TEST_CASE("hardware entries rank by similarity to the machine asked about") {
    TempDir dir;
    ExperienceBank bank((dir.path / "bank.sqlite").string());
    bank.upsert_hardware(machine_b(), "small1");
    bank.upsert_hardware(machine_a(), "big1");
    bank.upsert_hardware(machine_a(), "big2");
    auto hw = bank.hardware(machine_a_twin());
    REQUIRE(hw.size() == 2);
    CHECK(hw[0].key.topology.cores == 16);
    CHECK(hw[0].nodes == std::vector<std::string>{"big1", "big2"});
}

TEST_CASE("match_hardware says whether the bank knows a machine, findings or not") {
    TempDir dir;
    ExperienceBank bank((dir.path / "bank.sqlite").string());
    auto empty = bank.match_hardware(machine_a());
    CHECK(empty["entries"] == 0);
    CHECK(empty["seen"] == false);
    CHECK(describe_match(empty).find("the bank is empty") != std::string::npos);

    bank.upsert_hardware(machine_b(), "small1");
    auto other = bank.match_hardware(machine_a());
    CHECK(other["entries"] == 1);
    CHECK(other["similarity"].get<double>() == doctest::Approx(similarity(machine_b(), machine_a())));
    CHECK(other["seen"] == (other["similarity"].get<double>() >= kSeenHardwareSimilarity));

    bank.upsert_hardware(machine_a(), "big1");
    auto twin = bank.match_hardware(machine_a_twin());
    CHECK(twin["entries"] == 2);
    CHECK(twin["seen"] == true);
    CHECK(twin["nearest"] == bank.hardware(machine_a_twin())[0].fingerprint);
    CHECK(describe_match(twin).rfind("seen hardware (similarity", 0) == 0);
    CHECK(describe_match(nlohmann::json::object()).find("not matched") != std::string::npos);
}

TEST_CASE("the plugin's allocation records become hardware entries and noise records, once each") {
    TempDir dir;
    auto spool = (dir.path / "allocations.jsonl").string();
    for (const char* node : {"n1", "n2"}) {
        AllocationRecord r;
        r.job_id = 42;
        r.node = node;
        r.time = "2026-12-02T10:00:00Z";
        r.mode = "record";
        r.plugin_version = "test";
        r.topology = machine_a().topology;
        r.calibration.compute_gflops.median = 10;
        append_record(spool, r);
    }
    ExperienceBank bank((dir.path / "bank.sqlite").string());
    auto first = bank.ingest_allocation_records(spool, stack());
    CHECK(first.records == 2);
    CHECK(first.hardware_new == 1);
    CHECK(first.noise_new == 2);
    CHECK(first.errors.empty());
    auto again = bank.ingest_allocation_records(spool, stack());
    CHECK(again.noise_new == 0);
    CHECK(again.skipped == 2);
    auto hw = bank.hardware(machine_a());
    REQUIRE(hw.size() == 1);
    CHECK(hw[0].nodes == std::vector<std::string>{"n1", "n2"});
    CHECK(hw[0].noise_records == 2);
}

TEST_CASE("an agent's calibration is kept under its name and found again on hardware like this, not another "
          "agent's") {
    TempDir dir;
    ExperienceBank bank((dir.path / "bank.sqlite").string());
    Finding f;
    f.kind = "agent_calibration";
    f.workload = campaign::agent_bank_workload("reference");
    f.verified = true;
    f.content = {
        {"agent", "reference"},
        {"speedup", {{{"claimed", 1.35}, {"measured", 1.16}}, {{"claimed", 1.15}, {"measured", 0.58}}}},
        {"memory", {{{"claimed", 0.8}, {"measured", 0.35}}, {{"claimed", -1}, {"measured", 1}}}}};
    f.campaign = "c1";
    CHECK(bank.add_finding(machine_a(), f));
    const auto pairs = campaign::agent_pairs_from_bank(bank, "reference", machine_a_twin());
    CHECK(pairs.findings == 1);
    REQUIRE(pairs.speed.size() == 2);
    CHECK(pairs.speed[1].measured == doctest::Approx(0.58));
    CHECK(pairs.memory.size() == 1); // the unusable pair (a negative claim) is skipped
    CHECK(campaign::agent_pairs_from_bank(bank, "other-agent", machine_a()).findings == 0);
    // Its discount from those pairs: an agent that over-claims is believed less.
    CHECK(model::calibrate_claims(pairs.speed).discount < 1.0);
}
