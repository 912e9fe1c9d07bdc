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

// gpu=auto probes only on a node with NVIDIA device files; yes always; no never.
enum class GpuProbe { automatic, yes, no };

struct Config {
    std::string spool = "/var/spool/infrarsi";
    ModeKind default_mode = ModeKind::record; // what a job gets without --infrarsi: record or off
    std::chrono::milliseconds calibration{300};
    bool allow_off = true; // whether users may say --infrarsi=off when the site default is record
    bool nccl = false;     // look for NCCL in the calibration (dlopen libnccl.so.2)
    GpuProbe gpu = GpuProbe::automatic; // probe the node's GPUs (src/node/gpu.hpp) in record mode
    std::chrono::milliseconds gpu_calibration{3000}; // its budget, CUDA's start-up included
    std::vector<std::string> cuda_library_dirs;      // searched before the loader's path (cuda_libs=A:B)
    // The node's GPUs in one NCCL all-reduce (src/node/nccl_allreduce.hpp) after the GPU probe: off by
    // default, as it takes every GPU of the node for its budget while the job waits.
    bool nccl_allreduce = false;
    std::chrono::milliseconds nccl_allreduce_budget{5000};
    // Directories that hold campaigns (campaign_roots=DIR[:DIR]): hidden whole from every step of a trial,
    // besides its own campaign's parent, the bank and the spool (trial/isolation.hpp).
    std::vector<std::string> campaign_roots;
};

inline constexpr int kMaxCalibrationMs = 10000;
inline constexpr int kMaxGpuCalibrationMs = 60000;
inline constexpr int kMaxNcclAllreduceMs = 60000;

// plugstack.conf arguments, key=value: spool=DIR default_mode=record|off calibration_ms=N allow_off=yes|no
// nccl=yes|no gpu=auto|yes|no gpu_calibration_ms=N cuda_libs=DIR[:DIR] nccl_allreduce=yes|no
// nccl_allreduce_ms=N campaign_roots=DIR[:DIR]. Throws infrarsi::Error naming the argument for an unknown key
// or a bad value.
Config parse_config(const std::vector<std::string>& args);

} // namespace infrarsi::spank
