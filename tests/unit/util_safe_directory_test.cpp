// The one safe-directory check (util/safe_directory.hpp): the spool, a site daemon's root and the tune
// intake's directories are made with their mode when missing and refused when anyone but root (or the
// trusted uid) could swap them or plant a name in them.
#include "util/safe_directory.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace infrarsi;
namespace fs = std::filesystem;

namespace {
// A fresh 0755 directory under /tmp that only this process's uid (and root) may change.
struct Scratch {
    fs::path path = fs::temp_directory_path() / ("infrarsi-safe-dir-" + std::to_string(::getpid()));
    Scratch() {
        fs::remove_all(path);
        fs::create_directory(path);
        ::chmod(path.c_str(), 0755);
    }
    ~Scratch() { fs::remove_all(path); }
};
SafeDirectory rules(std::optional<mode_t> create = {}) {
    return {"spool", ::geteuid(), create};
}
mode_t mode_of(const fs::path& p) {
    struct stat st {};
    REQUIRE(::lstat(p.c_str(), &st) == 0);
    return st.st_mode & 07777;
}
bool says(const std::string& problem, const char* what) {
    return problem.find(what) != std::string::npos;
}
} // namespace

TEST_CASE("a missing safe directory is made with exactly its mode whatever the umask, and is then safe") {
    Scratch s;
    const auto dir = s.path / "spool";
    const mode_t old = ::umask(0);
    CHECK(safe_directory_problem(dir, rules(0755)).empty());
    ::umask(old);
    CHECK(mode_of(dir) == 0755);
    CHECK(safe_directory_problem(dir, rules()).empty()); // twice is fine, and without creating
}

TEST_CASE("a missing directory is an error where it is not to be made, and a relative path is refused") {
    Scratch s;
    CHECK(says(safe_directory_problem(s.path / "absent", rules()), "No such file"));
    CHECK(!fs::exists(s.path / "absent"));
    CHECK(says(safe_directory_problem("relative/spool", rules(0755)), "not an absolute path"));
}

TEST_CASE("a symlink to a good directory is refused, not followed") {
    Scratch s;
    fs::create_directory(s.path / "real");
    ::chmod((s.path / "real").c_str(), 0755);
    fs::create_directory_symlink(s.path / "real", s.path / "link");
    const auto p = safe_directory_problem(s.path / "link", rules(0755));
    CHECK(says(p, "spool is a symlink"));
    CHECK(says(p, "not a directory"));
    std::ofstream(s.path / "file") << "x";
    CHECK(says(safe_directory_problem(s.path / "file", rules(0755)), "spool is not a directory"));
}

TEST_CASE("a world- or group-writable directory is refused, sticky or not, and a sticky one alone too") {
    Scratch s;
    const auto dir = s.path / "open";
    fs::create_directory(dir);
    for (const mode_t m : {0777, 01777, 0775}) {
        REQUIRE(::chmod(dir.c_str(), m) == 0);
        CHECK(says(safe_directory_problem(dir, rules()), "spool is writable by others"));
    }
    REQUIRE(::chmod(dir.c_str(), 01755) == 0);
    CHECK(says(safe_directory_problem(dir, rules()), "sticky bit"));
    // Below a world-writable parent, even a good directory is refused: its parent could swap it.
    REQUIRE(::chmod(dir.c_str(), 0777) == 0);
    fs::create_directory(dir / "inner");
    REQUIRE(::chmod((dir / "inner").c_str(), 0755) == 0);
    CHECK(says(safe_directory_problem(dir / "inner", rules()), "path can be changed by others"));
}

TEST_CASE("a directory of another uid than root and the trusted one is refused") {
    Scratch s;
    const auto dir = s.path / "theirs";
    fs::create_directory(dir);
    REQUIRE(::chmod(dir.c_str(), 0755) == 0);
    // Trusting no one but root: this process's own directory is someone else's (unless it is root).
    if (::geteuid() != 0) {
        CHECK(says(safe_directory_problem(dir, {"spool", 0, {}}), "controlled by uid"));
        MESSAGE("skipped: a directory of another uid needs root to chown");
        return;
    }
    REQUIRE(::chown(dir.c_str(), 65534, 65534) == 0);
    CHECK(says(safe_directory_problem(dir, rules()), "spool is owned by uid 65534, not by root"));
    // Trusted, it is the caller's own.
    CHECK(safe_directory_problem(dir, {"spool", 65534, {}}).empty());
}
