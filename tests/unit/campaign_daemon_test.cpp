// The daemon drives every campaign of a user: a bug met by one of them (an exception that is not an
// infrarsi::Error) stops that campaign, logged, and never the daemon or the others. As root it drives a
// campaign a user controls only as that user, and none that a user could have changed as root.
#include "bank/experience_bank.hpp"
#include "campaign/campaign_lock.hpp"
#include "campaign/daemon.hpp"
#include "report/report.hpp"
#include "test_support.hpp"
#include "util/error.hpp"
#include "util/privilege.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace infrarsi;
using namespace std::chrono_literals;

namespace {
struct TempDir {
    fs::path path;
    TempDir() {
        std::string t = (fs::temp_directory_path() / "infrarsi-daemon-XXXXXX").string();
        path = ::mkdtemp(t.data());
    }
    ~TempDir() { fs::remove_all(path); }
};
} // namespace

TEST_CASE("a campaign lock is exclusive, names its holder, and is free again once released") {
    TempDir d;
    std::optional<campaign::CampaignLock> first;
    first.emplace(d.path);
    // flock conflicts between open files, in one process as between two: a second `infrarsi run`.
    const std::string says = "in use by pid " + std::to_string(::getpid());
    CHECK_THROWS_WITH_AS(campaign::CampaignLock{d.path}, doctest::Contains(says.c_str()), Error);
    std::string holder;
    CHECK_FALSE(campaign::CampaignLock::try_take(d.path, &holder).has_value());
    CHECK(holder == "pid " + std::to_string(::getpid()));
    first.reset();
    CHECK(campaign::CampaignLock::try_take(d.path, &holder).has_value());
}

TEST_CASE("the daemon skips a campaign another process drives") {
    TempDir d;
    const fs::path fx = INFRARSI_FIXTURES;
    fs::copy(fx / "toyload", d.path / "toyload", fs::copy_options::recursive);
    fs::copy(fx / "toyload-patches", d.path / "toyload-patches", fs::copy_options::recursive);
    fs::copy_file(fx / "toyload.contract.toml", d.path / "toyload.contract.toml");
    campaign::Campaign::init(d.path / "toyload.contract.toml", d.path / "root" / "busy");
    campaign::CampaignLock held(d.path / "root" / "busy");
    campaign::DaemonOptions o;
    o.root = d.path / "root";
    o.once = true;
    o.idle = 0s;
    o.run.verbose = false;
    o.run.scheduler = "local";
    o.run.accept_noise = true; // toyload is timed for real: a loaded host must not pause it
    std::atomic<bool> stop{false};
    CHECK(campaign::run_daemon(o, stop) == 0);
    campaign::Campaign busy(d.path / "root" / "busy");
    CHECK(busy.store().trials({}).empty()); // nothing submitted beside the holder
}

namespace {
// The stepload fixture with a build and a command that first write `id -u` to <contract dir>/uids: who ran
// them. One trial, batches of one, nothing to verify: a campaign of a few seconds.
fs::path uid_recording_contract(const fs::path& dir) {
    const fs::path fx = INFRARSI_FIXTURES;
    fs::copy(fx / "stepload", dir / "stepload", fs::copy_options::recursive);
    fs::copy(fx / "stepload-patches", dir / "stepload-patches", fs::copy_options::recursive);
    std::string text = test::read_file(fx / "stepload.contract.toml");
    // A build command has no {contract_dir}: the file by its path.
    const std::map<std::string, std::string> edits{
        {R"(build = [["mkdir", "-p", "{build}"]])",
         R"(build = [["sh", "-c", "id -u >>)" + (dir / "uids").string() + R"( && mkdir -p {build}"]])"},
        {R"(command = ["bash", "{source}/train.sh", "{build}", "{contract_dir}/runs.log"])",
         R"(command = ["sh", "-c", "id -u >>{contract_dir}/uids && exec bash {source}/train.sh {build} {contract_dir}/runs.log"])"},
        {"trials = 3\nbatch_size = 2", "trials = 1\nbatch_size = 1"},
        {"doctor = 3\nverify = 2\nverify_top = 1", "doctor = 2\nverify = 2\nverify_top = 0"}};
    for (const auto& [from, to] : edits) {
        const auto at = text.find(from);
        REQUIRE_MESSAGE(at != std::string::npos, "the stepload contract has no '" << from << "'");
        text.replace(at, from.size(), to);
    }
    std::ofstream(dir / "stepload.contract.toml") << text;
    return dir / "stepload.contract.toml";
}

campaign::DaemonOptions once_under(const fs::path& root) {
    campaign::DaemonOptions o;
    o.root = root;
    o.once = true;
    o.idle = 0s;
    o.run.verbose = false;
    o.run.scheduler = "local";
    o.run.accept_noise = true; // toyload is timed for real: a loaded host must not pause it
    o.run.poll = 20ms;
    return o;
}
} // namespace

TEST_CASE("an unexpected exception in one campaign marks it failed while the daemon finishes the others") {
    TempDir d;
    const auto contract = uid_recording_contract(d.path);
    campaign::Campaign::init(contract, d.path / "root" / "bad");
    campaign::Campaign::init(contract, d.path / "root" / "good");
    {
        // Internal state that is not JSON (a re-queued candidate): reading it throws nlohmann's parse_error,
        // not an infrarsi::Error.
        campaign::Campaign bad(d.path / "root" / "bad");
        bad.store().db().exec("INSERT INTO requeue(candidate, reason, attempt) VALUES ('{not json', 'r', 1)");
    }
    std::atomic<bool> stop{false};
    CHECK(campaign::run_daemon(once_under(d.path / "root"), stop) == 1);
    campaign::Campaign good(d.path / "root" / "good");
    CHECK(good.finished());
    campaign::Campaign bad(d.path / "root" / "bad");
    CHECK_FALSE(bad.finished());
}

namespace {
// The kinds of finding a bank holds (empty when there is no bank).
std::multiset<std::string> finding_kinds(const fs::path& bank) {
    std::multiset<std::string> kinds;
    if (!fs::exists(bank)) return kinds;
    bank::ExperienceBank b(bank.string());
    for (const auto& f : b.findings())
        kinds.insert(f.kind);
    return kinds;
}

// INFRARSI_BANK set to `value` (unset when empty) for the life of this object.
struct BankVariable {
    std::optional<std::string> saved;
    explicit BankVariable(const std::string& value) {
        if (const char* v = std::getenv("INFRARSI_BANK")) saved = v;
        value.empty() ? ::unsetenv("INFRARSI_BANK") : ::setenv("INFRARSI_BANK", value.c_str(), 1);
    }
    ~BankVariable() { saved ? ::setenv("INFRARSI_BANK", saved->c_str(), 1) : ::unsetenv("INFRARSI_BANK"); }
};
} // namespace

TEST_CASE("a campaign the daemon drives records into INFRARSI_BANK what `infrarsi run` records there") {
    TempDir d;
    const auto contract = uid_recording_contract(d.path);
    campaign::Campaign::init(contract, d.path / "alone");
    campaign::Campaign::init(contract, d.path / "root" / "driven");
    // `infrarsi run`'s way: the bank as default_bank_path() names it (orchestrator/infrarsi_main.cpp).
    {
        BankVariable v((d.path / "run-bank" / "bank.sqlite").string());
        auto o = once_under(d.path / "root").run;
        o.bank = bank::default_bank_path();
        campaign::Campaign(d.path / "alone").run(o);
    }
    // The daemon's, with no --bank (infrarsid_main.cpp: default_bank).
    {
        BankVariable v((d.path / "daemon-bank" / "bank.sqlite").string());
        auto o = once_under(d.path / "root");
        o.default_bank = true;
        std::atomic<bool> stop{false};
        CHECK(campaign::run_daemon(o, stop) == 0);
    }
    CHECK(campaign::Campaign(d.path / "root" / "driven", campaign::Campaign::Open::read_only).finished());
    const auto by_run = finding_kinds(d.path / "run-bank" / "bank.sqlite");
    const auto by_daemon = finding_kinds(d.path / "daemon-bank" / "bank.sqlite");
    CHECK(by_run.count("noise") == 1); // the doctor's noise prior, recorded by every finished campaign
    CHECK(by_daemon == by_run);
}

TEST_CASE(
    "a campaign finished with its findings in no bank gets them from the daemon, as from `infrarsi run`, "
    "and `infrarsi verify` records them as it finishes one") {
    TempDir d;
    const auto contract = uid_recording_contract(d.path);
    // Finished by a run with no bank (--no-bank, or a run stopped between its last stage and the bank): the
    // daemon skips a finished campaign, and so never recorded it, where `infrarsi run` on it did.
    campaign::Campaign::init(contract, d.path / "root" / "unrecorded");
    {
        auto o = once_under(d.path / "root").run;
        campaign::Campaign(d.path / "root" / "unrecorded").run(o);
    }
    REQUIRE(campaign::Campaign(d.path / "root" / "unrecorded").finished());
    const auto daemon_bank = d.path / "daemon-bank" / "bank.sqlite";
    {
        BankVariable v(daemon_bank.string());
        auto o = once_under(d.path / "root");
        o.default_bank = true;
        std::atomic<bool> stop{false};
        CHECK(campaign::run_daemon(o, stop) == 0);
        CHECK(finding_kinds(daemon_bank).count("noise") == 1);
        CHECK(campaign::run_daemon(o, stop) == 0); // once: a second scan adds nothing
        CHECK(finding_kinds(daemon_bank).count("noise") == 1);
    }
    // `infrarsi run --no-verify`, then `infrarsi verify`: the stage that finishes it records its findings.
    campaign::Campaign::init(contract, d.path / "verified");
    const auto verify_bank = d.path / "verify-bank" / "bank.sqlite";
    auto o = once_under(d.path / "root").run;
    o.bank = verify_bank.string();
    o.verify = false;
    campaign::Campaign(d.path / "verified").run(o);
    CHECK(finding_kinds(verify_bank).count("noise") == 1); // what it has after its search...
    CHECK(campaign::Campaign(d.path / "verified").store().campaign_run().bank_ingested ==
          store::BankIngested::Searched);
    {
        // The bank's file and its match of this hardware are the run's (schema 10), as the report shows them.
        campaign::Campaign c(d.path / "verified");
        const auto run = c.store().campaign_run();
        CHECK(run.bank_path == verify_bank.string());
        REQUIRE(run.bank_hardware);
        CHECK(run.bank_hardware->contains("entries"));
        CHECK_FALSE(c.store().meta("bank"));
        CHECK_FALSE(c.store().meta("bank_hardware"));
        const auto r = report::build(c);
        CHECK(r["bank"]["path"] == verify_bank.string());
        CHECK(r["bank"]["hardware"] == *run.bank_hardware);
    }
    o.verify = true;
    campaign::Campaign c(d.path / "verified");
    c.verify(o);
    CHECK(c.finished());
    CHECK(c.store().campaign_run().bank_ingested ==
          store::BankIngested::Done); // ...and the rest once verified, nothing twice
    CHECK(finding_kinds(verify_bank).count("noise") == 1);
}

TEST_CASE("a root daemon drives a campaign a user planted under its root as that user: its build and trials "
          "never run as root") {
    const auto nobody = lookup_account(65534);
    if (::geteuid() != 0 || !nobody) {
        MESSAGE("skipped: needs root and uid 65534");
        return;
    }
    test::TempDir d;
    REQUIRE(::chmod(d.path.c_str(), 0755) == 0);
    const auto src = d.path / "src", root = d.path / "root", planted = root / "alice";
    fs::create_directories(src);
    const auto contract = uid_recording_contract(src);
    fs::create_directories(planted);
    REQUIRE(::chmod(root.c_str(), 0755) == 0);
    for (const auto& e : fs::recursive_directory_iterator(src))
        REQUIRE(::lchown(e.path().c_str(), nobody->uid, nobody->gid) == 0);
    for (const auto& p : {src, planted})
        REQUIRE(::chown(p.c_str(), nobody->uid, nobody->gid) == 0);
    // The attack: the user makes the directory the tune intake gave them a campaign (`infrarsi init --dir`).
    const auto init = run_as(*nobody, [&] {
        campaign::Campaign::init(contract, planted);
        return std::string();
    });
    REQUIRE_MESSAGE(init.status == 0, init.message);

    // No bank named: the user's own, in their directory under the root, written as them (nobody's home,
    // /nonexistent, could hold none).
    const char* bank = std::getenv("INFRARSI_BANK");
    const std::string saved = bank ? bank : "";
    ::unsetenv("INFRARSI_BANK");
    auto options = once_under(root);
    options.default_bank = true;
    std::atomic<bool> stop{false};
    CHECK(campaign::run_daemon(options, stop) == 0);
    bank ? ::setenv("INFRARSI_BANK", saved.c_str(), 1) : ::unsetenv("INFRARSI_BANK");
    CHECK(fs::is_regular_file(planted / "bank.sqlite")); // and nobody's, with the rest (below)
    const auto uids = test::read_file(src / "uids");
    INFO("uids: " << uids);
    CHECK(uids.find("65534\n65534\n") != std::string::npos); // the build and at least one trial ran...
    CHECK(uids.find("0\n") != 0);                            // ...and nothing as root
    CHECK(uids.find("\n0\n") == std::string::npos);
    CHECK(campaign::Campaign(planted, campaign::Campaign::Open::read_only).finished());
    for (const auto& e : fs::recursive_directory_iterator(planted)) {
        struct stat st {};
        REQUIRE(::lstat(e.path().c_str(), &st) == 0);
        INFO(e.path());
        CHECK(st.st_uid == nobody->uid);
    }
    // The campaign's findings are in that bank, the doctor's noise prior at least (read as the user: root
    // opening it would leave root's -wal and -shm files in the user's directory).
    const auto kinds = run_as_status(*nobody, [&] {
        std::string names;
        for (const auto& k : finding_kinds(planted / "bank.sqlite"))
            names += k + " ";
        return AsUser{0, names};
    });
    INFO("findings: " << kinds.message);
    CHECK(kinds.status == 0);
    CHECK(kinds.message.find("noise ") != std::string::npos);
}

TEST_CASE(
    "a root daemon drives no campaign of root's that a user could change: a directory others may write, "
    "a store or an entry a user owns, a contract in a user's directory") {
    const auto nobody = lookup_account(65534);
    if (::geteuid() != 0 || !nobody) {
        MESSAGE("skipped: needs root and uid 65534");
        return;
    }
    test::TempDir d;
    const auto contract = uid_recording_contract(d.path);
    const auto root = d.path / "root";
    for (const char* name : {"open", "userdb", "userfile", "good"})
        campaign::Campaign::init(contract, root / name);
    // Root's campaign of a contract and tree in a user's directory: root would build the user's files.
    const auto alice = d.path / "alice";
    fs::create_directories(alice);
    campaign::Campaign::init(uid_recording_contract(alice), root / "usersrc");
    REQUIRE(::chown(alice.c_str(), nobody->uid, nobody->gid) == 0);
    REQUIRE(::chmod(root.c_str(), 0755) == 0);
    REQUIRE(::chmod((root / "open").c_str(), 0777) == 0);
    REQUIRE(::chown((root / "userdb" / "campaign.db").c_str(), nobody->uid, nobody->gid) == 0);
    std::ofstream(root / "userfile" / "planted") << "x";
    REQUIRE(::chown((root / "userfile" / "planted").c_str(), nobody->uid, nobody->gid) == 0);

    CHECK(campaign::root_campaign_problem(root / "open").find("writable by others") != std::string::npos);
    CHECK(campaign::root_campaign_problem(root / "userdb").find("campaign.db is owned by uid 65534") !=
          std::string::npos);
    CHECK(campaign::root_campaign_problem(root / "userfile").find("planted is owned by uid 65534") !=
          std::string::npos);
    CHECK(campaign::root_campaign_problem(root / "usersrc").find("uid 65534 controls") != std::string::npos);
    CHECK(campaign::root_campaign_problem(root / "good").empty());

    std::atomic<bool> stop{false};
    CHECK(campaign::run_daemon(once_under(root), stop) == 0);
    for (const char* name : {"open", "userdb", "userfile", "usersrc"}) {
        INFO(name);
        CHECK(
            campaign::Campaign(root / name, campaign::Campaign::Open::read_only).store().trials({}).empty());
    }
    CHECK(campaign::Campaign(root / "good", campaign::Campaign::Open::read_only).finished());
    // A root others may write: nothing under it is root's to drive.
    REQUIRE(::chmod(root.c_str(), 0777) == 0);
    CHECK(campaign::root_campaign_problem(root / "good").find("writable by others") != std::string::npos);
}
