#include "util/bounded_child.hpp"

#include "util/error.hpp"
#include "util/fd.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

namespace infrarsi {

ChildOutput run_in_child(const std::function<std::string()>& work, std::chrono::milliseconds budget,
                         std::size_t max_bytes) {
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + budget;
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw Error(std::string("pipe: ") + std::strerror(errno), "child process");
    UniqueFd rd(fds[0]), wr(fds[1]);
    const pid_t pid = ::fork();
    if (pid < 0) throw Error(std::string("fork: ") + std::strerror(errno), "child process");
    if (pid == 0) {
        rd.reset();
        ::alarm(static_cast<unsigned>(budget.count() / 1000 + 2));
        try {
            const std::string out = work();
            write_all(wr.get(), out, "pipe");
            ::_exit(0);
        } catch (...) {
            ::_exit(1);
        }
    }
    wr.reset();
    ChildOutput result;
    bool eof = false, late = false, too_big = false;
    char buf[1 << 16];
    while (!eof) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() <= 0) {
            late = true;
            break;
        }
        pollfd p{rd.get(), POLLIN, 0};
        const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
        if (r < 0 && errno != EINTR) break;
        if (r <= 0) continue;
        const ssize_t n = ::read(rd.get(), buf, sizeof buf);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) {
            eof = true;
            break;
        }
        result.out.append(buf, static_cast<size_t>(n));
        if (result.out.size() > max_bytes) {
            too_big = true;
            break;
        }
    }
    if (!eof) ::kill(pid, SIGKILL);
    int status = 0;
    // Reaped here unless the host process reaps its children itself (then ECHILD: nothing to wait for).
    pid_t reaped;
    while ((reaped = ::waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    if (late)
        result.end = ChildEnd::timed_out;
    else if (!eof || too_big)
        result.end = ChildEnd::failed;
    else if (reaped == pid && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
        result.end = ChildEnd::failed;
    else
        result.end = ChildEnd::finished;
    return result;
}

} // namespace infrarsi
