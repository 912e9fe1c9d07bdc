#pragma once
// The spool: the one directory the plugin writes, as root, from every node's slurmstepd. Everything here
// refuses to follow symlinks and to use a directory others could plant files in.
#include <string>
#include <sys/types.h>

namespace infrarsi::spank {

// Makes sure `dir` is a safe directory to write in as root, by the one check (util/safe_directory.hpp):
// refuses it when a directory on its way may be changed by anyone but root (or the caller), creates it 0755
// when absent (its parent must exist), refuses a symlink, a non-directory, one not owned by root (or by the
// caller, for tests and unprivileged runs), one writable by group or others, and a sticky one. Throws
// infrarsi::Error.
void ensure_safe_dir(const std::string& dir);

// Claims `path` by creating it exclusively (O_EXCL, no symlink): true when this call created it, false when
// it already existed, so exactly one of many concurrent callers wins. Throws on any other failure.
bool claim_marker(const std::string& path);

// Writes a whole file under `dir` via a temporary name and link(2), so readers never see half a file.
// Refuses to replace an existing file (returns false). Throws infrarsi::Error on failure. `group`, unless -1,
// is the file's group: a job's per-user file is root's, 0640, in the job's group, so the job's user (whose
// orchestrator reads it) may read it, other users may not, and nobody but root may change it.
bool write_new_file(const std::string& dir, const std::string& name, const std::string& content,
                    mode_t mode = 0644, gid_t group = static_cast<gid_t>(-1));

// Names used inside the spool: job ids and Slurm node names, reduced to [A-Za-z0-9._-].
std::string safe_component(const std::string& s);

} // namespace infrarsi::spank
