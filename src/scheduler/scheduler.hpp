#pragma once
// Where trials run: a Scheduler takes a batch of trials as one array job and reports each task's end as a
// Slurm-style JobRecord, so the campaign has one vocabulary whichever runs them. Two backends:
//   slurm  the cluster, through slurm::Client (sbatch --array, held then released; squeue, sacct, scancel);
//   local  child processes on this machine (a workstation, a GPU box without Slurm): one task at a time by
//          default, under the memory limit (a cgroup v2 where it may make one, else a watchdog over the
//          task's processes) and the time limit,
//          with the same wrapper, output files and result files; its state is kept on disk, so a restarted
//          orchestrator re-attaches to a batch as it does to a Slurm job.
#include "slurm/job.hpp"
#include "slurm/plugstack.hpp"
#include "slurm/user_jobs.hpp"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace infrarsi::scheduler {

namespace fs = std::filesystem;

// One array job of a batch: `tasks` array tasks of `script` with indices first_index .. first_index + tasks
// - 1, each told its index (SLURM_ARRAY_TASK_ID under Slurm, INFRARSI_TRIAL_INDEX locally). A batch whose
// trials differ in sbatch options is several array jobs, one per option set (campaign/batch_runner.cpp).
struct ArrayJob {
    std::string name; // unique per array: a held job of this name is a predecessor that never ran
    fs::path script;
    fs::path workdir;
    std::string output; // per-task output file; %A: the job id, %a: the task index
    int first_index = 0;
    int tasks = 0;
    int max_concurrent = 1;
    // Runs after this job has ended (the batch's previous array, so the throttle holds across its arrays);
    // empty: at once. The local backend runs tasks only while the campaign waits on their job, so it needs no
    // dependency: the campaign waits on a batch's arrays in order.
    std::string after;
    std::map<std::string, std::string> env; // added to the submitter's environment
    // Resources, as the contract states them.
    std::string partition;
    int nodes = 1;
    std::optional<int> ntasks_per_node;
    std::optional<int> cpus_per_task;
    std::string mem; // as written ("300M")
    long long mem_bytes = 0;
    std::string time_limit; // as written
    long long time_limit_s = 0;
    std::vector<std::string> sbatch_args; // Slurm only: further sbatch options
    // The knobs' sbatch options of this array's trials ("--cpus-per-task=2", "--exclusive"): Slurm gets them
    // as options (over the resources above); the local backend gives the job the environment Slurm would
    // set for them (slurm_environment) and refuses one it cannot honour.
    std::vector<std::string> options;
    // Where this array runs (Slurm only: "--nodelist=n2", "--exclude=n1,n2"): a verification pins each A/B
    // pair to one node. The local backend has one host and needs none.
    std::vector<std::string> placement;
};

// Which of `slow` to keep jobs off: those the partition has (`partition_nodes`, Scheduler::nodes), as long as
// `needed` nodes (a trial's) remain; none when the partition's nodes are unknown or too few would remain (a
// job that could never start is worse than a slow node).
std::vector<std::string> nodes_to_avoid(const std::vector<std::string>& slow,
                                        const std::vector<std::string>& partition_nodes, int needed);

// `placement` with `nodes` left out of it: an --exclude= added (or merged into the one there); a placement
// that names its nodes (--nodelist=, -w) is kept as it is, since whoever named them chose them.
std::vector<std::string> excluding(std::vector<std::string> placement, const std::vector<std::string>& nodes);

// The environment Slurm gives a batch job for the job's resources and knob options (SLURM_NTASKS_PER_NODE,
// SLURM_CPUS_PER_TASK, SLURM_GPUS_PER_NODE, ...), for a backend that runs it without Slurm. Throws an Error
// naming an option that has no such meaning there (what to do: --scheduler slurm).
std::map<std::string, std::string> slurm_environment(const ArrayJob& job);

class Scheduler {
  public:
    virtual ~Scheduler() = default;
    virtual std::string name() const = 0; // "slurm", "local"
    // For people, once per run: the name and how it holds the limits (the local backend's memory limit:
    // a cgroup or a watchdog, and why).
    virtual std::string description() const { return name(); }
    // Whether jobs can be submitted now; `why` says what is wrong when not.
    virtual bool reachable(std::string* why) const = 0;
    // Submits the batch held: nothing runs before release(). A held job of the same name (left by a process
    // that died before recording the id it got) is cancelled first. Returns the job id.
    virtual std::string submit_held(const ArrayJob& job) = 0;
    // Lets a held job run; a job already released, running or finished needs nothing.
    virtual void release(const std::string& job_id) = 0;
    // Waits up to `timeout` for every task to finish, polling every `poll`; returns every task's record.
    virtual std::vector<slurm::JobRecord> wait(const std::string& job_id, std::chrono::seconds timeout,
                                               std::chrono::milliseconds poll) = 0;
    // Cancels a job, or one task of it ("12_3").
    virtual void cancel(const std::string& job_id) = 0;
    // The nodes a job of `partition` (empty: the default) can run on now, in the scheduler's order (idle,
    // mixed or allocated: not down, drained or failing). Empty: one host, or the scheduler places jobs.
    virtual std::vector<std::string> nodes(const std::string& partition) const {
        (void)partition;
        return {};
    }
    // Where the InfraRSI plugin keeps its spool for this scheduler's jobs (slurm/plugstack.hpp): `given`
    // (--spool) when not empty, else what the scheduler's configuration says; empty with why when none (the
    // local backend: its evidence is the trial's parent's).
    virtual slurm::SpoolDiscovery plugin_spool(const std::string& given) const {
        if (!given.empty()) return {given, "--spool"};
        return {"", fmt::format("the {} scheduler has no plugin", name())};
    }
    // This user's jobs submitted at or after `since_epoch` (slurm/user_jobs.hpp): what a trial may have
    // submitted itself. The local backend has no queue a trial could submit to: none.
    virtual std::vector<slurm::UserJob> jobs_submitted_since(double since_epoch) const {
        (void)since_epoch;
        return {};
    }
};

std::unique_ptr<Scheduler> slurm_scheduler();
// How the local backend holds the memory limit: a cgroup v2 per trial where this process may create one
// (Auto), else the watchdog; Watchdog: always the watchdog (tests of the watchdog itself).
enum class LocalMemoryLimit { Auto, Watchdog };
// Keeps its jobs' state under state_dir (created when missing).
std::unique_ptr<Scheduler> local_scheduler(const fs::path& state_dir,
                                           LocalMemoryLimit memory = LocalMemoryLimit::Auto);

// "slurm", "local" or "auto" (Slurm when it answers, else local). `why` gets the reason for auto's choice.
// Throws an Error for another name.
std::unique_ptr<Scheduler> make_scheduler(std::string_view which, const fs::path& local_state_dir,
                                          std::string* why = nullptr);

} // namespace infrarsi::scheduler
