#pragma once
// What a trial's job leaves in its trial directory (its working directory: nanoGPT's out/ckpt.pt, a
// framework's checkpoints and caches) once the campaign has read the trial: removed, or the small files kept
// within a bound ([workload] keep_job_files, docs/contract.md), so a campaign of hundreds of trials does not
// keep hundreds of checkpoints. The wrapper's files (result.json, log.txt and its line times) always stay:
// the report and the audit path read them.
//
// Everything in the directory was written by a job, which is hostile input: the walk opens each directory
// below the campaign's with openat(O_NOFOLLOW) one component at a time, never follows a symlink (a link is
// removed as a link), never crosses to another file system, never opens a file (a FIFO cannot block it),
// acts only on entries of this process's own uid, and holds a bounded number of descriptors however deep
// the tree (a directory deeper than that is moved up into the trial directory, then removed whole).
#include "contract/contract.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace infrarsi::trial {

// With keep_job_files = "small": a regular file is kept when it is at most kKeptJobFileBytes and the files
// kept before it (in the order the directory lists them) leave room within kKeptJobFilesBytes and
// kKeptJobFilesEntries. Anything else (a larger file, a symlink, a FIFO, a socket, a device) is removed.
inline constexpr std::uint64_t kKeptJobFileBytes = 64u << 10;
inline constexpr std::uint64_t kKeptJobFilesBytes = 1u << 20;
inline constexpr std::uint64_t kKeptJobFilesEntries = 64;

struct RemovedJobFiles {
    std::uint64_t entries = 0; // files, links and directories removed
    std::uint64_t bytes = 0;   // the sizes of the regular files among them
    std::uint64_t kept = 0;    // the job's files left (with "small"; the wrapper's own not counted)
    // What was not removed and why (at most a few): an entry of another uid, another file system, an error.
    std::vector<std::string> left;
};

// The files the trial wrapper writes into a trial directory, which always stay.
bool is_wrapper_file(const std::string& name);

// Applies `mode` to the trial directory `campaign`/`trial_dir` (`trial_dir` relative, e.g. "batches/3/0":
// each of its components is opened without following a symlink). KeepJobFiles::All removes nothing. Never
// throws for what the job left (an unreadable entry is named in `left`); throws infrarsi::Error when the
// trial directory itself cannot be opened as a directory of this uid on the campaign's file system.
RemovedJobFiles remove_job_files(const std::filesystem::path& campaign,
                                 const std::filesystem::path& trial_dir, contract::KeepJobFiles mode);

} // namespace infrarsi::trial
