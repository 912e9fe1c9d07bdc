#pragma once
// What the plugin is told: the mode a job asks for (--infrarsi[=MODE]) and the site's plugstack.conf
// arguments. Pure parsing, no Slurm: unit-tested in spank/tests.
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace infrarsi::spank {

inline constexpr const char* kAllowedModes = "record, trial, tune[:CONTRACT], off";

enum class ModeKind { record, trial, tune, off };

struct Mode {
    ModeKind kind = ModeKind::record;
    std::string contract; // tune only: the contract named after "tune:", empty for "beside the script"
    std::string text() const;
    bool operator==(const Mode&) const = default;
};

// "" (a bare --infrarsi) is record. nullopt for anything else not in kAllowedModes.
std::optional<Mode> parse_mode(std::string_view value);

struct Config {
    std::string spool = "/var/spool/infrarsi";
    ModeKind default_mode = ModeKind::record; // what a job gets without --infrarsi: record or off
    std::chrono::milliseconds calibration{300};
    bool allow_off = true; // whether users may say --infrarsi=off when the site default is record
    bool nccl = false;     // look for NCCL in the calibration (dlopen libnccl.so.2)
};

inline constexpr int kMaxCalibrationMs = 10000;

// plugstack.conf arguments, key=value: spool=DIR default_mode=record|off calibration_ms=N allow_off=yes|no
// nccl=yes|no. Throws infrarsi::Error naming the argument for an unknown key or a bad value.
Config parse_config(const std::vector<std::string>& args);

} // namespace infrarsi::spank
