#pragma once
// What a tuning expert reads in a job script: the knobs its training launch shows (the program's arguments in
// every style: `--name=value`, `--name value`, flags, llm.c's short options, Hydra/OmegaConf `key=value`
// overrides; and the performance variables the script exports: NCCL's, OMP_NUM_THREADS, the allocator's),
// each with the values the program accepts in its own vocabulary (per-framework tables: recompute, dtype,
// ZeRO stage, FSDP sharding, attention backends, ...) and the way a trial's value reaches the program. What
// the script fixes where a trial cannot reach it (a flag it passes, a variable it assigns, an export) is
// named with the edit that lets the knob decide. `infrarsi init --from` writes these into the draft
// (contract/draft.hpp).
#include "contract/batch_script.hpp"

#include <optional>
#include <string>
#include <vector>

namespace infrarsi::contract {

// What an argument means for tuning; the first group fixes the run rather than tuning it.
enum class Role {
    Steps,
    Seed,
    LogInterval, // how often the program prints a step line: a short trial must print every step
    GlobalBatch,
    MicroBatch,
    Accumulation,
    Recompute,
    Dtype,
    ZeroStage,
    Fsdp,
    TensorParallel,
    PipelineParallel,
    ContextParallel,
    ExpertParallel,
    VirtualPipeline,
    SequenceParallel,
    Threads,
    Workers,
    Prefetch,
    Bucket,
    Compile,
    Fused,
    Overlap,
    Memory,
    Communication // NCCL's and PyTorch's communication variables
};

// The first argument of the launch with this role (Steps, Seed, LogInterval, GlobalBatch: what fixes the
// run), or nullptr.
const ProgramArg* argument_with_role(const BatchScript& s, Role r);

enum class SuggestedKind { Integer, Pow2, Choice, Flag };

struct SuggestedKnob {
    std::string name; // in the draft: "micro_batch", "tensor_parallel", "nccl_algo"
    Role role = Role::MicroBatch;
    SuggestedKind kind = SuggestedKind::Integer;
    long long min = 0, max = 0, baseline_number = 0; // Integer, Pow2
    std::vector<std::string> values;                 // Choice: today's setting first
    std::string baseline;                            // Choice: as the script writes it; Flag: "true"/"false"
    // Delivery: exactly one of arg (argv elements with "{}", or a flag's words) and env.
    std::vector<std::string> arg;
    std::string env;
    std::string unset;       // an env Choice's value that leaves the variable out ("default")
    std::string from;        // where the script sets it: "--micro-batch-size 4 (line 12)"
    std::string what;        // "the micro-batch per rank"
    std::string values_from; // what the values are: "Megatron-LM's --recompute-granularity"
    // What the user must change in the script for a trial's value to reach the program (the script passes a
    // flag a trial cannot take away, assigns the variable, exports it): one line each.
    std::vector<std::string> edits;
};

struct KnobDiscovery {
    std::vector<SuggestedKnob> knobs;
    std::vector<std::string> presets; // knob presets the script's exports touch ("nccl-algo", ...)
    // The parallel sizes a trial multiplies into its GPUs (tensor x pipeline x context), for the
    // `product <= gpus` constraint.
    std::vector<std::string> parallel_factors;
};

struct DiscoveryContext {
    std::optional<long long> gpus;          // GPUs of one run (nodes x GPUs per node), when the script says
    std::optional<long long> gpus_per_node; // tensor parallelism stays within a node's GPUs
    std::optional<long long> cpus_per_task; // #SBATCH --cpus-per-task
};

KnobDiscovery discover_knobs(const BatchScript& s, const DiscoveryContext& ctx);

} // namespace infrarsi::contract
