#include "util/privilege.hpp"

#include "util/error.hpp"
#include "util/fd.hpp"

#include <fmt/core.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace infrarsi {
namespace {

std::string errno_text() {
    return std::strerror(errno);
}

int wait_status(pid_t pid) {
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return 127;
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return 127;
}

} // namespace

std::optional<Account> lookup_account(uid_t uid) {
    long size = ::sysconf(_SC_GETPW_R_SIZE_MAX);
    std::vector<char> buf(size > 0 ? static_cast<std::size_t>(size) : 16384);
    struct passwd pw {};
    struct passwd* found = nullptr;
    int rc = 0;
    while ((rc = ::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found)) == ERANGE && buf.size() < (1u << 20))
        buf.resize(buf.size() * 2);
    if (rc != 0 || found == nullptr) return std::nullopt;
    return Account{pw.pw_uid, pw.pw_gid, pw.pw_name ? pw.pw_name : "", pw.pw_dir ? pw.pw_dir : ""};
}

void drop_to(const Account& a) {
    if (a.uid == 0) throw Error("refusing to act as root (uid 0)");
    if (::geteuid() == 0) {
        if (!a.name.empty() ? ::initgroups(a.name.c_str(), a.gid) != 0 : ::setgroups(0, nullptr) != 0)
            throw Error(fmt::format("cannot set the groups of {}: {}", a.name, errno_text()));
    }
    if (::setresgid(a.gid, a.gid, a.gid) != 0)
        throw Error(fmt::format("cannot set gid {}: {}", a.gid, errno_text()));
    if (::setresuid(a.uid, a.uid, a.uid) != 0)
        throw Error(fmt::format("cannot set uid {}: {}", a.uid, errno_text()));
    if (::setuid(0) == 0 || ::geteuid() != a.uid || ::getegid() != a.gid)
        throw Error(fmt::format("the drop to uid {} did not hold", a.uid));
    ::setenv("HOME", a.home.c_str(), 1);
    ::setenv("USER", a.name.c_str(), 1);
    ::setenv("LOGNAME", a.name.c_str(), 1);
    // Root's own directories: what runs as the user must not try to write there.
    for (const char* v :
         {"XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR"})
        ::unsetenv(v);
}

pid_t spawn_as(const Account& a, const std::function<int()>& work) {
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t pid = ::fork();
    if (pid < 0) throw Error(std::string("fork: ") + errno_text());
    if (pid > 0) return pid;
    int status = 127;
    try {
        drop_to(a);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "infrarsi: %s\n", e.what());
        std::fflush(stderr);
        ::_exit(126);
    }
    try {
        status = work();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "infrarsi: %s\n", e.what());
    } catch (...) {
        std::fprintf(stderr, "infrarsi: an unknown exception\n");
    }
    std::fflush(stdout);
    std::fflush(stderr);
    ::_exit(status);
}

AsUser run_as_status(const Account& a, const std::function<AsUser()>& work) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw Error(std::string("pipe: ") + errno_text());
    UniqueFd in(fds[0]), out(fds[1]);
    const pid_t pid = spawn_as(a, [&]() -> int {
        in.reset();
        AsUser done;
        try {
            done = work();
        } catch (const std::exception& e) {
            done = {127, e.what()};
        }
        if (done.message.size() > (60u << 10)) done.message.resize(60u << 10); // the parent reads 64 KiB
        try {
            write_all(out.get(), done.message, "the pipe to the parent");
        } catch (const Error&) {
        }
        return done.status;
    });
    out.reset();
    AsUser r;
    try {
        r.message = read_all(in.get(), 64u << 10, "the child's report");
    } catch (const Error& e) {
        r.message = e.what();
    }
    r.status = wait_status(pid);
    if (r.status == 126 && r.message.empty()) r.message = fmt::format("could not drop to uid {}", a.uid);
    return r;
}

AsUser run_as(const Account& a, const std::function<std::string()>& work) {
    return run_as_status(a, [&] {
        std::string message = work();
        const int status = message.empty() ? 0 : 1;
        return AsUser{status, std::move(message)};
    });
}

PathControl path_control(const std::filesystem::path& path, uid_t trusted) {
    namespace fs = std::filesystem;
    PathControl r;
    if (!path.is_absolute()) {
        r.why = fmt::format("{} is not an absolute path", path.string());
        return r;
    }
    const auto ours = [&](uid_t u) { return u == 0 || u == trusted; };
    const auto shared = [](const struct stat& st) { return (st.st_mode & (S_IWGRP | S_IWOTH)) != 0; };
    std::deque<std::string> rest;
    for (const auto& c : path.relative_path())
        rest.push_back(c.string());
    fs::path cur = "/";
    struct stat dir {};
    if (::lstat("/", &dir) != 0) {
        r.why = "/: " + errno_text();
        return r;
    }
    if (!ours(dir.st_uid)) {
        r.uid = dir.st_uid;
        return r;
    }
    int links = 0;
    while (!rest.empty()) {
        const std::string c = rest.front();
        rest.pop_front();
        if (c.empty() || c == ".") continue;
        if (c == "..") { // cur has no symlink in it: its parent is the one walked through
            cur = cur.parent_path();
            if (::lstat(cur.c_str(), &dir) != 0) {
                r.why = fmt::format("{}: {}", cur.string(), errno_text());
                return r;
            }
            continue;
        }
        const fs::path next = cur / c;
        // Whoever may write a directory may rename or replace any entry in it; with the sticky bit only the
        // entry's owner (or the directory's) may, so the entry's owner decides below.
        if (shared(dir) && !(dir.st_mode & S_ISVTX)) {
            r.why = fmt::format("{} is writable by others (mode {:o}): anyone may replace {}", cur.string(),
                                dir.st_mode & 07777, next.string());
            return r;
        }
        struct stat st {};
        if (::lstat(next.c_str(), &st) != 0) {
            r.why = fmt::format("{}: {}", next.string(), errno_text());
            return r;
        }
        if (!ours(st.st_uid)) {
            r.uid = st.st_uid;
            return r;
        }
        if (S_ISLNK(st.st_mode)) { // root's own link, in a directory only root may change: followed
            if (++links > 40) {
                r.why = fmt::format("{}: too many levels of symbolic links", path.string());
                return r;
            }
            std::vector<char> buf(4096);
            const ssize_t n = ::readlink(next.c_str(), buf.data(), buf.size());
            if (n < 0 || static_cast<std::size_t>(n) >= buf.size()) {
                r.why = fmt::format("{}: cannot read the link: {}", next.string(),
                                    n < 0 ? errno_text() : "too long");
                return r;
            }
            const fs::path target(std::string(buf.data(), static_cast<std::size_t>(n)));
            std::vector<std::string> parts;
            for (const auto& p : target.relative_path())
                parts.push_back(p.string());
            rest.insert(rest.begin(), parts.begin(), parts.end());
            if (target.is_absolute()) {
                cur = "/";
                if (::lstat("/", &dir) != 0) {
                    r.why = "/: " + errno_text();
                    return r;
                }
            }
            continue;
        }
        if (!rest.empty() && !S_ISDIR(st.st_mode)) {
            r.why = fmt::format("{} is not a directory", next.string());
            return r;
        }
        cur = next;
        dir = st;
    }
    // The path itself: a directory or file a group or others may write is not one user's either.
    if (shared(dir)) {
        r.why = fmt::format("{} is writable by others (mode {:o})", cur.string(), dir.st_mode & 07777);
        return r;
    }
    return r;
}

std::optional<Account> account_to_act_as(const std::filesystem::path& path) {
    if (::geteuid() != 0) return std::nullopt;
    const auto abs = std::filesystem::absolute(path);
    // A directory about to be made (init): whoever controls the nearest one that exists controls it.
    auto existing = abs;
    struct stat st {};
    while (::lstat(existing.c_str(), &st) != 0 && errno == ENOENT && existing.has_relative_path())
        existing = existing.parent_path();
    const auto pc = path_control(existing);
    if (pc.root_only()) return std::nullopt;
    // To be made in a sticky directory of root's (/tmp), itself on a path only root may change: what root
    // makes there only root may rename or replace.
    if (existing != abs && !pc.why.empty()) {
        struct stat dir {};
        if (::lstat(existing.c_str(), &dir) == 0 && S_ISDIR(dir.st_mode) && dir.st_uid == 0 &&
            (dir.st_mode & S_ISVTX) && path_control(existing.parent_path()).root_only())
            return std::nullopt;
    }
    const std::string expected =
        "a directory only root may change, or the command run as the user who owns it";
    if (!pc.why.empty()) throw Error("not opened as root: " + pc.why, abs.string(), expected);
    auto account = lookup_account(pc.uid);
    if (!account)
        throw Error(fmt::format("not opened as root: uid {} controls it and has no passwd entry", pc.uid),
                    abs.string(), expected);
    return account;
}

} // namespace infrarsi
