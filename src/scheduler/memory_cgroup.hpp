#pragma once
// The local scheduler's memory limit through the kernel: a cgroup per trial, a child of this process's own
// memory cgroup, with the contract's limit. Available only where this process may create one:
//   v2: its cgroup is on the unified hierarchy, the memory controller is enabled for its children (or this
//       process may enable it: the root of a container's cgroup namespace, a delegated cgroup with no
//       processes of its own) and the directory is writable: memory.max, no swap, memory.oom.group;
//   v1: (a hybrid host, the memory controller on v1) its memory cgroup's directory is writable (root, or
//       delegated): memory.limit_in_bytes (and memsw where the kernel has it), oom_kill from
//       memory.oom_control.
// The cgroup also holds every process of the trial, setsid or double fork included: what the local
// scheduler measures and kills at the end. Elsewhere the local scheduler samples the resident memory of the
// trial's process tree instead (a watchdog). Either way an excess is recorded OUT_OF_MEMORY.
#include <filesystem>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace infrarsi::scheduler {

namespace fs = std::filesystem;

class MemoryCgroups {
  public:
    // Where trial cgroups can be made, or nullopt with `why` saying what is missing.
    static std::optional<MemoryCgroups> find(std::string* why);

    const fs::path& parent() const { return parent_; }
    int version() const { return version_; } // 1 or 2

    // Makes the cgroup `name` under parent() with memory.max = limit_bytes (and no swap, where the kernel
    // has swap accounting), emptied of what a predecessor left. Throws an Error when it cannot.
    fs::path create(const std::string& name, long long limit_bytes) const;

    struct Usage {
        long long peak_bytes = 0; // memory.peak where the kernel has it, else memory.current now
        long long oom_kills = 0;  // memory.events: processes the kernel killed at the limit
    };
    static Usage usage(const fs::path& cgroup);
    // Kills every process in the cgroup (cgroup.kill, or SIGKILL to each member where the kernel has none)
    // and removes it once empty; a cgroup that is gone already is fine.
    static void remove(const fs::path& cgroup);

    // The processes in the cgroup now (cgroup.procs); none when it is gone.
    static std::vector<pid_t> members(const fs::path& cgroup);

  private:
    MemoryCgroups(fs::path parent, int version) : parent_(std::move(parent)), version_(version) {}
    static std::optional<MemoryCgroups> find_v2(std::string* why);
    fs::path parent_;
    int version_ = 2;
};

} // namespace infrarsi::scheduler
