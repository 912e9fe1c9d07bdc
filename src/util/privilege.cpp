#include "util/privilege.hpp"

#include "util/error.hpp"
#include "util/fd.hpp"

#include <fmt/core.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
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

AsUser run_as(const Account& a, const std::function<std::string()>& work) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw Error(std::string("pipe: ") + errno_text());
    UniqueFd in(fds[0]), out(fds[1]);
    const pid_t pid = spawn_as(a, [&]() -> int {
        in.reset();
        std::string message;
        int status = 0;
        try {
            message = work();
            status = message.empty() ? 0 : 1;
        } catch (const std::exception& e) {
            message = e.what();
            status = 127;
        }
        if (message.size() > (60u << 10)) message.resize(60u << 10); // the parent reads at most 64 KiB
        try {
            write_all(out.get(), message, "the pipe to the parent");
        } catch (const Error&) {
        }
        return status;
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

} // namespace infrarsi
