#pragma once
// The local scheduler's memory limit through the kernel: a cgroup v2 per trial, a child of this process's
// own cgroup, with memory.max at the contract's limit. Available only where this process may create one:
// its cgroup is on the unified (v2) hierarchy, the memory controller is enabled for its children (or this
// process may enable it: the root of a container's cgroup namespace, a delegated cgroup with no processes
// of its own) and the directory is writable. Elsewhere the local scheduler samples the trial's resident
// memory instead (a watchdog). Either way an excess is recorded OUT_OF_MEMORY.
#include <filesystem>
#include <optional>
#include <string>

namespace infrarsi::scheduler {

namespace fs = std::filesystem;

class MemoryCgroups {
  public:
    // Where trial cgroups can be made, or nullopt with `why` saying what is missing.
    static std::optional<MemoryCgroups> find(std::string* why);

    const fs::path& parent() const { return parent_; }

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

  private:
    explicit MemoryCgroups(fs::path parent) : parent_(std::move(parent)) {}
    fs::path parent_;
};

} // namespace infrarsi::scheduler
