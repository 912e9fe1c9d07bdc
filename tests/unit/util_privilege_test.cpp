// Acting as a user (util/privilege.hpp): the work runs in a child that dropped to the user for good.
#include "util/error.hpp"
#include "util/privilege.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace infrarsi;

TEST_CASE("accounts: a known uid has its name and home, an unknown one has none") {
    const auto me = lookup_account(::getuid());
    REQUIRE(me);
    CHECK(me->uid == ::getuid());
    CHECK(!me->name.empty());
    CHECK(!lookup_account(4242424));
}

TEST_CASE("acting as root is refused") {
    Account root;
    CHECK_THROWS_AS(drop_to(root), Error);
}

TEST_CASE("run_as: the work runs as the user, who cannot regain root nor read root's files") {
    if (::geteuid() != 0) {
        MESSAGE("skipped: dropping to another user needs root");
        return;
    }
    const auto nobody = lookup_account(65534);
    REQUIRE(nobody);
    const auto secret =
        std::filesystem::temp_directory_path() / ("infrarsi-secret-" + std::to_string(::getpid()));
    std::ofstream(secret) << "root only\n";
    REQUIRE(::chmod(secret.c_str(), 0600) == 0);
    const auto r = run_as(*nobody, [&]() -> std::string {
        if (::getuid() != 65534 || ::geteuid() != 65534 || ::getgid() != nobody->gid) return "wrong ids";
        if (::setuid(0) == 0) return "regained root";
        if (std::ifstream(secret).good()) return "read root's file";
        if (std::string(std::getenv("HOME")) != nobody->home) return "HOME not the user's";
        return {};
    });
    std::filesystem::remove(secret);
    CHECK(r.status == 0);
    CHECK(r.message.empty());

    const auto failed = run_as(*nobody, [] { return std::string("refused: because"); });
    CHECK(failed.status == 1);
    CHECK(failed.message == "refused: because");
    const auto threw = run_as(*nobody, []() -> std::string { throw Error("it threw"); });
    CHECK(threw.status == 127);
    CHECK(threw.message.find("it threw") != std::string::npos);
}

namespace {
// A fresh directory under /tmp (root's and sticky) that only this process's uid may change.
struct Scratch {
    std::filesystem::path path;
    Scratch() {
        std::string t = (std::filesystem::temp_directory_path() / "infrarsi-pathctl-XXXXXX").string();
        path = ::mkdtemp(t.data());
    }
    ~Scratch() { std::filesystem::remove_all(path); }
};
} // namespace

TEST_CASE("path_control: a path only root (or the trusted uid) may change is root's, from / down, links "
          "included") {
    Scratch s;
    const uid_t me = ::geteuid();
    const auto a = s.path / "a";
    std::filesystem::create_directories(a / "b");
    REQUIRE(::chmod(a.c_str(), 0755) == 0);
    CHECK(path_control(a / "b", me).root_only());
    // A link the trusted uid made, in a directory only it may change, is followed and the target judged.
    std::filesystem::create_directory_symlink(a, s.path / "link");
    CHECK(path_control(s.path / "link" / "b", me).root_only());
    // A directory others may write: anyone could swap what is under it, or the path itself.
    REQUIRE(::chmod(a.c_str(), 0777) == 0);
    CHECK(path_control(a / "b", me).why.find("writable by others") != std::string::npos);
    CHECK(path_control(a, me).why.find("writable by others") != std::string::npos);
    CHECK(path_control(s.path / "link" / "b", me).why.find("writable by others") != std::string::npos);
    REQUIRE(::chmod(a.c_str(), 0775) == 0); // a group is others too
    CHECK(!path_control(a / "b", me).why.empty());
    // Sticky: only an entry's owner may replace it, so the entry's owner decides.
    REQUIRE(::chmod(a.c_str(), 01777) == 0);
    CHECK(path_control(a / "b", me).root_only());
    CHECK(path_control(a / "b" / ".." / "b", me).root_only());
    CHECK(path_control(s.path / "missing", me).why.find("No such file") != std::string::npos);
    CHECK(path_control("relative/path", me).why.find("not an absolute path") != std::string::npos);
    std::filesystem::create_symlink("loop", s.path / "loop");
    CHECK(path_control(s.path / "loop" / "x", me).why.find("too many levels") != std::string::npos);
}

TEST_CASE("path_control: the first directory or link on the way that a user owns makes the path that "
          "user's, whatever is below it") {
    if (::geteuid() != 0) {
        MESSAGE("skipped: a directory of another uid needs root to chown");
        return;
    }
    Scratch s;
    REQUIRE(::chmod(s.path.c_str(), 0755) == 0);
    const auto user = s.path / "alice";
    std::filesystem::create_directories(user / "campaign");
    REQUIRE(::chown(user.c_str(), 65534, 65534) == 0);
    CHECK(path_control(s.path).root_only());
    auto pc = path_control(user / "campaign"); // root's directory inside the user's: still the user's
    CHECK(pc.why.empty());
    CHECK(pc.uid == 65534);
    CHECK(path_control(user).uid == 65534);
    // A user's link is not followed: the path is theirs, wherever the link points (here, root's /etc).
    std::filesystem::create_directory_symlink("/etc", s.path / "etc-link");
    REQUIRE(::lchown((s.path / "etc-link").c_str(), 65534, 65534) == 0);
    pc = path_control(s.path / "etc-link" / "passwd");
    CHECK(pc.why.empty());
    CHECK(pc.uid == 65534);
    // Root's link to it: followed, and the target is the user's.
    std::filesystem::create_directory_symlink(user, s.path / "root-link");
    CHECK(path_control(s.path / "root-link" / "campaign").uid == 65534);
    // In a sticky directory the user's entry is the user's; root's entry stays root's.
    const auto sticky = s.path / "tmp";
    std::filesystem::create_directories(sticky / "roots");
    std::filesystem::create_directories(sticky / "users");
    REQUIRE(::chmod(sticky.c_str(), 01777) == 0);
    REQUIRE(::chown((sticky / "users").c_str(), 65534, 65534) == 0);
    CHECK(path_control(sticky / "roots").root_only());
    CHECK(path_control(sticky / "users").uid == 65534);
    // The trusted uid is a user's own daemon: its own directories are as good as root's to it.
    CHECK(path_control(user / "campaign", 65534).root_only());
}

TEST_CASE("account_to_act_as: root on a path a user controls becomes that user, on one only root controls "
          "stays root, on one no one user controls opens nothing") {
    if (::geteuid() != 0) {
        CHECK_FALSE(account_to_act_as("/")); // not root: nothing to drop
        MESSAGE("skipped: the rest needs root to chown");
        return;
    }
    Scratch s;
    REQUIRE(::chmod(s.path.c_str(), 0755) == 0);
    CHECK_FALSE(account_to_act_as(s.path));
    CHECK_FALSE(account_to_act_as(s.path / "new" / "campaign")); // to be made where only root may write
    const auto user = s.path / "nobody";
    std::filesystem::create_directories(user / "c");
    REQUIRE(::chown(user.c_str(), 65534, 65534) == 0);
    for (const auto& p : {user, user / "c", user / "not-yet" / "c"}) {
        CAPTURE(p);
        const auto a = account_to_act_as(p);
        REQUIRE(a);
        CHECK(a->uid == 65534);
    }
    const auto shared = s.path / "shared";
    std::filesystem::create_directories(shared / "c");
    REQUIRE(::chmod(shared.c_str(), 0775) == 0);
    CHECK_THROWS_WITH_AS(account_to_act_as(shared / "c"), doctest::Contains("not opened as root"), Error);
    // A sticky directory of root's (/tmp): a campaign root makes there stays root's; a user's entry is
    // theirs.
    const auto sticky = s.path / "tmp";
    std::filesystem::create_directories(sticky / "users");
    REQUIRE(::chmod(sticky.c_str(), 01777) == 0);
    REQUIRE(::chown((sticky / "users").c_str(), 65534, 65534) == 0);
    CHECK_FALSE(account_to_act_as(sticky / "new-campaign"));
    CHECK(account_to_act_as(sticky / "users" / "c")->uid == 65534);
    REQUIRE(::chmod(sticky.c_str(), 0777) == 0); // not sticky: anyone may replace what root makes there
    CHECK_THROWS_WITH_AS(account_to_act_as(sticky / "new-campaign"), doctest::Contains("writable by others"),
                         Error);
    const auto orphan = s.path / "orphan";
    std::filesystem::create_directories(orphan);
    REQUIRE(::chown(orphan.c_str(), 4000000001u, 4000000001u) == 0); // a uid with no passwd entry
    CHECK_THROWS_WITH_AS(account_to_act_as(orphan), doctest::Contains("no passwd entry"), Error);
}

TEST_CASE("run_as_status: the work's own status and message come back") {
    if (::geteuid() != 0) {
        MESSAGE("skipped: dropping to another user needs root");
        return;
    }
    const auto nobody = lookup_account(65534);
    REQUIRE(nobody);
    const auto r = run_as_status(*nobody, [] { return AsUser{3, "three"}; });
    CHECK(r.status == 3);
    CHECK(r.message == "three");
}
