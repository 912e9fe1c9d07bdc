#include "spool.hpp"

#include "util/error.hpp"
#include "util/fd.hpp"
#include "util/privilege.hpp"
#include "util/safe_directory.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace infrarsi::spank {
namespace {

std::string sys_error(const char* what) {
    return std::string(what) + ": " + std::strerror(errno);
}

} // namespace

void ensure_safe_dir(const std::string& dir) {
    if (dir.empty() || dir[0] != '/') throw Error("spool path is not absolute", dir);
    if (const auto e = safe_directory_problem(dir, {"spool", ::geteuid(), 0755}); !e.empty())
        throw Error(e + "; refusing to write in it", dir,
                    "a directory of root's, mode 0755, on a path only root may change");
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
