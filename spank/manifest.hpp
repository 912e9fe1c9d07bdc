#pragma once
// The orchestrator's batch manifest, as trial mode reads it inside slurmstepd: one entry per array index
// with the trial's id, its knob environment and its result path, plus the knob names (and allowed values)
// the contract declares. Everything is validated: a manifest is user input. Format: docs/plugin.md.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::spank {

inline constexpr const char* kManifestFormat = "infrarsi-manifest/1";
inline constexpr size_t kMaxManifestBytes = 4u << 20;
inline constexpr size_t kMaxEnvValueBytes = 4096;
inline constexpr size_t kMaxEnvNameBytes = 128;

struct TrialEntry {
    uint32_t index = 0;
    std::string trial_id;
    std::map<std::string, std::string> env;
    std::string result; // absolute path where the trial writes result.json
};

struct Manifest {
    std::string campaign;
    // Declared knob names; nullopt: any valid value, else the allowed values.
    std::map<std::string, std::optional<std::vector<std::string>>> knobs;
    std::vector<TrialEntry> trials;
};

// Parses and validates; `where` names the source in errors. Throws infrarsi::Error.
Manifest parse_manifest(const std::string& text, const std::string& where);
// Reads a regular file of at most kMaxManifestBytes, then parse_manifest. Throws infrarsi::Error.
Manifest read_manifest(const std::string& path);

// The environment trial `index` gets: its knobs plus INFRARSI_CAMPAIGN, INFRARSI_TRIAL_ID, INFRARSI_RESULT.
// Throws infrarsi::Error when the manifest has no entry for `index`.
std::map<std::string, std::string> trial_environment(const Manifest& m, uint32_t index);

// [A-Z_][A-Z0-9_]*, at most kMaxEnvNameBytes, and not one of the prefixes Slurm and InfraRSI own.
bool valid_knob_name(const std::string& name);
// At most kMaxEnvValueBytes, no NUL, newline or carriage return.
bool valid_env_value(const std::string& value);

} // namespace infrarsi::spank
