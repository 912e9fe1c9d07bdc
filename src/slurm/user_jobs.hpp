#pragma once
// The jobs a campaign's user submitted during a trial that the campaign did not submit: what a trial may have
// started itself (sbatch or salloc from inside the workload), outside the trial's private view. Read from
// what Slurm alone writes about each job (its id, submit time and state), never from the job's environment,
// which the job may clear. Not its name: a name is the owner's text, and one with a newline in it would print
// a line of its own, a job that does not exist.
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::slurm {

struct UserJob {
    std::string job_id;         // "123" or "123_4"
    std::string state;          // as Slurm prints it
    std::string submitted;      // Slurm's submit time, YYYY-MM-DDTHH:MM:SS local
    double submitted_epoch = 0; // the same, in seconds since the epoch
};

// Lines "ID|SUBMIT|STATE" (squeue -o '%i|%V|%T', sacct -o JobID,Submit,State -P). Lines that do not parse
// are skipped.
std::vector<UserJob> parse_user_jobs(const std::string& out);

// This user's jobs submitted at or after `since_epoch`: squeue (active ones and those finished within
// MinJobAge), and accounting's where it works (`accounting`). Throws infrarsi::Error when squeue fails.
std::vector<UserJob> user_jobs_submitted_since(double since_epoch, bool accounting);

// Of `jobs`, those submitted within [from_epoch, to_epoch] that are not the campaign's own (`own`: job ids
// or array job ids the campaign submitted). A job of an array counts once, by its array job id.
std::vector<UserJob> jobs_not_submitted_by(const std::vector<UserJob>& jobs,
                                           const std::vector<std::string>& own, double from_epoch,
                                           double to_epoch);

// Seconds since the epoch of a Slurm timestamp (local time), nullopt when it is not one.
std::optional<double> slurm_time_epoch(const std::string& t);

} // namespace infrarsi::slurm
