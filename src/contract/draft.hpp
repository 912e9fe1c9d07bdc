#pragma once
// `infrarsi init --from job.sbatch`: a first contract drafted from a user's existing batch script. Resources
// come from its #SBATCH lines, the workload is the script itself (its directory the source tree), knobs are
// suggested for the launcher arguments it recognises (micro-batch, accumulation, recompute, dtype, threads,
// DDP buckets, data workers, parallel sizes, torchrun's ranks per node when the script takes them from
// Slurm), the step count of a short trial run and the log format (named, or guessed from a sample of the
// job's output). Every line the user must check carries a "# CHECK:" comment; a value the script does not
// give is a placeholder that `init` refuses with the line it is on, until the user fills it in.
#include "contract/batch_script.hpp"
#include "measure/log_format.hpp"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::contract {

struct DraftOptions {
    std::filesystem::path script; // the user's batch script
    std::filesystem::path output; // where the contract will be written: relative paths in it start there
    std::optional<measure::LogFormatKind> format; // --format
    std::string sample_log;                       // the text of a sample of the job's output, or empty
    std::string sample_log_name;                  // its file name, for the comment
    std::string goal;                             // --goal: the user's request, for [agent]
    std::vector<std::string> agent_command;       // --agent: the agent's argv, for [agent]
};

struct Draft {
    std::string text;               // the contract (TOML)
    int checks = 0;                 // lines marked "# CHECK:"
    int placeholders = 0;           // values the user must fill in before init accepts the draft
    std::vector<std::string> notes; // what the reader of the script could not do, for the terminal
};

// Throws infrarsi::Error when the script cannot be read or launches nothing the draft recognises.
Draft draft_contract(const DraftOptions& o);

// Writes the draft to a new file: an existing file (a contract the user wrote) is never replaced.
void write_draft(const std::filesystem::path& file, const Draft& d);

// The placeholder a draft writes for a value it could not find; `init` refuses it ("... has no number").
inline constexpr const char* draft_placeholder = "FILL-IN";

} // namespace infrarsi::contract
