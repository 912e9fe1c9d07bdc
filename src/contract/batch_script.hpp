#pragma once
// What a user's Slurm batch script says about the job, as far as a reader that does not run it can tell: the
// #SBATCH options sbatch would read, and the command that launches the training (torchrun, python, srun,
// deepspeed, accelerate) with its arguments. Variables the script assigns a plain value (GPT_ARGS="...",
// arrays included) are expanded where the launch line uses them, as bash would split them; anything else
// ($SLURM_NTASKS_PER_NODE, $(...)) is kept as written. `infrarsi init --from` drafts a contract from this
// (contract/draft.hpp).
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace infrarsi::contract {

// How an argument is written: `--name=value`, `--name value` or a bare `--flag` (Long); `-b 8` (Short:
// llm.c's options, the value the next word); `train.micro_batch_size=4` or `+trainer.devices=8` (KeyValue:
// Hydra, OmegaConf dot-lists, NeMo, Megatron-Bridge).
enum class ArgStyle { Long, Short, KeyValue };

// One argument of the training program.
struct ProgramArg {
    std::string name;  // as the program reads it: "--batch_size", "-b", "train.micro_batch_size"
    std::string value; // empty for a flag
    bool flag = false;
    ArgStyle style = ArgStyle::Long;
    // The script's variable the whole value came from ("--micro-batch-size $MBS"): a tuner sets the
    // variable; empty when the value is written in place (or built from several).
    std::string var;
};

// A variable the script assigns a plain value (NAME=value, export NAME=value).
struct ScriptVariable {
    std::string value;
    int line = 0;
    bool exported = false;
    // Assigned from the environment with a default (NAME=${NAME:-value}): the job's environment sets it, as
    // a knob delivered by environment does.
    bool from_environment = false;
};

struct BatchScript {
    // #SBATCH options by their long name without dashes ("nodes", "ntasks-per-node", "mem", "time", ...);
    // short forms (-N, -n, -c, -t, -p, -J, -G) are stored under their long name. Only the lines sbatch reads:
    // those before the first command.
    std::map<std::string, std::string> sbatch;
    std::map<std::string, int> sbatch_line; // the line each option was read from
    // The launch: the first command whose program is a known launcher.
    int launch_line = 0;                    // 0: none found
    std::vector<std::string> srun;          // srun/mpirun and their options, when the launch goes through one
    std::string launcher;                   // "torchrun", "python", "deepspeed", "accelerate", "srun"
    std::vector<std::string> launcher_args; // the launcher's own options (torchrun's --nproc_per_node ...)
    std::string program;                    // the training script or module ("train.py", "pretrain_gpt.py")
    std::vector<std::string> program_words; // its arguments, as words
    std::vector<ProgramArg> program_args;   // the same, read as options
    bool forwards_arguments = false;        // "$@" is among them: arguments given to the script reach it
    // The value of one of the launcher's options ("--nproc_per_node" and "--nproc-per-node" alike).
    std::optional<std::string> launcher_option(std::string_view name) const;

    // What a trial could trip on, as the script shows it (the draft names each with a CHECK line):
    // further commands that launch a known program too (the launch taken is the first one a distributed
    // launcher runs, torchrun/deepspeed/accelerate, else the first through srun, else the first);
    std::vector<int> other_launch_lines;
    bool launch_in_loop = false; // the launch runs inside a for/while/until loop: several trainings a job
    std::string stdout_redirect; // the file the launch's standard output goes to instead of the job's
    std::vector<int>
        positional_lines;   // lines that read the script's own arguments ($1..$9): appended ones shift
    std::string fixed_port; // a literal rendezvous port (MASTER_PORT=29500, --master_port 29500, ...)
    int fixed_port_line = 0;
    // `cd /an/absolute/path` before the launch: a trial would run the code there, not its sandbox's copy.
    std::string absolute_cd;
    int absolute_cd_line = 0;
    // The variables the script assigns a plain value, as the last assignment before the launch left them.
    std::map<std::string, ScriptVariable> variables;
    // The launch runs a shell's command string (`srun bash -c "$CMD"`): read from inside it.
    bool launch_in_command_string = false;
};

// A value the script writes as a plain non-negative integer ("8"; not "$N", "1e3" or 13 digits), else
// nullopt.
std::optional<long long> plain_integer(const std::string& s);

// Reads a script's text; `where` names it in errors. Throws infrarsi::Error only for text that is no script
// at all (binary data); a script without a recognised launch has launch_line 0.
BatchScript read_batch_script(std::string_view text, const std::string& where);

} // namespace infrarsi::contract
