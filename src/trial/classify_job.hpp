#pragma once
// The one classify() (outcome.hpp) for a job that left only files: a scheduler's record of it (asked of Slurm
// by job id, or read from a file in the local scheduler's end-record shape), its output files and, when it
// ran under the trial wrapper, its result.json. `infrarsi trial classify` prints the answer; the benchmark
// scripts label their runs with it, so a recorded table and a campaign call the same runs out of memory.
#include "measure/log_format.hpp"
#include "slurm/job.hpp"
#include "trial/outcome.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace infrarsi::trial {

struct JobFiles {
    std::vector<std::string> outputs; // the job's output files (Slurm's -o file, a trial's log.txt), in order
    // The trial wrapper's result.json. Empty: the job ran without the wrapper, and no result file is
    // expected (a completed job is then held to its step lines only).
    std::string result;
    int warmup_steps = 0; // steps before the steady state (the contract's invariants.warmup_steps)
    // How the outputs print their steps (the contract's [metrics]): the project's lines by default, or a
    // framework's log (torchtitan, Megatron-LM, llm.c, ...).
    measure::LogFormat format;
};

// A scheduler's record from JSON: {"state": "OUT_OF_MEMORY", "exit_code": 0, "signal": 0, "elapsed_s": 12.5,
// "max_rss_bytes": 123, "node": "n1"} (the local scheduler's end record; state as Slurm names it). Throws an
// Error naming `where` and the field.
slurm::JobRecord job_record_from_json(const nlohmann::json& j, const std::string& where);
nlohmann::json to_json(const slurm::JobRecord& r);

// The Slurm record of a finished job; an Error when Slurm does not know it or it has not ended.
slurm::JobRecord finished_slurm_record(const std::string& job_id);

// classify() over the files: steps from result.json, else from the outputs' step lines in files.format;
// output files read bounded (a FIFO or a device is an Error).
struct ClassifiedJob {
    Verdict verdict;
    int steps = 0; // step lines measured
};
ClassifiedJob classify_job(const slurm::JobRecord& record, const JobFiles& files, const Limits& limits);

// {"outcome", "violation", "detail", "steps", "log" (when the output said something), "record"}.
nlohmann::json to_json(const ClassifiedJob& c);

// `infrarsi trial classify`: exactly one of job (asked of Slurm) and record_file (job_record_from_json of the
// file); mem as written ("1400M"), for the detail and the limit.
struct ClassifyRequest {
    std::string job;
    std::string record_file;
    JobFiles files;
    std::string mem;
    std::string time_limit;
    int steps = 0;
};
nlohmann::json classify_request(const ClassifyRequest& request);

} // namespace infrarsi::trial
