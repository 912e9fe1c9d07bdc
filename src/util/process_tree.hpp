#pragma once
// The processes of this machine as a tree, from /proc/<pid>/stat: who a process's children are, and every
// process below one (the trial wrapper and the local scheduler are child subreapers, so every process a
// workload starts stays below them, setsid or double fork included, for as long as they live).
#include <chrono>
#include <map>
#include <set>
#include <sys/types.h>
#include <vector>

namespace infrarsi {

// One process as /proc/<pid>/stat has it.
struct ProcessInfo {
    pid_t pid = 0;
    pid_t parent = 0;
    pid_t session = 0;
    char state = 0;                     // 'R', 'S', 'Z' (a zombie: ended, not reaped yet), ...
    unsigned long long start_ticks = 0; // clock ticks after boot: with the pid, names a process for good
};

// A snapshot of every process /proc lists (a process that ends meanwhile is left out).
class ProcessTable {
  public:
    ProcessTable(); // reads /proc now
    const ProcessInfo* find(pid_t pid) const;
    std::vector<pid_t> children_of(pid_t parent) const;
    // Every process below each of `roots` (children, their children, ...), the roots not included.
    std::set<pid_t> descendants_of(const std::vector<pid_t>& roots) const;
    const std::map<pid_t, ProcessInfo>& all() const { return by_pid_; }

  private:
    std::map<pid_t, ProcessInfo> by_pid_;
    std::multimap<pid_t, pid_t> by_parent_;
};

// One process's entry now; nullopt-like (pid 0) when it is gone or unreadable.
ProcessInfo process_info(pid_t pid);

// The processes whose parent is `parent`, as /proc lists them now.
std::vector<pid_t> children_of(pid_t parent);
// Every process below `root` (children, their children, ...), `root` not included.
std::set<pid_t> descendants_of(pid_t root);

// For a child subreaper (prctl PR_SET_CHILD_SUBREAPER), which inherits every orphaned descendant: kills and
// reaps every child it has, and those that are re-parented to it meanwhile (a daemon that would act after its
// parent ended): SIGTERM, then SIGKILL after `grace`. Returns how many there were.
int kill_orphans(std::chrono::milliseconds grace);

} // namespace infrarsi
