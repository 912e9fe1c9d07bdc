// What a batch job sees of its resources under Slurm, for a backend that runs it without Slurm: the input
// environment variables sbatch sets for the options a trial is given (sbatch(1), "INPUT ENVIRONMENT
// VARIABLES" and "OUTPUT ENVIRONMENT VARIABLES"). An option with no meaning off the cluster is refused.
#include "scheduler/scheduler.hpp"

#include "util/error.hpp"

#include <fmt/format.h>

#include <array>
#include <string_view>

namespace infrarsi::scheduler {
namespace {

struct OptionVariable {
    std::string_view option;
    std::string_view variable;
};

// One node's worth of each: the local backend runs 1-node contracts only.
constexpr std::array<OptionVariable, 8> option_variables{{
    {"--ntasks-per-node", "SLURM_NTASKS_PER_NODE"},
    {"--cpus-per-task", "SLURM_CPUS_PER_TASK"},
    {"--gpus-per-node", "SLURM_GPUS_PER_NODE"},
    {"--gpus-per-task", "SLURM_GPUS_PER_TASK"},
    {"--gpus", "SLURM_GPUS"},
    {"--cpus-per-gpu", "SLURM_CPUS_PER_GPU"},
    {"--ntasks", "SLURM_NTASKS"},
    {"--threads-per-core", "SLURM_THREADS_PER_CORE"},
}};

} // namespace

std::map<std::string, std::string> slurm_environment(const ArrayJob& job) {
    std::map<std::string, std::string> env;
    if (job.ntasks_per_node) env["SLURM_NTASKS_PER_NODE"] = std::to_string(*job.ntasks_per_node);
    if (job.cpus_per_task) env["SLURM_CPUS_PER_TASK"] = std::to_string(*job.cpus_per_task);
    for (const auto& o : job.options) {
        const auto eq = o.find('=');
        const std::string name = o.substr(0, eq);
        const OptionVariable* known = nullptr;
        for (const auto& ov : option_variables)
            if (ov.option == name) known = &ov;
        if (!known || eq == std::string::npos) {
            std::string list;
            for (const auto& ov : option_variables)
                list += (list.empty() ? "" : ", ") + std::string(ov.option);
            throw Error(
                fmt::format("sbatch option {} (a knob of the contract) has no meaning outside Slurm", o),
                "--scheduler local", "--scheduler slurm, or knobs on the options it can give a job: " + list);
        }
        env[std::string(known->variable)] = o.substr(eq + 1);
    }
    // What Slurm derives from them on one node.
    if (auto it = env.find("SLURM_NTASKS_PER_NODE"); it != env.end()) {
        env.emplace("SLURM_NTASKS", it->second);
        env["SLURM_TASKS_PER_NODE"] = it->second;
    }
    return env;
}

} // namespace infrarsi::scheduler
