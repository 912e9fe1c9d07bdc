#pragma once
// The one Slurm client: talks to Slurm through its commands with parsable output (sbatch --parsable,
// squeue -o, sacct -P, scancel), never through libslurm. Where accounting is off (no slurmdbd), finished
// jobs are read from the job completion file (JobCompType=jobcomp/filetxt).
#include "slurm/job.hpp"

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::slurm {

struct SubmitRequest {
    std::string script; // path of the batch script
    std::vector<std::string> script_args;
    std::string job_name;
    std::string partition;
    int nodes = 1;
    std::optional<int> ntasks_per_node;
    std::optional<int> cpus_per_task;
    std::string mem;                        // "2000M": per node, Slurm's --mem
    std::string time_limit;                 // "00:05:00" or minutes
    std::optional<std::string> array;       // "0-7%1"
    std::string output;                     // -o pattern, e.g. "dir/%A_%a.out"
    std::string error;                      // -e pattern; empty: with output
    std::string workdir;                    // --chdir
    std::map<std::string, std::string> env; // exported into the job (--export=ALL,...)
    std::vector<std::string> extra_args;    // further sbatch options, e.g. "--infrarsi=trial"
    bool hold = false;
    // --requeue / --no-requeue; unset: the cluster's JobRequeue default (1: Slurm re-runs a batch job whose
    // node failed, after a delay, as the same job).
    std::optional<bool> requeue;
};

class Client {
  public:
    // Commands are looked up in PATH; SLURM_CONF from the environment selects the cluster.
    Client();

    // Submits and returns the job id ("123"; for arrays, the array job id). Throws infrarsi::Error with
    // sbatch's message when Slurm refuses.
    std::string submit(const SubmitRequest& request) const;

    // Every task of the given jobs, active or finished, one record each (array tasks expanded).
    std::vector<JobRecord> query(const std::vector<std::string>& job_ids) const;

    void cancel(const std::string& job_id) const;

    // Releases a job submitted held (every task of an array). A job that is already released, running or
    // finished needs nothing and is not an error; anything else (an unknown job, Slurm refusing or not
    // answering) throws infrarsi::Error naming the job and scontrol's message.
    void release(const std::string& job_id) const;

    // Polls until every task of job_id has finished or the timeout passes; returns the last records.
    std::vector<JobRecord> wait(const std::string& job_id, std::chrono::seconds timeout,
                                std::chrono::milliseconds poll = std::chrono::milliseconds(500)) const;

    // Where the job's standard output goes (scontrol's StdOut, with Slurm's patterns filled in), while
    // slurmctld still knows the job (up to MinJobAge after it ends); nullopt when it does not.
    std::optional<std::string> output_file(const std::string& job_id) const;

    // True when Slurm answers (squeue works).
    bool reachable(std::string* why = nullptr) const;

    // The build's view of the cluster's configuration (scontrol show config), cached.
    const std::map<std::string, std::string>& config() const;

  private:
    bool accounting_works() const;
    mutable std::optional<bool> accounting_;
    mutable std::map<std::string, std::string> config_;
};

// Parsers for the commands' outputs (pure; unit-tested against captured real outputs).
std::string parse_sbatch_parsable(const std::string& out);     // "123" or "123;cluster"
std::vector<JobRecord> parse_squeue(const std::string& out);   // squeue_format()
std::vector<JobRecord> parse_sacct(const std::string& out);    // sacct_format(), -P -n
std::vector<JobRecord> parse_jobcomp(const std::string& text); // jobcomp/filetxt lines
std::map<std::string, std::string> parse_scontrol_config(const std::string& out);
// StdOut= of `scontrol -o show job` output; nullopt when absent or empty.
std::optional<std::string> parse_scontrol_stdout(const std::string& out);
const char* squeue_format();
const char* sacct_format();

} // namespace infrarsi::slurm
