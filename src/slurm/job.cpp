#include "slurm/job.hpp"

#include "util/enum_names.hpp"

#include <algorithm>
#include <array>
#include <regex>
#include <string>
#include <utility>

namespace infrarsi::slurm {
namespace {

// The names people read (status lines, the trial's detail), one table each.
constexpr util::EnumNames<JobState, 15> job_state_names{{{
    {JobState::Pending, "pending"},
    {JobState::Running, "running"},
    {JobState::Completing, "completing"},
    {JobState::Completed, "completed"},
    {JobState::Failed, "failed"},
    {JobState::Cancelled, "cancelled"},
    {JobState::Timeout, "timeout"},
    {JobState::OutOfMemory, "out_of_memory"},
    {JobState::NodeFail, "node_fail"},
    {JobState::Preempted, "preempted"},
    {JobState::BootFail, "boot_fail"},
    {JobState::Deadline, "deadline"},
    {JobState::Requeued, "requeued"},
    {JobState::Suspended, "suspended"},
    {JobState::Unknown, "unknown"},
}}};
constexpr util::EnumNames<JobEnd, 6> job_end_names{{{
    {JobEnd::Completed, "completed"},
    {JobEnd::OutOfMemory, "out_of_memory"},
    {JobEnd::Timeout, "timeout"},
    {JobEnd::NodeFailure, "node_failure"},
    {JobEnd::Cancelled, "cancelled"},
    {JobEnd::Failed, "failed"},
}}};

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
    return job_state_names.name(s).data(); // a literal of the table: NUL-terminated
}

const char* to_string(JobEnd o) {
    return job_end_names.name(o).data();
}

JobEnd classify(const JobRecord& job) {
    switch (job.state) {
    case JobState::Completed:
        return job.exit_code == 0 ? JobEnd::Completed : JobEnd::Failed;
    case JobState::OutOfMemory:
        return JobEnd::OutOfMemory;
    case JobState::Timeout:
    case JobState::Deadline:
        return JobEnd::Timeout;
    case JobState::NodeFail:
    case JobState::BootFail:
        return JobEnd::NodeFailure;
    case JobState::Cancelled:
    case JobState::Preempted:
        return JobEnd::Cancelled;
    default:
        break;
    }
    // Slurm's cgroup OOM handler reports ExitCode=0:125 on the batch step even where the job state was not
    // set to OUT_OF_MEMORY (e.g. an older slurmctld, or the state read from squeue's short form).
    if (job.exit_code == 0 && job.exit_signal == 125) return JobEnd::OutOfMemory;
    // Ranks in an srun step: the step was OOM-killed, the job FAILED with whatever the launcher exited with.
    if (job.step_oom_killed) return JobEnd::OutOfMemory;
    return JobEnd::Failed;
}

} // namespace infrarsi::slurm
