#pragma once
// What Slurm tells us about a job (or one task of a job array), and what it means for a trial.
#include "util/file_digest.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace infrarsi::slurm {

// A job's lifecycle as Slurm reports it, reduced to what the orchestrator acts on.
enum class JobState {
    Pending,
    Running,
    Completing,
    Completed,
    Failed,
    Cancelled,
    Timeout,
    OutOfMemory,
    NodeFail,
    Preempted,
    BootFail,
    Deadline,
    Requeued,
    Suspended,
    Unknown
};

// How a finished job ended, read from Slurm's record (classify below); trial::classify turns it, with the
// rest of the evidence, into the trial's Outcome.
enum class JobEnd { Completed, OutOfMemory, Timeout, NodeFailure, Cancelled, Failed };

struct JobRecord {
    std::string job_id;       // "123" or, for an array task, "123_4"
    std::string array_job_id; // "123" for array tasks, else empty
    std::optional<int> array_task_id;
    JobState state = JobState::Unknown;
    std::string raw_state; // as printed by Slurm, e.g. "CANCELLED by 0"
    int exit_code = 0;     // from ExitCode=E:S
    int exit_signal = 0;
    std::string node_list;
    std::string reason;                     // squeue's reason for pending jobs
    double elapsed_s = 0;                   // wall time, when known
    std::optional<long long> max_rss_bytes; // sacct MaxRSS, when accounting works
    int restarts = 0; // times Slurm requeued and re-ran it (scontrol Restarts=, earlier completion records)
    // A step of the job was OOM-killed: its cgroup signature 0:125 in DerivedExitCode (the job completion
    // file) or a step OUT_OF_MEMORY / 0:125 (sacct). Ranks in an srun step end the job FAILED, not
    // OUT_OF_MEMORY, so this is how the job's record tells an OOM from a crash.
    bool step_oom_killed = false;
    std::string start_time, end_time;
    // The trial's result.json and log.txt when the task ended, as the local scheduler (the trial's parent)
    // read them; Slurm's records have none (the plugin's evidence has them: trial/evidence.hpp).
    std::optional<FileDigest> result_file, log_file;
};

bool is_finished(JobState s);
JobState parse_job_state(const std::string& text); // "OUT_OF_MEMORY", "CANCELLED by 0", "TO" ...
const char* to_string(JobState s);
const char* to_string(JobEnd o);

// How a finished job ended. Slurm's state decides first (OUT_OF_MEMORY, TIMEOUT, NODE_FAIL are facts only
// Slurm knows); a job that "FAILED" with exit 0:125, or with a step OOM-killed (step_oom_killed), is out of
// memory too.
JobEnd classify(const JobRecord& job);

// What a job's output says about a FAILED job (Slurm's oom-kill report among it) is read by trial::diagnose.

} // namespace infrarsi::slurm
