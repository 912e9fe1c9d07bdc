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

TEST_CASE("accounts: a known uid has its name and home; an unknown one has none") {
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
