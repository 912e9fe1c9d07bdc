#pragma once
// `infrarsi list`: the campaigns under a directory (the directory itself, its entries and theirs: a daemon's
// root holds <root>/<user>/<campaign> and <root>/<user>/tune-<job>), each with its state, trials, best result
// and whether a process drives it now. As root, a campaign a user controls is named, never opened (root does
// not read a user's store: docs/orchestrator.md, "The daemon").
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace infrarsi::report {

nlohmann::json list_campaigns(const std::filesystem::path& root);
std::string render_list(const nlohmann::json& list);

} // namespace infrarsi::report
