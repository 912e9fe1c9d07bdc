#include "util/process.hpp"

#include "util/error.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace infrarsi {
namespace {

struct Pipe {
    int fd[2] = {-1, -1};
    Pipe() {
        if (::pipe2(fd, O_CLOEXEC) != 0) throw Error(std::string("pipe failed: ") + std::strerror(errno));
    }
    ~Pipe() { close_all(); }
    void close_end(int i) {
        if (fd[i] >= 0) ::close(fd[i]);
        fd[i] = -1;
    }
    void close_all() {
        close_end(0);
        close_end(1);
    }
    Pipe(const Pipe&) = delete;
    Pipe& operator=(const Pipe&) = delete;
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

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options) {
    if (argv.empty()) throw Error("empty command line", "run_process");
    Pipe in, out, err;

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in.fd[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out.fd[1], 1);
    posix_spawn_file_actions_adddup2(&actions, options.on_output ? out.fd[1] : err.fd[1], 2);
    if (!options.cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, options.cwd.c_str());

    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    // The child gets default signal dispositions and its own process group, so a timeout kills it all.
    sigset_t all;
    sigfillset(&all);
    posix_spawnattr_setsigdefault(&attr, &all);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);

    std::vector<char*> cargv;
    for (const auto& a : argv)
        cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    auto env_strings = merged_environment(options.env);
    std::vector<char*> cenv;
    for (auto& e : env_strings)
        cenv.push_back(e.data());
    cenv.push_back(nullptr);

    pid_t pid = -1;
    int rc = posix_spawnp(&pid, cargv[0], &actions, &attr, cargv.data(), cenv.data());
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    if (rc != 0)
        throw Error(std::string("cannot start program: ") + std::strerror(rc), describe_command(argv),
                    "the program installed and on PATH");

    in.close_end(0);
    out.close_end(1);
    err.close_end(1);
    if (options.stdin_data) {
        // Small inputs only (manifests, JSON requests): write before reading.
        const std::string& data = *options.stdin_data;
        size_t off = 0;
        ::signal(SIGPIPE, SIG_IGN);
        while (off < data.size()) {
            ssize_t n = ::write(in.fd[1], data.data() + off, data.size() - off);
            if (n <= 0) break;
            off += static_cast<size_t>(n);
        }
    }
    in.close_end(1);

    ProcessResult result;
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    bool term_sent = false;
    auto kill_at = clock::time_point::max();
    pollfd fds[2] = {{out.fd[0], POLLIN, 0}, {err.fd[0], POLLIN, 0}};
    std::string* sinks[2] = {&result.out, &result.err};
    int open_fds = 2;
    if (options.on_output) { // one stream: the child's stderr is its stdout pipe
        err.close_end(0);
        fds[1].fd = -1;
        open_fds = 1;
    }
    char buf[65536];
    while (open_fds > 0) {
        int wait_ms = 200;
        int n = ::poll(fds, 2, wait_ms);
        if (n < 0 && errno != EINTR) break;
        for (int i = 0; i < 2; ++i) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
            if (got > 0 && options.on_output) {
                options.on_output(std::string_view(buf, static_cast<size_t>(got)));
            } else if (got > 0) {
                sinks[i]->append(buf, static_cast<size_t>(got));
            } else if (got == 0 || errno != EINTR) {
                fds[i].fd = -1;
                --open_fds;
            }
        }
        auto now = clock::now();
        if (options.timeout && !term_sent && now - start > *options.timeout) {
            ::kill(-pid, SIGTERM);
            term_sent = true;
            result.timed_out = true;
            kill_at = now + std::chrono::seconds(2);
        }
        if (term_sent && now > kill_at) {
            ::kill(-pid, SIGKILL);
            kill_at = clock::time_point::max();
        }
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) result.term_signal = WTERMSIG(status);
    return result;
}

} // namespace infrarsi
