// The daemon's intake of tune requests (campaign/tune_intake.hpp): which requests become campaigns, which are
// refused and why, which are left for another user's daemon, and that nothing starts twice.
#include "campaign/campaign.hpp"
#include "campaign/tune_intake.hpp"
#include "report/report.hpp"
#include "trial/tune_request.hpp"
#include "util/privilege.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace infrarsi;

namespace {

std::string slurp(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// A spool with tune/, a campaign root, and a user's toyload contract and job script. The user is this
// process's uid; as root (CI) it is another uid that owns the files, so the intake acts as a user.
struct TuneSpool {
    fs::path dir = fs::temp_directory_path() / ("infrarsi-tune-ut-" + std::to_string(::getpid()));
    fs::path spool = dir / "spool", tune = spool / "tune", root = dir / "campaigns", user_dir = dir / "alice";
    fs::path contract = user_dir / "toyload.contract.toml", script = user_dir / "job.sbatch";
    uid_t user = ::getuid() == 0 ? 4242 : ::getuid();

    TuneSpool() {
        fs::remove_all(dir);
        fs::create_directories(tune);
        fs::create_directories(user_dir);
        const fs::path fx = INFRARSI_FIXTURES;
        fs::copy(fx / "toyload", user_dir / "toyload", fs::copy_options::recursive);
        fs::copy(fx / "toyload-patches", user_dir / "toyload-patches", fs::copy_options::recursive);
        fs::copy_file(fx / "toyload.contract.toml", contract);
        std::ofstream(script) << "#!/bin/bash\nexec ./toyload/run.sh\n";
        if (::getuid() == 0) {
            REQUIRE(::chown(contract.c_str(), user, user) == 0);
            REQUIRE(::chown(script.c_str(), user, user) == 0);
        }
    }
    ~TuneSpool() { fs::remove_all(dir); }

    trial::TuneRequest request(std::uint32_t job_id) const {
        trial::TuneRequest r;
        r.job_id = job_id;
        r.uid = user;
        r.user = "alice";
        r.script = script.string();
        r.contract = contract.string();
        r.submit_dir = user_dir.string();
        r.job_name = "job.sbatch";
        r.node = "n1";
        r.time = "2026-12-02T10:08:20Z";
        r.plugin_version = "0.1.0";
        return r;
    }
    void write(const trial::TuneRequest& r) const {
        std::ofstream(tune / (std::to_string(r.job_id) + ".json")) << trial::to_json(r).dump();
    }
    campaign::TuneIntake scan(uid_t as) const { return campaign::scan_tune_requests(spool, root, as); }
    campaign::TuneIntake scan() const { return scan(user); }
};

} // namespace

TEST_CASE("an accepted tune request becomes campaign <root>/tune-<job>, recorded in its store, and moves to "
          "done/") {
    TuneSpool t;
    const auto r = t.request(17);
    t.write(r);
    auto in = t.scan();
    REQUIRE(in.requests.size() == 1);
    const auto& h = in.requests[0];
    CHECK(h.action == campaign::TuneAction::Started);
    CHECK(h.job_id == 17);
    CHECK(h.moved);
    CHECK(h.campaign == t.root / "tune-17");
    CHECK(fs::exists(t.root / "tune-17" / "campaign.db"));
    CHECK(!fs::exists(t.tune / "17.json"));
    CHECK(fs::exists(t.tune / "done" / "17.json"));
    CHECK((fs::status(t.tune / "done").permissions() & fs::perms::all) == fs::perms(0755));
    CHECK(!fs::exists(t.root / ".tune-intake" / "17")); // the staging directory is gone

    campaign::Campaign c(t.root / "tune-17");
    CHECK(c.store().meta("tune_job_id") == "17");
    CHECK(c.store().meta("tune_script") == t.script.string());
    CHECK(c.store().meta("tune_user") == "alice");
    CHECK(trial::tune_request_from_json(nlohmann::json::parse(*c.store().meta("tune_request"))) == r);
    auto status = report::status(c);
    REQUIRE(status.contains("tune"));
    CHECK(status["tune"]["job_id"] == 17);
    CHECK(status["tune"]["script"] == t.script.string());
    CHECK(report::render_status(status).find("tune request: job 17 (" + t.script.string() + ")") !=
          std::string::npos);
}

TEST_CASE(
    "a tune request is never started twice: a second scan, or the request back in tune/, finds it started") {
    TuneSpool t;
    t.write(t.request(18));
    REQUIRE(t.scan().requests.size() == 1);
    CHECK(t.scan().requests.empty());                               // the second scan: nothing new
    fs::copy_file(t.tune / "done" / "18.json", t.tune / "18.json"); // e.g. a daemon killed before the move
    auto in = t.scan();
    REQUIRE(in.requests.size() == 1);
    CHECK(in.requests[0].action == campaign::TuneAction::AlreadyStarted);
    CHECK(in.requests[0].moved);
    CHECK(!fs::exists(t.tune / "18.json"));
    int campaigns = 0;
    for (const auto& e : fs::directory_iterator(t.root))
        campaigns += e.path().filename().string().starts_with("tune-");
    CHECK(campaigns == 1);
}

TEST_CASE(
    "a spool the daemon cannot move requests in: the campaign starts once and the request stays, said why") {
    TuneSpool t;
    std::ofstream(t.tune / "done")
        << "not a directory\n"; // stands in for a root-owned tune/ a user cannot write
    t.write(t.request(19));
    auto first = t.scan();
    REQUIRE(first.requests.size() == 1);
    CHECK(first.requests[0].action == campaign::TuneAction::Started);
    CHECK(!first.requests[0].moved);
    CHECK(first.requests[0].move_error.find("not a directory") != std::string::npos);
    CHECK(campaign::describe(first.requests[0]).find("it stays in tune/") != std::string::npos);
    CHECK(fs::exists(t.tune / "19.json"));
    auto second = t.scan();
    REQUIRE(second.requests.size() == 1);
    CHECK(second.requests[0].action == campaign::TuneAction::AlreadyStarted);
}

TEST_CASE("another user's tune request is left in place for that user's daemon") {
    TuneSpool t;
    auto r = t.request(20);
    r.uid = t.user + 1;
    t.write(r);
    auto in = t.scan();
    REQUIRE(in.requests.size() == 1);
    CHECK(in.requests[0].action == campaign::TuneAction::OtherUser);
    CHECK(!in.requests[0].moved);
    CHECK(fs::exists(t.tune / "20.json"));
    CHECK(!fs::exists(t.root / "tune-20"));
}

TEST_CASE("a root daemon starts a user's campaign as that user, in <root>/<user>/, never as root") {
    if (::geteuid() != 0) {
        MESSAGE("skipped: acting for another user needs root");
        return;
    }
    const auto nobody = lookup_account(65534);
    if (!nobody) {
        MESSAGE("skipped: no passwd entry for uid 65534");
        return;
    }
    TuneSpool t;
    for (const auto& p : {t.contract, t.script})
        REQUIRE(::chown(p.c_str(), nobody->uid, nobody->gid) == 0);
    auto r = t.request(21);
    r.uid = nobody->uid;
    t.write(r);
    auto root_request = t.request(22);
    root_request.uid = 0;
    t.write(root_request);
    auto unknown = t.request(23);
    unknown.uid = 4242424; // no passwd entry
    t.write(unknown);

    const auto in = t.scan(0);
    REQUIRE(in.problem.empty());
    REQUIRE(in.requests.size() == 3);
    const auto& started = in.requests[0];
    CHECK(started.action == campaign::TuneAction::Started);
    const auto user_dir = t.root / nobody->name;
    CHECK(started.campaign == user_dir / "tune-21");
    CHECK(fs::exists(t.tune / "done" / "21.json"));
    struct stat st {};
    REQUIRE(::stat(user_dir.c_str(), &st) == 0);
    CHECK(st.st_uid == nobody->uid);
    CHECK((st.st_mode & 07777) == 0700);
    // Everything the campaign made is the user's: it was made by a process that ran as the user.
    for (const auto& e : fs::recursive_directory_iterator(user_dir)) {
        REQUIRE(::lstat(e.path().c_str(), &st) == 0);
        INFO(e.path());
        CHECK(st.st_uid == nobody->uid);
    }
    CHECK(in.requests[1].action == campaign::TuneAction::Refused);
    CHECK(in.requests[1].reason.find("never runs as root") != std::string::npos);
    CHECK(in.requests[2].action == campaign::TuneAction::Refused);
    CHECK(in.requests[2].reason.find("no passwd entry") != std::string::npos);
    CHECK(fs::exists(t.tune / "refused" / "22.reason"));

    // A contract the user cannot read (root's, 0600) is refused: it is opened as the user, not as root.
    const auto secret = t.user_dir / "secret.contract.toml";
    fs::copy_file(t.contract, secret);
    REQUIRE(::chown(secret.c_str(), nobody->uid, nobody->gid) == 0);
    REQUIRE(::chmod(t.user_dir.c_str(), 0700) == 0); // root's directory: the user cannot reach the file
    auto hidden = t.request(24);
    hidden.uid = nobody->uid;
    hidden.contract = secret.string();
    t.write(hidden);
    const auto again = t.scan(0);
    REQUIRE(again.requests.size() == 1);
    CHECK(again.requests[0].action == campaign::TuneAction::Refused);
    CHECK(again.requests[0].reason.find("Permission denied") != std::string::npos);
    CHECK(!fs::exists(user_dir / "tune-24"));
}

TEST_CASE("a root daemon's root must be root's and writable by nobody else") {
    if (::geteuid() != 0) {
        MESSAGE("skipped: needs root");
        return;
    }
    TuneSpool t;
    fs::create_directories(t.root);
    REQUIRE(::chmod(t.root.c_str(), 0777) == 0);
    t.write(t.request(25));
    const auto in = t.scan(0);
    CHECK(in.requests.empty());
    CHECK(in.problem.find("writable by nobody else") != std::string::npos);
    CHECK(fs::exists(t.tune / "25.json"));
}

TEST_CASE("a symlinked contract, or a contract or script the request's user does not own, is refused") {
    TuneSpool t;
    fs::create_symlink(t.contract, t.user_dir / "link.contract.toml");
    auto r = t.request(22);
    r.contract = (t.user_dir / "link.contract.toml").string();
    t.write(r);
    auto in = t.scan();
    REQUIRE(in.requests.size() == 1);
    CHECK(in.requests[0].action == campaign::TuneAction::Refused);
    CHECK(in.requests[0].reason.find("is a symlink") != std::string::npos);
    CHECK(slurp(t.tune / "refused" / "22.reason").find("is a symlink") != std::string::npos);
    CHECK(!fs::exists(t.root / "tune-22"));

    if (::getuid() != 0) {
        MESSAGE("skipped: a contract owned by another uid needs root to chown");
        return;
    }
    REQUIRE(::chown(t.script.c_str(), 0, 0) == 0);
    t.write(t.request(23));
    in = t.scan();
    REQUIRE(in.requests.size() == 1);
    CHECK(in.requests[0].action == campaign::TuneAction::Refused);
    CHECK(in.requests[0].reason.find("owned by uid 0, not by the request's uid") != std::string::npos);
    REQUIRE(::chown(t.script.c_str(), t.user, t.user) == 0);
    REQUIRE(::chown(t.contract.c_str(), 0, 0) == 0);
    t.write(t.request(24));
    in = t.scan();
    REQUIRE(in.requests.size() == 1);
    CHECK(in.requests[0].reason.find("contract") != std::string::npos);
    CHECK(!fs::exists(t.root / "tune-23"));
    CHECK(!fs::exists(t.root / "tune-24"));
}

TEST_CASE("a malformed tune request, or one filed under another job id, is refused with the reason") {
    TuneSpool t;
    std::ofstream(t.tune / "25.json") << "{\"format\": \"infrarsi-tune-request/1\", ";
    auto r = t.request(27);
    std::ofstream(t.tune / "26.json") << trial::to_json(r).dump(); // says job 27
    std::ofstream(t.tune / "notes.txt") << "not a request\n";
    auto in = t.scan();
    REQUIRE(in.requests.size() == 2);
    for (const auto& h : in.requests) {
        CHECK(h.action == campaign::TuneAction::Refused);
        CHECK(h.moved);
    }
    CHECK(slurp(t.tune / "refused" / "25.reason").find("not valid JSON") != std::string::npos);
    CHECK(slurp(t.tune / "refused" / "26.reason").find("named for job 26") != std::string::npos);
    CHECK(fs::exists(t.tune / "notes.txt"));
    CHECK(!fs::exists(t.root));
}

TEST_CASE("without the spool's tune/ the intake does nothing, a symlinked tune/ is not followed") {
    TuneSpool t;
    fs::remove_all(t.tune);
    auto in = t.scan();
    CHECK(in.requests.empty());
    CHECK(in.problem.empty());
    fs::create_directories(t.dir / "elsewhere");
    std::ofstream(t.dir / "elsewhere" / "30.json") << trial::to_json(t.request(30)).dump();
    fs::create_directory_symlink(t.dir / "elsewhere", t.tune);
    in = t.scan();
    CHECK(in.requests.empty());
    CHECK(in.problem.find("not a directory") != std::string::npos);
    CHECK(!fs::exists(t.root / "tune-30"));
}

TEST_CASE("a request file the plugin did not write (another user's, or one others may write) is refused") {
    TuneSpool t;
    t.write(t.request(32));
    REQUIRE(::chmod((t.tune / "32.json").c_str(), 0666) == 0);
    auto in = t.scan();
    REQUIRE(in.requests.size() == 1);
    CHECK(in.requests[0].action == campaign::TuneAction::Refused);
    CHECK(in.requests[0].reason.find("writable by others") != std::string::npos);
    CHECK(!fs::exists(t.root / "tune-32"));
    if (::geteuid() != 0) {
        MESSAGE("skipped: a request of another uid needs root to chown");
        return;
    }
    // As root: a request a user planted (a spool a user could write into) names whatever uid it likes.
    t.write(t.request(33));
    REQUIRE(::chown((t.tune / "33.json").c_str(), 65534, 65534) == 0);
    in = t.scan(0);
    REQUIRE(in.requests.size() == 1);
    CHECK(in.requests[0].action == campaign::TuneAction::Refused);
    CHECK(in.requests[0].reason.find("owned by uid 65534, not by root") != std::string::npos);
    // Its reason is as private as the request: root's, 0640, in the request's group.
    struct stat st {};
    REQUIRE(::lstat((t.tune / "refused" / "33.reason").c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0640);
    CHECK(st.st_gid == 65534);
}

TEST_CASE("a tune/ on a path others may change is not read") {
    TuneSpool t;
    t.write(t.request(34));
    REQUIRE(::chmod(t.spool.c_str(), 0777) == 0);
    const auto in = t.scan();
    CHECK(in.requests.empty());
    CHECK(in.problem.find("writable by others") != std::string::npos);
    CHECK(fs::exists(t.tune / "34.json"));
}
