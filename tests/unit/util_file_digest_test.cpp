// A file a job wrote, digested as the trial evidence does it (util/file_digest.hpp): a regular file of at
// most a size, never a FIFO or a symlink, and, from root, only in a child that has dropped to the file's
// owner and runs out of time rather than hang.
#include "util/file_digest.hpp"
#include "util/sha256.hpp"

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace infrarsi;
using namespace std::chrono_literals;

TEST_CASE("a file's digest: its size and SHA-256, absent, or what it is instead of a regular file") {
    test::TempDir d("infrarsi-digest");
    const auto file = d.path / "result.json";
    std::ofstream(file) << "{\"step_time_s\": 0.5}\n";
    const auto got = digest_file(file.string(), 1 << 20);
    CHECK(got.present);
    CHECK(got.size == 21);
    CHECK(got.sha256 == sha256_hex("{\"step_time_s\": 0.5}\n"));
    CHECK(got.problem.empty());
    CHECK(file_digest_from_json(to_json(got), "t") == got);

    const auto absent = digest_file((d.path / "none").string(), 1 << 20);
    CHECK_FALSE(absent.present);
    CHECK(absent.problem.empty());
    CHECK(file_digest_from_json(to_json(absent), "t") == absent);

    // A FIFO neither blocks nor passes; nor does a symlink or a file over the size.
    REQUIRE(::mkfifo((d.path / "fifo").c_str(), 0600) == 0);
    CHECK(digest_file((d.path / "fifo").string(), 1 << 20).problem == "not a regular file");
    fs::create_symlink(file, d.path / "link");
    CHECK(digest_file((d.path / "link").string(), 1 << 20).problem == "a symbolic link");
    CHECK(digest_file(file.string(), 8).problem.find("over the 8 bytes") != std::string::npos);
    CHECK_FALSE(digest_file(file.string(), 8).present);

    // What ingest says of a difference; nothing for the same file.
    CHECK(digest_difference(got, digest_file(file.string(), 1 << 20)).empty());
    std::ofstream(file) << "{\"step_time_s\": 1.5}\n";
    const auto rewritten = digest_difference(got, digest_file(file.string(), 1 << 20));
    CHECK(rewritten.find("21 bytes, sha256 " + got.sha256.substr(0, 12) +
                         " when the trial ended, now 21 bytes") != std::string::npos);
    CHECK(digest_difference(absent, got).find("absent when the trial ended") != std::string::npos);
    CHECK(digest_difference(got, absent).find("now absent") != std::string::npos);
    CHECK_THROWS(
        file_digest_from_json(nlohmann::json{{"present", true}, {"size", 1}, {"sha256", "zz"}}, "t"));
    CHECK_THROWS(file_digest_from_json(nlohmann::json{{"present", true}, {"size", -1}}, "t"));
}

TEST_CASE("from root, the files are read by a child that dropped to their owner, within a time limit") {
    test::TempDir d("infrarsi-digest");
    const auto open_file = d.path / "log.txt";
    std::ofstream(open_file) << "INFRARSI_STEP {}\n";
    fs::permissions(d.path, fs::perms(0755));
    fs::permissions(open_file, fs::perms(0644));
    const std::vector<FileToDigest> files{{open_file.string(), 1 << 20},
                                          {(d.path / "none").string(), 1 << 20}};
    // As the caller's own uid (no drop for root's own job): the same digests as in process.
    const auto mine = digest_files_as(Account{::geteuid(), ::getegid(), "", "/"}, files, 10s);
    REQUIRE(mine.size() == 2);
    CHECK(mine[0] == digest_file(open_file.string(), 1 << 20));
    CHECK_FALSE(mine[1].present);
    // Out of time: every file says so, and the call returns.
    const auto t0 = std::chrono::steady_clock::now();
    const auto late = digest_files_as(Account{::geteuid(), ::getegid(), "", "/"}, files, 0ms);
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
    CHECK(late[0].problem.find("not read within 0 ms") != std::string::npos);
    CHECK_FALSE(late[0].present);
    if (::geteuid() != 0) return; // what follows drops from root to another user
    // A file only root may read is unreadable to the user the child dropped to: root never read it for them.
    const auto secret = d.path / "secret";
    std::ofstream(secret) << "root's\n";
    fs::permissions(secret, fs::perms(0600));
    const Account nobody{65534, 65534, "", "/"};
    const auto as_nobody =
        digest_files_as(nobody, {{secret.string(), 1 << 20}, {open_file.string(), 1 << 20}}, 10s);
    CHECK_FALSE(as_nobody[0].present);
    CHECK(as_nobody[0].problem.find("Permission denied") != std::string::npos);
    CHECK(as_nobody[1] == mine[0]);
}
