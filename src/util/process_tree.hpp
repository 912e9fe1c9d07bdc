#pragma once
// The processes of this machine as a tree, from /proc/<pid>/stat: who a process's children are, and every
// process below one (the trial wrapper is a child subreaper, so every process a workload starts stays below
// it).
#include <set>
#include <sys/types.h>
#include <vector>

namespace infrarsi {

// The processes whose parent is `parent`, as /proc lists them now.
std::vector<pid_t> children_of(pid_t parent);
// Every process below `root` (children, their children, ...), `root` not included.
std::set<pid_t> descendants_of(pid_t root);

} // namespace infrarsi
