#pragma once
// The task contract (TOML): what the workload is, where it runs, what may change (knobs, patches, editable
// scope), what must not (protected files, loss and step invariants), and the budget. Loading validates all
// of it; every error names file:line and what was expected. Format: docs/contract.md.
#include "measure/log_format.hpp"
#include "space/space.hpp"
#include "util/enum_names.hpp"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::contract {

namespace fs = std::filesystem;

// per_step: each step's loss against the baseline's; last_k_mean: the mean of the last k steps; final_eval:
// the final evaluation loss within a tolerance calibrated from the doctor's repeats at different seeds.
enum class LossMode { PerStep, LastKMean, FinalEval };

// [workload] keep_job_files: what stays of the files a trial's job wrote in its trial directory (its working
// directory) once the campaign has read the trial (trial/job_files.hpp): the small ones within a bound, all
// of them, or none. The trial's result.json and log always stay.
enum class KeepJobFiles { Small, All, None };
inline constexpr util::EnumNames<KeepJobFiles, 3> keep_job_files_names{
    {{{KeepJobFiles::Small, "small"}, {KeepJobFiles::All, "all"}, {KeepJobFiles::None, "none"}}}};

struct Workload {
    fs::path source;                             // the baseline tree, copied into sandboxes
    std::vector<std::vector<std::string>> build; // commands run in a sandbox; {source} {build} substituted
    std::vector<std::string> command;            // the command a trial runs (or empty with sbatch_script)
    fs::path sbatch_script;                      // a user batch script the trial wrapper runs with bash
    std::vector<std::string> args; // fixed arguments after the command or script, before the knobs' arguments
    std::string binary_env;        // env var through which the script finds the built binary
    std::string binary;            // path of the built binary ({build}/...)
    std::map<std::string, std::string> env; // fixed environment of every trial
    // What stays of the files a trial's job wrote in its trial directory once the trial is read.
    KeepJobFiles keep_job_files = KeepJobFiles::Small;
};

struct Resources {
    std::string partition; // empty: the cluster's default
    int nodes = 1;
    int ntasks_per_node = 1;
    std::optional<int> cpus_per_task;
    std::string mem;         // Slurm --mem per node, as written ("2000M")
    long long mem_bytes = 0; // the memory limit a trial must fit under
    std::string time_limit;  // Slurm time limit as written
    long long time_limit_s = 0;
    int max_concurrent = 1;               // array throttle for search batches (timing needs exclusive cores)
    std::vector<std::string> sbatch_args; // further sbatch options for every trial job
    // The hardware's peak FLOP/s for one trial's allocation (all its nodes): MFU's one denominator, the same
    // for the baseline and every candidate. 0: measured once by the doctor (the baseline runs' own peak).
    double peak_flops = 0;
    // The memory limit per GPU (`gpu_mem`, "80G"): with it, a trial's memory is the GPU figure its step
    // lines report (the [metrics] `memory` group: the framework's allocator peak), a GPU out-of-memory is
    // censored at it, and the search models that memory instead of the host's. 0: host memory (`mem`).
    std::string gpu_mem;
    long long gpu_mem_bytes = 0;
};

// The limit the memory model works under and a promoted candidate's peak must stay below: `gpu_mem` when
// the contract sets one, else `mem`; and as written, for messages.
long long modeled_memory_limit_bytes(const Resources& r);
const std::string& modeled_memory_limit_text(const Resources& r);

struct Invariants {
    int steps = 0;
    std::string steps_env; // the workload's step-count variable, forced to `steps`
    long long seed = 0;
    std::string seed_env;
    std::string seed_arg; // an argument template carrying the seed ("--seed={}"), after the knobs' arguments
    int warmup_steps = 0; // dropped from timing statistics (cold start)
    std::string step_prefix = "INFRARSI_STEP";
    std::string summary_prefix = "INFRARSI_SUMMARY";
    double loss_tolerance = 0.02; // relative
    LossMode loss_mode = LossMode::LastKMean;
    int loss_last_k = 5;
    // A patch set's equivalence check (docs/contract.md): its losses and the baseline's, both at the
    // baseline's knobs and one fresh seed, must agree at every step within this relative tolerance. load()
    // sets it: 1e-5 when the contract does not say (kDefaultEquivalenceTolerance in contract.cpp).
    double equivalence_tolerance = 1e-5;
};

struct Budget {
    int trials = 0;         // search trials (re-queued node failures are not counted)
    double node_hours = 0;  // 0: no limit
    double wall_time_s = 0; // 0: no limit
    int batch_size = 4;     // candidates per job array
};

struct Repeats {
    int doctor = 5;     // baseline repeats for noise calibration
    int verify = 3;     // A/B pairs per verified candidate
    int verify_top = 2; // how many of the best candidates are verified
};

// [verify]: the promotion rule (verify/sequential.hpp; docs/contract.md, docs/orchestrator.md).
struct VerifySettings {
    double min_speedup = 0.03; // the smallest gain worth applying: the lower bound must exceed 1 + this
    double alpha = 0.01;       // one-sided error over the whole campaign (every candidate, every look)
    int max_pairs = 24;        // A/B pairs a candidate's sequence may take, the re-check's block included
};

// [memory.transformer]: a memory prior from the model's dimensions, for a job with no estimate command
// (model/transformer_memory.hpp; docs/contract.md).
struct TransformerMemoryPrior {
    double parameters = 0; // 0: from the dimensions
    int layers = 0, hidden = 0, heads = 0, seq_len = 0, vocab = 0;
    int activation_bytes = 2, parameter_bytes = 2, optimizer_bytes = 12;
    long long runtime_bytes = 0; // per rank
    int zero_stage = 0;
    int micro_batch = 1;    // when no knob is the micro-batch
    std::string ranks_knob; // the knob whose value is the ranks per node; empty: resources.ntasks_per_node
};

// [nccl]: whether the job communicates through NCCL, and what the doctor does when the baseline's NCCL fell
// back to a slower transport than the nodes have (trial/nccl_fallback.hpp; docs/orchestrator.md, doctor).
struct NcclSettings {
    bool used = false;            // [nccl] used; also true with an NCCL preset or a knob on an NCCL_ variable
    bool stop_on_fallback = true; // [nccl] fallback = "stop" (default) or "warn"
};

// [agent]: a site's coding agent that writes patches (docs/agent.md). The campaign calls `command` after the
// doctor and after each search batch, and when the space has no untried candidate left, until `calls` or
// `token_budget` is spent; every patch it returns goes through the scope check, build, equivalence check and
// verification like a catalog patch.
struct AgentSettings {
    std::vector<std::string> command;  // argv; {contract_dir} substituted; empty: no agent
    std::string name;                  // the agent's name: the bank keeps its calibration by it
    std::string goal;                  // the user's request, in their words
    int calls = 4;                     // at most this many calls in a campaign
    long long call_time_limit_s = 600; // a call killed with its whole process tree after this
    int max_patches_per_call = 4;      // patches beyond this in one answer are refused
    long long token_budget = 0;        // 0: none; the calls end once the agent's reported usage passes it
    bool enabled() const { return !command.empty(); }
};

struct Contract {
    fs::path file; // absolute path of the contract
    fs::path dir;  // its directory; relative paths are relative to it
    std::string name;
    Workload workload;
    Resources resources;
    space::Space space;     // knobs, constants, constraints (patches filled after the scope check)
    fs::path patch_catalog; // empty: no patches
    std::vector<std::string> patch_candidates; // catalog ids to search over; empty: the whole catalog
    std::vector<std::string> editable; // glob patterns (relative to the workload source) a patch may touch
    std::vector<std::string> protected_files; // relative to the workload source; hashed at init
    Invariants invariants;
    // [metrics]: how the steps are read from the job's output (default: the project's INFRARSI_STEP lines,
    // with the prefixes of [invariants]).
    measure::LogFormat metrics;
    Budget budget;
    Repeats repeats;
    VerifySettings verify;
    std::vector<std::string> memory_estimate; // argv printing {"estimated_peak_bytes":N}; knob env set
    std::optional<TransformerMemoryPrior> memory_transformer; // the prior when there is no command
    std::vector<std::string> knob_presets; // [knobs] include: the presets (space/presets.hpp) in the space
    NcclSettings nccl;
    AgentSettings agent;
};

// Whether the doctor reads the baseline's NCCL output: [nccl] used, an NCCL preset, or a knob that sets an
// NCCL_ variable.
bool uses_nccl(const Contract& c);

// A contract is a user's file: at most this size, and its keys and nesting bounded (util/toml_limits.hpp)
// before toml++ parses it.
inline constexpr std::size_t kMaxContractBytes = 1u << 20;
// Parses and validates; throws infrarsi::Error naming file:line and what was expected.
Contract load(const fs::path& file);
// The same for the text `file` had (a campaign keeps its contract's text from init, so it can still describe
// what it ran after the file was edited); relative paths resolve against `file`'s directory.
Contract load_text(const std::string& text, const fs::path& file);

// "2000M", "4G", "512K", "1000" (MiB, as Slurm) -> bytes. Throws on anything else, and on a size that does
// not fit in a long long (never wraps).
long long parse_memory(const std::string& text);
// Slurm time formats, as Slurm reads them: "MM", "MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM", "D-HH:MM:SS" ->
// seconds ("0-12" is twelve hours). Every field in range; throws Error otherwise.
long long parse_time(const std::string& text);

// {source}, {build}, {contract_dir} replaced in each argument.
std::vector<std::string> substitute(const std::vector<std::string>& argv,
                                    const std::map<std::string, std::string>& vars);

} // namespace infrarsi::contract
