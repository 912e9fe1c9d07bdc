#pragma once
// The one check of a directory a root process writes in or hands out (the plugin's spool, a site daemon's
// root, the tune intake's directories): only root (and one trusted uid) may change it or the path to it, so
// nobody else can swap it, or a name in it, for a link, a FIFO or a file of theirs between the check and the
// open.
#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>

namespace infrarsi {

struct SafeDirectory {
    std::string name = "directory"; // how a message names it: "spool", "a root daemon's --root /x"
    uid_t trusted = 0;            // a uid that may own it and the path to it besides root (the caller's own)
    std::optional<mode_t> create; // made with exactly this mode (whatever the umask) when missing
};

// Empty when `dir` (absolute) is safe: its parent on a path only root and `trusted` may change
// (path_control), itself not a symlink (never followed), a directory, owned by root or `trusted`, writable by
// no group or other, without the sticky bit (the mark of a directory others write). Else one line saying what
// it is instead, naming it by `want.name` ("spool is writable by others (mode 0777)").
std::string safe_directory_problem(const std::filesystem::path& dir, const SafeDirectory& want);

} // namespace infrarsi
