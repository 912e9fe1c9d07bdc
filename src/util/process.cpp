#include "util/process.hpp"

#include "util/error.hpp"
#include "util/fd.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;

namespace infrarsi {
namespace {

using clock = std::chrono::steady_clock;

struct Pipe {
    UniqueFd read, write;
    Pipe() {
        int fd[2];
        if (::pipe2(fd, O_CLOEXEC) != 0) throw Error(std::string("pipe failed: ") + std::strerror(errno));
        read.reset(fd[0]);
        write.reset(fd[1]);
    }
};

// Where a child's process group is: one of its own (a timeout kills it whole), or a new session (a trial
// whose wrapper makes process groups of its own, all inside the session).
enum class Group { Own, Session };

// posix_spawn's two attribute objects, destroyed on every path.
struct SpawnSetup {
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    SpawnSetup() {
        posix_spawn_file_actions_init(&actions);
        posix_spawnattr_init(&attr);
    }
    ~SpawnSetup() {
        posix_spawn_file_actions_destroy(&actions);
        posix_spawnattr_destroy(&attr);
    }
    SpawnSetup(const SpawnSetup&) = delete;
    SpawnSetup& operator=(const SpawnSetup&) = delete;
};

// The one place a child is started. `setup.actions` already says where its standard streams go. The child
// gets default signal dispositions, an empty signal mask and the process group `group` asks for.
pid_t spawn_child(const std::vector<std::string>& argv, const std::string& cwd,
                  const std::vector<std::string>& env, SpawnSetup& setup, Group group) {
    if (argv.empty()) throw Error("empty command line", "start a program");
    if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&setup.actions, cwd.c_str());
    sigset_t all, none;
    sigfillset(&all);
    sigemptyset(&none);
    posix_spawnattr_setsigdefault(&setup.attr, &all);
    posix_spawnattr_setsigmask(&setup.attr, &none);
    short flags = POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK;
    if (group == Group::Own) {
        posix_spawnattr_setpgroup(&setup.attr, 0);
        flags |= POSIX_SPAWN_SETPGROUP;
    } else {
        flags |= POSIX_SPAWN_SETSID;
    }
    posix_spawnattr_setflags(&setup.attr, flags);

    std::vector<char*> cargv, cenv;
    for (const auto& a : argv)
        cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    for (const auto& e : env)
        cenv.push_back(const_cast<char*>(e.c_str()));
    cenv.push_back(nullptr);
    pid_t pid = -1;
    const int rc = posix_spawnp(&pid, cargv[0], &setup.actions, &setup.attr, cargv.data(), cenv.data());
    if (rc != 0)
        throw Error(std::string("cannot start program: ") + std::strerror(rc), describe_command(argv),
                    "the program installed and on PATH");
    return pid;
}

// Signals the child's process group and the child itself (in case it left the group).
void signal_child(pid_t pid, int sig) {
    ::kill(-pid, sig);
    ::kill(pid, sig);
}

// A child that is not reaped when run_process leaves (an exception from on_output) is killed and reaped.
struct Reaper {
    pid_t pid;
    bool reaped = false;
    ~Reaper() {
        if (reaped) return;
        signal_child(pid, SIGKILL);
        while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
        }
    }
};

// The timeout: SIGTERM to the process group at the deadline, SIGKILL 2 s later.
struct Deadline {
    bool armed = false; // a timeout was given
    clock::time_point at{};
    bool term_sent = false;
    bool kill_pending = false; // SIGTERM sent, SIGKILL at kill_at unless the child is gone
    clock::time_point kill_at{};
    // Returns true when it has just timed out.
    bool enforce(pid_t pid) {
        const auto now = clock::now();
        if (armed && !term_sent && now >= at) {
            signal_child(pid, SIGTERM);
            term_sent = true;
            kill_pending = true;
            kill_at = now + std::chrono::seconds(2);
            return true;
        }
        if (kill_pending && now >= kill_at) {
            signal_child(pid, SIGKILL);
            kill_pending = false;
        }
        return false;
    }
};

} // namespace

std::vector<std::string> merged_environment(const std::map<std::string, std::string>& extra,
                                            const std::vector<std::string>& drop_prefixes) {
    std::vector<std::string> env;
    for (char** e = environ; e && *e; ++e) {
        std::string entry(*e);
        const std::string name = entry.substr(0, entry.find('='));
        bool drop = extra.count(name) > 0;
        for (const auto& p : drop_prefixes)
            drop = drop || name.rfind(p, 0) == 0;
        if (!drop) env.push_back(std::move(entry));
    }
    for (const auto& [k, v] : extra)
        env.push_back(k + "=" + v);
    return env;
}

std::string describe_command(const std::vector<std::string>& argv) {
    std::string s;
    for (const auto& a : argv) {
        if (!s.empty()) s += ' ';
        bool plain = !a.empty() && a.find_first_of(" \t'\"$\\|&;<>()*?") == std::string::npos;
        s += plain ? a : "'" + a + "'";
    }
    return s;
}

pid_t start_detached(const std::vector<std::string>& argv, const DetachedOptions& options) {
    if (options.output.empty()) throw Error("no output file", describe_command(argv));
    SpawnSetup setup;
    posix_spawn_file_actions_addopen(&setup.actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&setup.actions, 1, options.output.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&setup.actions, 1, 2);
    if (options.cgroup.empty()) return spawn_child(argv, options.cwd, options.env, setup, Group::Session);
    // posix_spawn cannot start a child in a cgroup: a shell moves itself there ("0": the writer), then
    // becomes the program, so nothing of the program runs outside it. The path is an argument, not text.
    std::vector<std::string> in_cgroup{"sh", "-c", "echo 0 > \"$0/cgroup.procs\" && exec \"$@\"",
                                       options.cgroup};
    in_cgroup.insert(in_cgroup.end(), argv.begin(), argv.end());
    return spawn_child(in_cgroup, options.cwd, options.env, setup, Group::Session);
}

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options) {
    if (argv.empty()) throw Error("empty command line", "run_process");
    Pipe in, out, err;
    SpawnSetup setup;
    posix_spawn_file_actions_adddup2(&setup.actions, in.read.get(), 0);
    posix_spawn_file_actions_adddup2(&setup.actions, out.write.get(), 1);
    posix_spawn_file_actions_adddup2(&setup.actions, options.on_output ? out.write.get() : err.write.get(),
                                     2);
    const auto start = clock::now();
    Reaper child{spawn_child(argv, options.cwd, merged_environment(options.env, options.drop_env_prefixes),
                             setup, Group::Own)};
    Deadline deadline;
    if (options.timeout) {
        deadline.armed = true;
        deadline.at = start + *options.timeout;
    }

    ProcessResult result;
    in.read.reset();
    out.write.reset();
    err.write.reset();
    // The input is written as the child reads it, between reads of its output, never blocking: a child that
    // reads none of it (or only part) cannot hang this process, and the deadline still holds.
    std::string_view input = options.stdin_data ? std::string_view(*options.stdin_data) : std::string_view();
    if (input.empty()) {
        in.write.reset();
    } else {
        ::signal(SIGPIPE, SIG_IGN);
        ::fcntl(in.write.get(), F_SETFL, ::fcntl(in.write.get(), F_GETFL) | O_NONBLOCK);
    }

    pollfd fds[3] = {{out.read.get(), POLLIN, 0}, {err.read.get(), POLLIN, 0}, {in.write.get(), POLLOUT, 0}};
    std::string* sinks[2] = {&result.out, &result.err};
    int open_fds = 2;
    if (options.on_output) { // one stream: the child's stderr is its stdout pipe
        err.read.reset();
        fds[1].fd = -1;
        open_fds = 1;
    }
    char buf[65536];
    while (open_fds > 0) {
        int n = ::poll(fds, 3, 200);
        if (n < 0 && errno != EINTR) break;
        if (fds[2].fd >= 0 && (fds[2].revents & (POLLOUT | POLLERR | POLLHUP))) {
            const ssize_t w = ::write(fds[2].fd, input.data(), input.size());
            if (w > 0) input.remove_prefix(static_cast<size_t>(w));
            if (input.empty() || (w < 0 && errno != EAGAIN && errno != EINTR) ||
                (fds[2].revents & (POLLERR | POLLHUP))) {
                in.write.reset(); // all of it, or the child closed its end: EOF for it
                fds[2].fd = -1;
            }
        }
        for (int i = 0; i < 2; ++i) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
            if (got > 0 && options.on_output) {
                options.on_output(std::string_view(buf, static_cast<size_t>(got)));
            } else if (got > 0) {
                std::size_t keep = static_cast<size_t>(got);
                if (options.max_output_bytes) {
                    const std::size_t room =
                        *options.max_output_bytes - std::min(*options.max_output_bytes, sinks[i]->size());
                    if (keep > room) {
                        keep = room;
                        if (!result.output_exceeded) ::kill(-child.pid, SIGKILL);
                        result.output_exceeded = true;
                    }
                }
                sinks[i]->append(buf, keep);
            } else if (got == 0 || errno != EINTR) {
                fds[i].fd = -1;
                --open_fds;
            }
        }
        if (deadline.enforce(child.pid)) result.timed_out = true;
        // Killed (the deadline's SIGKILL, or too much output): what it still writes is not waited for. A
        // process it started in a session of its own may hold the pipes open for ever.
        if (result.output_exceeded || (deadline.term_sent && !deadline.kill_pending)) break;
    }
    // Its output is closed, but the child may go on running: the deadline still holds.
    int status = 0;
    auto nap = std::chrono::milliseconds(1);
    for (;;) {
        const pid_t got = ::waitpid(child.pid, &status, options.timeout ? WNOHANG : 0);
        if (got == child.pid) break;
        if (got < 0 && errno != EINTR)
            throw Error(std::string("waitpid failed: ") + std::strerror(errno), describe_command(argv));
        if (got == 0) {
            if (deadline.enforce(child.pid)) result.timed_out = true;
            std::this_thread::sleep_for(nap);
            nap = std::min(nap * 2, std::chrono::milliseconds(50));
        }
    }
    child.reaped = true;
    if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) result.term_signal = WTERMSIG(status);
    return result;
}

} // namespace infrarsi
