// The spool's safety rules: created 0755, symlinks and open directories refused (on its whole path), markers
// claimed once, a job's own files private to its group.
#include "spool.hpp"

#include "util/error.hpp"

#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace infrarsi;
using namespace infrarsi::spank;
namespace fs = std::filesystem;

namespace {
fs::path temp_dir(const char* name) {
    auto d = fs::temp_directory_path() /
             (std::string("infrarsi-spank-") + name + "-" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}
mode_t mode_of(const fs::path& p) {
    struct stat st {};
    REQUIRE(::lstat(p.c_str(), &st) == 0);
    return st.st_mode & 07777;
}
} // namespace

TEST_CASE("an absent spool is created 0755 whatever the umask") {
    auto d = temp_dir("create");
    mode_t old = ::umask(0);
    ensure_safe_dir((d / "spool").string());
    ::umask(old);
    CHECK(mode_of(d / "spool") == 0755);
    ensure_safe_dir((d / "spool").string()); // twice is fine
    fs::remove_all(d);
}

TEST_CASE("a spool that is a symlink, a file, or writable by others (even sticky) is refused") {
    auto d = temp_dir("refuse");
    fs::create_directories(d / "real");
    fs::create_directory_symlink(d / "real", d / "link");
    CHECK_THROWS_WITH_AS(ensure_safe_dir((d / "link").string()), doctest::Contains("symlink"), Error);
    std::ofstream(d / "file") << "x";
    CHECK_THROWS_WITH_AS(ensure_safe_dir((d / "file").string()), doctest::Contains("not a directory"), Error);
    fs::create_directories(d / "open");
    ::chmod((d / "open").c_str(), 0777);
    CHECK_THROWS_WITH_AS(ensure_safe_dir((d / "open").string()), doctest::Contains("writable by others"),
                         Error);
    // Sticky does not make it safe: anyone can still plant a FIFO or a symlink under a name root will open.
    ::chmod((d / "open").c_str(), 01777);
    CHECK_THROWS_WITH_AS(ensure_safe_dir((d / "open").string()), doctest::Contains("writable by others"),
                         Error);
    ::chmod((d / "open").c_str(), 0775);
    CHECK_THROWS_WITH_AS(ensure_safe_dir((d / "open").string()), doctest::Contains("writable by others"),
                         Error);
    ::chmod((d / "open").c_str(), 01755);
    CHECK_THROWS_WITH_AS(ensure_safe_dir((d / "open").string()), doctest::Contains("sticky"), Error);
    ::chmod((d / "open").c_str(), 0755);
    CHECK_NOTHROW(ensure_safe_dir((d / "open").string()));
    CHECK_THROWS_AS(ensure_safe_dir("relative"), Error);
    CHECK_THROWS_AS(ensure_safe_dir((d / "no/such/parent").string()), Error);
    fs::remove_all(d);
}

TEST_CASE("a spool under a directory a user or others may change is refused, before anything is made there") {
    auto d = temp_dir("parent");
    fs::create_directories(d / "open");
    ::chmod((d / "open").c_str(), 0777); // anyone could swap open/spool for a link between check and use
    CHECK_THROWS_WITH_AS(ensure_safe_dir((d / "open" / "spool").string()),
                         doctest::Contains("changed by others"), Error);
    CHECK_FALSE(fs::exists(d / "open" / "spool"));
    if (::geteuid() == 0) {
        fs::create_directories(d / "user");
        REQUIRE(::chown((d / "user").c_str(), 65534, 65534) == 0);
        CHECK_THROWS_WITH_AS(ensure_safe_dir((d / "user" / "spool").string()),
                             doctest::Contains("controlled by uid 65534"), Error);
        CHECK_FALSE(fs::exists(d / "user" / "spool"));
    }
    fs::remove_all(d);
}

TEST_CASE("a marker is claimed by exactly one caller and never through a symlink") {
    auto d = temp_dir("marker");
    CHECK(claim_marker((d / "42.n1").string()));
    CHECK_FALSE(claim_marker((d / "42.n1").string()));
    fs::create_symlink(d / "target", d / "43.n1");
    CHECK_FALSE(claim_marker((d / "43.n1").string())); // exists (as a link): not ours, not followed
    CHECK_FALSE(fs::exists(d / "target"));
    CHECK_THROWS_AS(claim_marker((d / "missing-dir/x").string()), Error);
    fs::remove_all(d);
}

TEST_CASE("a published file is complete, 0644, and never replaces an existing one") {
    auto d = temp_dir("publish");
    CHECK(write_new_file(d.string(), "7.json", "{\"a\":1}\n"));
    CHECK(mode_of(d / "7.json") == 0644);
    CHECK_FALSE(write_new_file(d.string(), "7.json", "other"));
    std::ifstream in(d / "7.json");
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(s == "{\"a\":1}\n");
    size_t files = 0;
    for ([[maybe_unused]] auto& e : fs::directory_iterator(d))
        ++files;
    CHECK(files == 1); // no temporary left behind
    fs::remove_all(d);
}

TEST_CASE("a job's own file is root's, 0640, in the job's group: its user reads it, other users do not") {
    auto d = temp_dir("group");
    const gid_t group = ::geteuid() == 0 ? 65534 : ::getegid();
    CHECK(write_new_file(d.string(), "9.json", "{}\n", 0640, group));
    struct stat st {};
    REQUIRE(::lstat((d / "9.json").c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0640);
    CHECK(st.st_gid == group);
    CHECK(st.st_uid == ::geteuid());
    fs::remove_all(d);
}

TEST_CASE("names in the spool are reduced to safe characters") {
    CHECK(safe_component("n1") == "n1");
    CHECK(safe_component("../etc") == "_.._etc");
    CHECK(safe_component("a/b c") == "a_b_c");
    CHECK(safe_component("") == "_");
}
