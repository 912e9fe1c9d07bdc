#include "util/process_tree.hpp"

#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

namespace infrarsi {
namespace {

// pid -> parent pid of every process /proc lists (a process that ends meanwhile is left out).
std::multimap<pid_t, pid_t> by_parent() {
    std::multimap<pid_t, pid_t> out;
    DIR* d = ::opendir("/proc");
    if (!d) return out;
    while (const dirent* e = ::readdir(d)) {
        char* end = nullptr;
        const long pid = std::strtol(e->d_name, &end, 10);
        if (pid <= 0 || *end) continue;
        std::ifstream in("/proc/" + std::string(e->d_name) + "/stat");
        const std::string text((std::istreambuf_iterator<char>(in)), {});
        // The command name in parentheses may hold spaces and ')': the fields follow the last ')'.
        const auto close = text.rfind(')');
        if (close == std::string::npos) continue;
        char state = 0;
        long ppid = 0;
        if (std::sscanf(text.c_str() + close + 1, " %c %ld", &state, &ppid) == 2)
            out.emplace(static_cast<pid_t>(ppid), static_cast<pid_t>(pid));
    }
    ::closedir(d);
    return out;
}

} // namespace

std::vector<pid_t> children_of(pid_t parent) {
    std::vector<pid_t> out;
    const auto tree = by_parent();
    for (auto [it, end] = tree.equal_range(parent); it != end; ++it)
        out.push_back(it->second);
    return out;
}

std::set<pid_t> descendants_of(pid_t root) {
    const auto tree = by_parent();
    std::set<pid_t> out;
    std::vector<pid_t> todo{root};
    while (!todo.empty()) {
        const pid_t p = todo.back();
        todo.pop_back();
        for (auto [it, end] = tree.equal_range(p); it != end; ++it)
            if (out.insert(it->second).second) todo.push_back(it->second);
    }
    return out;
}

} // namespace infrarsi
