#include "config.hpp"

#include "util/enum_names.hpp"
#include "util/error.hpp"

#include <charconv>

namespace infrarsi::spank {
namespace {

bool parse_yes_no(const std::string& key, const std::string& value) {
    if (value == "yes" || value == "true" || value == "1") return true;
    if (value == "no" || value == "false" || value == "0") return false;
    throw Error("plugstack argument " + key + "=" + value + " is not yes or no", "plugstack.conf");
}

int parse_ms(const std::string& key, const std::string& value, int max) {
    int ms = -1;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), ms);
    if (ec != std::errc() || end != value.data() + value.size() || ms < 0 || ms > max)
        throw Error(key + "=" + value + " is not a number of milliseconds in 0.." + std::to_string(max),
                    "plugstack.conf");
    return ms;
}

// --infrarsi's modes by name; tune also takes "tune:CONTRACT".
constexpr util::EnumNames<ModeKind, 4> mode_names{{{
    {ModeKind::record, "record"},
    {ModeKind::trial, "trial"},
    {ModeKind::tune, "tune"},
    {ModeKind::off, "off"},
}}};

} // namespace

std::string Mode::text() const {
    std::string name(mode_names.name(kind));
    if (name == "?") return "record";
    return kind == ModeKind::tune && !contract.empty() ? name + ":" + contract : name;
}

std::optional<Mode> parse_mode(std::string_view value) {
    // A bare --infrarsi given to sbatch/salloc reaches srun inside the job as the string "(null)" (Slurm
    // formats the missing argument with %s into SLURM_SPANK__SLURM_SPANK_OPTION_infrarsi_infrarsi).
    if (value.empty() || value == "(null)") return Mode{ModeKind::record, {}};
    if (const auto kind = mode_names.parse(value)) return Mode{*kind, {}};
    if (value.starts_with("tune:")) {
        std::string_view contract = value.substr(5);
        if (contract.empty() || contract.size() > 4096) return std::nullopt;
        for (unsigned char c : contract)
            if (c < 0x20 || c == 0x7f) return std::nullopt;
        return Mode{ModeKind::tune, std::string(contract)};
    }
    return std::nullopt;
}

Config parse_config(const std::vector<std::string>& args) {
    Config c;
    for (const auto& arg : args) {
        auto eq = arg.find('=');
        if (eq == std::string::npos || eq == 0)
            throw Error("plugstack argument '" + arg + "' is not key=value", "plugstack.conf",
                        "spool=DIR default_mode=record|off calibration_ms=N allow_off=yes|no nccl=yes|no");
        std::string key = arg.substr(0, eq), value = arg.substr(eq + 1);
        if (key == "spool") {
            if (value.empty() || value[0] != '/')
                throw Error("spool=" + value + " is not an absolute path", "plugstack.conf");
            c.spool = value;
        } else if (key == "default_mode") {
            const auto mode = mode_names.parse(value);
            if (mode == ModeKind::record || mode == ModeKind::off)
                c.default_mode = *mode;
            else
                throw Error("default_mode=" + value + " is not record or off", "plugstack.conf");
        } else if (key == "calibration_ms") {
            c.calibration = std::chrono::milliseconds(parse_ms(key, value, kMaxCalibrationMs));
        } else if (key == "gpu_calibration_ms") {
            c.gpu_calibration = std::chrono::milliseconds(parse_ms(key, value, kMaxGpuCalibrationMs));
        } else if (key == "gpu") {
            if (value == "auto")
                c.gpu = GpuProbe::automatic;
            else
                c.gpu = parse_yes_no(key, value) ? GpuProbe::yes : GpuProbe::no;
        } else if (key == "cuda_libs") {
            c.cuda_library_dirs.clear();
            size_t start = 0;
            while (start <= value.size()) {
                size_t end = value.find(':', start);
                if (end == std::string::npos) end = value.size();
                std::string dir = value.substr(start, end - start);
                if (dir.empty() || dir[0] != '/')
                    throw Error("cuda_libs=" + value + " is not a list of absolute directories",
                                "plugstack.conf");
                c.cuda_library_dirs.push_back(dir);
                start = end + 1;
            }
        } else if (key == "campaign_roots") {
            c.campaign_roots.clear();
            for (std::size_t start = 0; start <= value.size();) {
                std::size_t end = value.find(':', start);
                if (end == std::string::npos) end = value.size();
                std::string dir = value.substr(start, end - start);
                // "/" would hide the whole file system from a trial.
                if (dir.size() < 2 || dir[0] != '/')
                    throw Error("campaign_roots=" + value +
                                    " is not a list of absolute directories other than /",
                                "plugstack.conf");
                c.campaign_roots.push_back(dir);
                start = end + 1;
            }
        } else if (key == "allow_off") {
            c.allow_off = parse_yes_no(key, value);
        } else if (key == "nccl") {
            c.nccl = parse_yes_no(key, value);
        } else if (key == "nccl_allreduce") {
            c.nccl_allreduce = parse_yes_no(key, value);
        } else if (key == "nccl_allreduce_ms") {
            c.nccl_allreduce_budget = std::chrono::milliseconds(parse_ms(key, value, kMaxNcclAllreduceMs));
        } else {
            throw Error(
                "unknown plugstack argument '" + key + "'", "plugstack.conf",
                "one of spool, default_mode, calibration_ms, allow_off, nccl, gpu, gpu_calibration_ms, "
                "cuda_libs, nccl_allreduce, nccl_allreduce_ms, campaign_roots");
        }
    }
    return c;
}

} // namespace infrarsi::spank
