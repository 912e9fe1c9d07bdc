#pragma once
// What tune mode reads from sbatch's command line (the batch script, the contract beside it) and the paths it
// passes to the job. The request it writes is trial/tune_request.hpp.
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::spank {

// sbatch's batch script among its arguments: the first argument after argv[0] that is not an option and
// names a regular file beginning with "#!" (sbatch itself refuses scripts without it). Relative paths are
// resolved against `cwd`. nullopt for --wrap or a script on stdin.
std::optional<std::string> find_batch_script(const std::vector<std::string>& argv, const std::string& cwd);

// Where tune mode looks for the contract when none is named: beside the script, <dir>/<stem>.contract.toml.
std::string default_contract_for(const std::string& script);

// A contract named on the command line, made absolute against `cwd`.
std::string absolute_path(const std::string& path, const std::string& cwd);

// An environment-supplied path we pass on: absolute, at most 4096 bytes, printable.
bool valid_path_value(const std::string& path);

} // namespace infrarsi::spank
