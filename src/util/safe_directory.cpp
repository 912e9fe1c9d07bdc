#include "util/safe_directory.hpp"

#include "util/privilege.hpp"

#include <fmt/core.h>

#include <cerrno>
#include <cstring>
#include <sys/stat.h>
#include <unistd.h>

namespace infrarsi {

std::string safe_directory_problem(const std::filesystem::path& dir, const SafeDirectory& want) {
    if (!dir.is_absolute()) return fmt::format("{} {} is not an absolute path", want.name, dir.string());
    const auto errno_text = [](const char* what) {
        return fmt::format("{}: {}", what, std::strerror(errno));
    };
    // The directories on the way first: one a user may change could swap the directory (or the name about to
    // be made) for a link to anywhere between this check and the caller's open.
    const auto parent = dir.lexically_normal().parent_path();
    if (const auto pc = path_control(parent, want.trusted); !pc.root_only())
        return pc.why.empty()
                   ? fmt::format("{}'s parent {} is controlled by uid {}", want.name, parent.string(), pc.uid)
                   : fmt::format("{}'s path can be changed by others ({})", want.name, pc.why);
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0) {
        if (errno != ENOENT || !want.create) return fmt::format("{}: {}", want.name, errno_text("lstat"));
        if (::mkdir(dir.c_str(), *want.create) != 0 && errno != EEXIST)
            return fmt::format("{}: {}", want.name, errno_text("mkdir"));
        if (::lstat(dir.c_str(), &st) != 0) return fmt::format("{}: {}", want.name, errno_text("lstat"));
        if (S_ISDIR(st.st_mode) && st.st_uid == ::geteuid() && (st.st_mode & 07777) != *want.create) {
            ::chmod(dir.c_str(), *want.create);
            if (::lstat(dir.c_str(), &st) != 0) return fmt::format("{}: {}", want.name, errno_text("lstat"));
        }
    }
    if (S_ISLNK(st.st_mode))
        return fmt::format("{} is a symlink, not a directory; refusing to follow it", want.name);
    if (!S_ISDIR(st.st_mode)) return fmt::format("{} is not a directory", want.name);
    if (st.st_uid != 0 && st.st_uid != want.trusted)
        return fmt::format("{} is owned by uid {}, not by root", want.name, st.st_uid);
    // Root opens names in here: anyone who can create one can plant a FIFO, a symlink or a hard link under
    // it. The sticky bit does not help (it only protects others' files from deletion).
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        return fmt::format("{} is writable by others (mode {:04o})", want.name, st.st_mode & 07777);
    if (st.st_mode & S_ISVTX)
        return fmt::format("{} has the sticky bit (mode {:04o}), the mark of a directory others write",
                           want.name, st.st_mode & 07777);
    return {};
}

} // namespace infrarsi
