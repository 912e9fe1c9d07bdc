#include "slurm/job.hpp"

#include <algorithm>
#include <array>
#include <regex>
#include <string>
#include <utility>

namespace infrarsi::slurm {
namespace {

// Long and short (squeue %t) spellings of every state we act on.
constexpr std::array<std::pair<const char*, JobState>, 30> kStates{{
    {"PENDING", JobState::Pending},
    {"PD", JobState::Pending},
    {"RUNNING", JobState::Running},
    {"R", JobState::Running},
    {"COMPLETING", JobState::Completing},
    {"CG", JobState::Completing},
    {"COMPLETED", JobState::Completed},
    {"CD", JobState::Completed},
    {"FAILED", JobState::Failed},
    {"F", JobState::Failed},
    {"CANCELLED", JobState::Cancelled},
    {"CA", JobState::Cancelled},
    {"TIMEOUT", JobState::Timeout},
    {"TO", JobState::Timeout},
    {"OUT_OF_MEMORY", JobState::OutOfMemory},
    {"OOM", JobState::OutOfMemory},
    {"NODE_FAIL", JobState::NodeFail},
    {"NF", JobState::NodeFail},
    {"PREEMPTED", JobState::Preempted},
    {"PR", JobState::Preempted},
    {"BOOT_FAIL", JobState::BootFail},
    {"BF", JobState::BootFail},
    {"DEADLINE", JobState::Deadline},
    {"DL", JobState::Deadline},
    {"REQUEUED", JobState::Requeued},
    {"RQ", JobState::Requeued},
    {"REQUEUE_HOLD", JobState::Requeued},
    {"REQUEUE_FED", JobState::Requeued},
    {"SUSPENDED", JobState::Suspended},
    {"S", JobState::Suspended},
}};

} // namespace

JobState parse_job_state(const std::string& text) {
    // "CANCELLED by 0", "CANCELLED+": the first word is the state.
    auto end = text.find_first_of(" +");
    std::string word = text.substr(0, end);
    for (const auto& [name, state] : kStates)
        if (word == name) return state;
    if (word == "CONFIGURING" || word == "CF" || word == "RESIZING" || word == "STAGE_OUT" ||
        word == "SIGNALING" || word == "RESV_DEL_HOLD")
        return JobState::Running;
    return JobState::Unknown;
}

bool is_finished(JobState s) {
    switch (s) {
    case JobState::Completed:
    case JobState::Failed:
    case JobState::Cancelled:
    case JobState::Timeout:
    case JobState::OutOfMemory:
    case JobState::NodeFail:
    case JobState::Preempted:
    case JobState::BootFail:
    case JobState::Deadline:
        return true;
    default:
        return false;
    }
}

const char* to_string(JobState s) {
    switch (s) {
    case JobState::Pending:
        return "pending";
    case JobState::Running:
        return "running";
    case JobState::Completing:
        return "completing";
    case JobState::Completed:
        return "completed";
    case JobState::Failed:
        return "failed";
    case JobState::Cancelled:
        return "cancelled";
    case JobState::Timeout:
        return "timeout";
    case JobState::OutOfMemory:
        return "out_of_memory";
    case JobState::NodeFail:
        return "node_fail";
    case JobState::Preempted:
        return "preempted";
    case JobState::BootFail:
        return "boot_fail";
    case JobState::Deadline:
        return "deadline";
    case JobState::Requeued:
        return "requeued";
    case JobState::Suspended:
        return "suspended";
    case JobState::Unknown:
        return "unknown";
    }
    return "unknown";
}

const char* to_string(Outcome o) {
    switch (o) {
    case Outcome::Completed:
        return "completed";
    case Outcome::OutOfMemory:
        return "out_of_memory";
    case Outcome::Timeout:
        return "timeout";
    case Outcome::NodeFailure:
        return "node_failure";
    case Outcome::Cancelled:
        return "cancelled";
    case Outcome::Failed:
        return "failed";
    }
    return "failed";
}

Outcome classify(const JobRecord& job) {
    switch (job.state) {
    case JobState::Completed:
        return job.exit_code == 0 ? Outcome::Completed : Outcome::Failed;
    case JobState::OutOfMemory:
        return Outcome::OutOfMemory;
    case JobState::Timeout:
    case JobState::Deadline:
        return Outcome::Timeout;
    case JobState::NodeFail:
    case JobState::BootFail:
        return Outcome::NodeFailure;
    case JobState::Cancelled:
    case JobState::Preempted:
        return Outcome::Cancelled;
    default:
        break;
    }
    // Slurm's cgroup OOM handler reports ExitCode=0:125 on the batch step even where the job state was not
    // set to OUT_OF_MEMORY (e.g. an older slurmctld, or the state read from squeue's short form).
    if (job.exit_code == 0 && job.exit_signal == 125) return Outcome::OutOfMemory;
    // Ranks in an srun step: the step was OOM-killed, the job FAILED with whatever the launcher exited with.
    if (job.step_oom_killed) return Outcome::OutOfMemory;
    return Outcome::Failed;
}

} // namespace infrarsi::slurm
