#include "spool.hpp"

#include "util/error.hpp"
#include "util/fd.hpp"
#include "util/privilege.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>

namespace infrarsi::spank {
namespace {

std::string sys_error(const char* what) {
    return std::string(what) + ": " + std::strerror(errno);
}

std::string octal(unsigned mode) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "%04o", mode);
    return buf;
}

} // namespace

void ensure_safe_dir(const std::string& dir) {
    if (dir.empty() || dir[0] != '/') throw Error("spool path is not absolute", dir);
    // The directories on the way first: one a user may change could swap the spool (or the name root is about
    // to mkdir) for a link to anywhere between our check and our open.
    const auto parent = std::filesystem::path(dir).lexically_normal().parent_path();
    if (const auto pc = path_control(parent, ::geteuid()); !pc.root_only())
        throw Error(pc.why.empty() ? "spool's parent " + parent.string() + " is controlled by uid " +
                                         std::to_string(pc.uid) + "; refusing to write under it"
                                   : "spool's path can be changed by others (" + pc.why +
                                         "); refusing to write under it",
                    dir, "a path of directories only root may change");
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0) {
        if (errno != ENOENT) throw Error(sys_error("lstat"), dir);
        // Created with exactly 0755 whatever the umask of the process that loaded us.
        if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) throw Error(sys_error("mkdir"), dir);
        if (::lstat(dir.c_str(), &st) != 0) throw Error(sys_error("lstat"), dir);
        if (S_ISDIR(st.st_mode) && st.st_uid == ::geteuid() && (st.st_mode & 07777) != 0755)
            ::chmod(dir.c_str(), 0755);
        if (::lstat(dir.c_str(), &st) != 0) throw Error(sys_error("lstat"), dir);
    }
    if (S_ISLNK(st.st_mode))
        throw Error("spool is a symlink; refusing to follow it", dir, "a real directory");
    if (!S_ISDIR(st.st_mode)) throw Error("spool is not a directory", dir);
    if (st.st_uid != 0 && st.st_uid != ::geteuid())
        throw Error("spool is owned by uid " + std::to_string(st.st_uid), dir, "owned by root");
    // Root opens names in here: anyone who can create one can plant a FIFO, a symlink or a hard link under
    // it. The sticky bit does not help (it only protects others' files from deletion).
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        throw Error("spool is writable by others (mode " + octal(st.st_mode & 07777) +
                        "); refusing to write in it",
                    dir, "mode 0755, owned by root");
    if (st.st_mode & S_ISVTX)
        throw Error("spool has the sticky bit (mode " + octal(st.st_mode & 07777) +
                        "), the mark of a directory others write; refusing to write in it",
                    dir, "mode 0755, owned by root");
}

bool claim_marker(const std::string& path) {
    UniqueFd f(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (f) return true;
    if (errno == EEXIST) return false;
    throw Error(sys_error("cannot create marker"), path);
}

bool write_new_file(const std::string& dir, const std::string& name, const std::string& content, mode_t mode,
                    gid_t group) {
    const std::string path = dir + "/" + name;
    const std::string tmp = dir + "/." + name + ".tmp." + std::to_string(::getpid());
    {
        UniqueFd f(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
        if (!f) throw Error(sys_error("cannot create"), tmp);
        // The group first: a reader's group never sees the file before it has its final mode.
        if (group != static_cast<gid_t>(-1) && ::fchown(f.get(), static_cast<uid_t>(-1), group) != 0) {
            const int e = errno;
            ::unlink(tmp.c_str());
            errno = e;
            throw Error(sys_error("cannot give the file its group"), tmp);
        }
        ::fchmod(f.get(), mode); // whatever the umask
        try {
            write_all(f.get(), content, tmp);
        } catch (...) {
            ::unlink(tmp.c_str());
            throw;
        }
    }
    // link(2) fails on an existing target, unlike rename(2): no request is ever overwritten.
    if (::link(tmp.c_str(), path.c_str()) != 0) {
        int e = errno;
        ::unlink(tmp.c_str());
        if (e == EEXIST) return false;
        errno = e;
        throw Error(sys_error("cannot publish"), path);
    }
    ::unlink(tmp.c_str());
    return true;
}

std::string safe_component(const std::string& s) {
    std::string out;
    for (char c : s) {
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                  c == '_' || c == '-';
        out += ok ? c : '_';
    }
    if (out.empty() || out[0] == '.') out.insert(out.begin(), '_');
    return out;
}

} // namespace infrarsi::spank
