#pragma once
// Which Slurm node this slurmstepd serves, from what root controls. The job's environment is not it: a user
// sets SLURMD_NODENAME as they like, and an `srun` inside a batch job carries the batch host's value to every
// node of the step.
#include <optional>
#include <string>
#include <string_view>

namespace infrarsi::spank {

// The node name in slurmstepd's own cgroup membership (the text of /proc/self/cgroup): Slurm's cgroup
// plugins name the node in the path when several slurmd share a host (v1: "/slurm_<node>/uid_...", v2:
// "/system.slice/<node>_slurmstepd.scope/..."). nullopt when no line names one; a production node then
// has one slurmd, and its host name is the node.
std::optional<std::string> node_from_cgroup(std::string_view proc_self_cgroup);

// node_from_cgroup of this process, else the host name.
std::string this_node();

} // namespace infrarsi::spank
