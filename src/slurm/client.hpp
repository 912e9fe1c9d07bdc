#pragma once
// The one Slurm client: talks to Slurm through its commands with parsable output (sbatch --parsable,
// squeue -o, sacct -P, scancel), never through libslurm. Where accounting is off (no slurmdbd), finished
// jobs are read from the job completion file (JobCompType=jobcomp/filetxt).
#include "slurm/job.hpp"

#include <chrono>
#include <cstdint>
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

// What a parser skipped: lines it could not read (a field missing, a number out of range, no JobId first).
struct ParseStats {
    size_t skipped = 0;
    std::string first_problem; // "jobcomp line 7: bad exit code 'x'"
};

// The job completion file (jobcomp/filetxt), read incrementally: each read_new() parses only the lines
// appended since the last one (a partly written last line waits for its end), and starts over when the file
// was rotated or truncated. It keeps the records of jobs numbered from `from_job` on (older ones asked for
// later: read again from the start).
class JobCompletionFile {
  public:
    explicit JobCompletionFile(std::string path) : path_(std::move(path)) {}
    const std::string& path() const { return path_; }
    void read_new(std::uint64_t from_job, ParseStats* stats = nullptr);
    const std::vector<JobRecord>& records() const { return records_; }
    std::uint64_t offset() const { return offset_; } // bytes consumed so far

  private:
    std::string path_;
    std::uint64_t offset_ = 0, inode_ = 0, from_job_ = 0;
    std::size_t lines_ = 0;
    std::string partial_;
    std::vector<JobRecord> records_;
    std::map<std::string, std::size_t> index_;
};

// Polling back-off: an unchanged answer doubles the interval (from `poll`, up to kMaxPollInterval), any
// change returns it to `poll`.
// 8 s: one `squeue --me` per campaign every few seconds is what a site tolerates, and an ended trial is seen
// within 8 s.
inline constexpr std::chrono::milliseconds kMaxPollInterval{8000};
std::chrono::milliseconds next_poll_interval(std::chrono::milliseconds current,
                                             std::chrono::milliseconds poll, bool changed);

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

    // Polls until every task of job_id has finished or the timeout passes; returns the last records. Polls
    // every `poll` while the job's states change, backing off (next_poll_interval) while they do not; the
    // back-off is kept across calls for the same job, so waiting in short slices does not poll faster.
    std::vector<JobRecord> wait(const std::string& job_id, std::chrono::seconds timeout,
                                std::chrono::milliseconds poll = std::chrono::milliseconds(500)) const;

    // Where the job's standard output goes (scontrol's StdOut, with Slurm's patterns filled in), while
    // slurmctld still knows the job (up to MinJobAge after it ends); nullopt when it does not.
    std::optional<std::string> output_file(const std::string& job_id) const;

    // True when Slurm answers (squeue works).
    bool reachable(std::string* why = nullptr) const;

    // The build's view of the cluster's configuration (scontrol show config), cached.
    const std::map<std::string, std::string>& config() const;
    // Whether sacct answers (accounting_configured).
    bool accounting_works() const;

    // The data_parser the client asks `squeue --json=` for on this Slurm (pinned_data_parser of `squeue
    // --version`); nullopt: the parsable text (22.05, untested releases, or a JSON answer Slurm refused).
    std::optional<std::string> squeue_data_parser() const;

  private:
    mutable std::optional<std::string> squeue_parser_; // "" once the text is chosen
    mutable std::optional<bool> accounting_;
    mutable std::map<std::string, std::string> config_;
    mutable std::string last_skip_report_;
    mutable std::optional<JobCompletionFile> jobcomp_;
    struct PollState {
        std::chrono::steady_clock::time_point last{};
        std::chrono::milliseconds interval{0};
        std::string states; // the last answer's job states, to tell a change
        std::vector<JobRecord> records;
    };
    mutable std::map<std::string, PollState> polls_; // per job waited on
};

// Parsers for the commands' outputs (pure; unit-tested against captured real outputs). A line they cannot
// read is skipped and counted in `stats`, never thrown: other users' jobs share this output.
std::string parse_sbatch_parsable(const std::string& out); // "123" or "123;cluster"
std::vector<JobRecord> parse_squeue(const std::string& out, ParseStats* stats = nullptr); // squeue_format()
std::vector<JobRecord> parse_sacct(const std::string& out, ParseStats* stats = nullptr);  // sacct_format()
// `squeue --json`: openapi v0.0.38 (Slurm 22.05, plain numbers and a string state) and data_parser v0.0.40 to
// v0.0.42 (23.11 to 25.11: counts as {"set", "infinite", "number"}, the state as [base, flags...], exit codes
// as
// {"return_code", "signal"}). Its free text is in fields of its own. A pending array's tasks are listed one
// record each, as `squeue -r` does. Read with a depth and size limit.
std::vector<JobRecord> parse_squeue_json(const std::string& out, ParseStats* stats = nullptr);
// jobcomp/filetxt lines, and scontrol show job -o lines. Job names are written unescaped there: a record's
// identity comes only from where Slurm alone writes (see client.cpp).
std::vector<JobRecord> parse_jobcomp(const std::string& text, ParseStats* stats = nullptr);
std::map<std::string, std::string> parse_scontrol_config(const std::string& out);
// Whether that configuration stores accounting (sacct answers): AccountingStorageType is set and not
// accounting_storage/none (22.05's word for none) or "(null)" (24.11's).
bool accounting_configured(const std::map<std::string, std::string>& config);
// StdOut= of `scontrol -o show job` output; nullopt when absent or empty.
std::optional<std::string> parse_scontrol_stdout(const std::string& out);
// `sinfo -h -N -o '%N %t'`: the nodes a job can start on (idle, mix, alloc, completing; not down, drained,
// draining, failing or not responding, `*`), each once, in sinfo's order.
std::vector<std::string> parse_sinfo_nodes(const std::string& out);
// The data_parser `squeue --json=` is pinned to for a Slurm version ("slurm 24.11.5": "v0.0.41"); nullopt
// where the client reads squeue's text (22.05 has no data_parser argument).
std::optional<std::string> pinned_data_parser(const std::string& version);
const char* squeue_format();
const char* sacct_format();

} // namespace infrarsi::slurm
