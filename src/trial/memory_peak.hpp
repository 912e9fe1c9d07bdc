#pragma once
// The job's peak memory as Slurm's cgroup counted it: the figure Slurm enforces `--mem` with, so the one a
// trial is checked against (docs/orchestrator.md, "Which memory figure"). The trial wrapper runs inside the
// job's cgroup; the job's own cgroup (the `job_<id>` ancestor of the wrapper's) covers every step and rank of
// the job on this node: memory.max_usage_in_bytes under cgroup v1, memory.peak under v2 (Linux 5.19+).
#include <filesystem>
#include <optional>
#include <string>

namespace infrarsi::trial {

// The job cgroup's directory from the text of /proc/self/cgroup, under `root` (the cgroup mount,
// /sys/fs/cgroup): v1's memory controller line ("4:memory:/slurm_n1/uid_0/job_7/step_batch") or v2's
// unified line ("0::/system.slice/.../job_7/step_batch/user/task_0"). nullopt when no line names a
// `job_<digits>` cgroup (not a Slurm job with the cgroup plugins).
std::optional<std::filesystem::path> job_cgroup_dir(const std::string& proc_cgroup,
                                                    const std::filesystem::path& root);

// A memory cgroup's peak and OOM kills, the one reader of them (the plugin's evidence, the trial wrapper,
// the local scheduler's trial cgroups). cgroup v1: memory.max_usage_in_bytes and memory.oom_control's
// oom_kill (Linux 4.13+); v2: memory.peak (Linux 5.19+) and memory.events' oom_kill. memory.failcnt (v1)
// and memory.events' max count hits of the limit, which reclaim may have answered without a kill: not OOM.
struct CgroupMemory {
    int version = 0;                    // 1 or 2; 0: neither layout's files are there
    std::optional<double> peak_bytes;   // nullopt when the kernel has none or it is not a number
    std::optional<long long> oom_kills; // processes the kernel killed at the cgroup's limit
};
CgroupMemory read_cgroup_memory(const std::filesystem::path& cgroup_dir);

// The peak of that cgroup in bytes; nullopt when it cannot be read (no such file, not a number).
std::optional<double> cgroup_peak_bytes(const std::filesystem::path& cgroup_dir);

// Both, for this process.
std::optional<double> job_cgroup_peak_bytes();

} // namespace infrarsi::trial
