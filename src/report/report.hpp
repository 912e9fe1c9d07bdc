#pragma once
// What a campaign found, for people (text) and machines (--json): status while it runs; the report at the end
// (baseline vs promoted speed-up and MFU, each promoted change's audit path, failed-trial costs, budget
// used); and apply, which writes the promoted change for the user (env file, sbatch snippet, patch series).
#include "campaign/campaign.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <string>

namespace infrarsi::report {

nlohmann::json status(campaign::Campaign& c);
std::string render_status(const nlohmann::json& status);

nlohmann::json build(campaign::Campaign& c);
std::string render(const nlohmann::json& report);

struct ApplyOptions {
    std::filesystem::path target; // directory for the env file, sbatch snippet and patch series
    std::string git_branch;       // when set: also commit the patch series on this new branch of git_repo
    std::filesystem::path git_repo;
};
// Writes the best promoted candidate; returns the files written. Throws when nothing was promoted.
std::vector<std::filesystem::path> apply(campaign::Campaign& c, const ApplyOptions& o);
// The sbatch snippet apply writes: the sbatch-option knobs as #SBATCH lines, one `export NAME=value` per
// variable and the argument knobs as a bash array, every value shell-quoted (util/shell_quote) so that
// sourcing it neither splits a value with a space nor runs a $(...) in it.
std::string sbatch_snippet(const std::map<std::string, std::string>& env, bool with_patches,
                           const std::vector<std::string>& sbatch_options = {},
                           const std::vector<std::string>& args = {}, const std::string& title = "");

} // namespace infrarsi::report
