#include "util/process_tree.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <fcntl.h>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace infrarsi {
namespace {

// /proc/<pid>/stat: "pid (comm) state ppid pgrp session ... starttime(22) ...". The command name may hold
// spaces and ')': the fields follow the last ')'.
bool read_stat(pid_t pid, ProcessInfo& out) {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
    const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    char buf[1024];
    const ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (n <= 0) return false;
    buf[n] = 0;
    const std::string text(buf, static_cast<std::size_t>(n));
    const auto close = text.rfind(')');
    if (close == std::string::npos) return false;
    char state = 0;
    long ppid = 0, pgrp = 0, session = 0;
    unsigned long long start = 0;
    // state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime
    // priority nice num_threads itrealvalue starttime
    if (std::sscanf(text.c_str() + close + 1,
                    " %c %ld %ld %ld %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                    &state, &ppid, &pgrp, &session, &start) != 5)
        return false;
    out = {pid, static_cast<pid_t>(ppid), static_cast<pid_t>(session), state, start};
    return true;
}

} // namespace

ProcessTable::ProcessTable() {
    DIR* d = ::opendir("/proc");
    if (!d) return;
    while (const dirent* e = ::readdir(d)) {
        char* end = nullptr;
        const long pid = std::strtol(e->d_name, &end, 10);
        if (pid <= 0 || *end) continue;
        ProcessInfo info;
        if (!read_stat(static_cast<pid_t>(pid), info)) continue;
        by_parent_.emplace(info.parent, info.pid);
        by_pid_.emplace(info.pid, info);
    }
    ::closedir(d);
}

const ProcessInfo* ProcessTable::find(pid_t pid) const {
    const auto it = by_pid_.find(pid);
    return it == by_pid_.end() ? nullptr : &it->second;
}

std::vector<pid_t> ProcessTable::children_of(pid_t parent) const {
    std::vector<pid_t> out;
    for (auto [it, end] = by_parent_.equal_range(parent); it != end; ++it)
        out.push_back(it->second);
    return out;
}

std::set<pid_t> ProcessTable::descendants_of(const std::vector<pid_t>& roots) const {
    std::set<pid_t> out;
    std::vector<pid_t> todo = roots;
    while (!todo.empty()) {
        const pid_t p = todo.back();
        todo.pop_back();
        for (auto [it, end] = by_parent_.equal_range(p); it != end; ++it)
            if (out.insert(it->second).second) todo.push_back(it->second);
    }
    return out;
}

ProcessInfo process_info(pid_t pid) {
    ProcessInfo info;
    if (pid > 0 && read_stat(pid, info)) return info;
    return {};
}

std::vector<pid_t> children_of(pid_t parent) {
    return ProcessTable().children_of(parent);
}

std::set<pid_t> descendants_of(pid_t root) {
    return ProcessTable().descendants_of({root});
}

int kill_orphans(std::chrono::milliseconds grace) {
    std::set<pid_t> seen;
    const auto deadline = std::chrono::steady_clock::now() + grace;
    for (int round = 0; round < 1000; ++round) {
        while (::waitpid(-1, nullptr, WNOHANG) > 0) {
        }
        const auto left = children_of(::getpid());
        if (left.empty()) break;
        const bool late = std::chrono::steady_clock::now() >= deadline;
        for (const pid_t p : left) {
            seen.insert(p);
            ::kill(p, late ? SIGKILL : SIGTERM);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    return static_cast<int>(seen.size());
}

} // namespace infrarsi
