#pragma once
// A file's size and SHA-256, read as a file a job wrote is read: opened non-blocking and without following a
// final symlink, a regular file only, at most a given size. What the trial evidence records of result.json
// and log.txt when a trial ends (trial/evidence.hpp), and what ingest compares them with. digest_files_as
// reads them in a child that has dropped to the files' owner, with a time limit: root (slurmstepd) never
// opens a user's file, and a hostile file cannot hold it.
#include "util/privilege.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace infrarsi {

struct FileDigest {
    bool present = false;   // a regular file was there (false: none, or `problem` says what was instead)
    std::uint64_t size = 0; // bytes read
    std::string sha256;     // lowercase hex; empty when absent or not read
    std::string problem;    // non-empty: what kept it from being read (a FIFO, a symlink, over the size...)
    bool operator==(const FileDigest&) const = default;
};

// {"present": true, "size": N, "sha256": "..."}, or {"present": false} with "problem" where there was one.
nlohmann::json to_json(const FileDigest& d);
// Throws infrarsi::Error naming `where` and the field.
FileDigest file_digest_from_json(const nlohmann::json& j, const std::string& where);

// Never throws for what the file is: an absent file is {present = false}; anything else that is not a regular
// file of at most max_bytes is {problem = why}.
FileDigest digest_file(const std::string& path, std::uint64_t max_bytes);

struct FileToDigest {
    std::string path;
    std::uint64_t max_bytes = 0;
};
// Each file's digest_file, computed in a child process: dropped to `account` (when it is not root), killed at
// `timeout`. A child that fails, or runs out of time, leaves every file with that problem.
std::vector<FileDigest> digest_files_as(const Account& account, const std::vector<FileToDigest>& files,
                                        std::chrono::milliseconds timeout);

// "" when `now` is what `recorded` was; else what differs, for people ("size 120 -> 360 bytes").
std::string digest_difference(const FileDigest& recorded, const FileDigest& now);

} // namespace infrarsi
