// The InfraRSI SPANK plugin: the one file that defines Slurm's entry points. It registers `--infrarsi` in
// every context that uses it and dispatches on spank_context().
#include <cstring>
#include <string>

extern "C" {
#include <slurm/spank.h>
}

// SPANK_PLUGIN gives these internal linkage in C++; Slurm needs them exported (see ENVIRONMENT.md).
extern "C" {
__attribute__((visibility("default"))) extern const char plugin_name[];
__attribute__((visibility("default"))) extern const char plugin_type[];
__attribute__((visibility("default"))) extern const unsigned int plugin_version;
__attribute__((visibility("default"))) extern const unsigned int spank_plugin_version;
const char plugin_name[] = "infrarsi";
const char plugin_type[] = "spank";
const unsigned int plugin_version = SLURM_VERSION_NUMBER;
const unsigned int spank_plugin_version = 0;
}

namespace {

constexpr const char* kModes = "record, trial, tune[:CONTRACT], off";

struct PluginState {
    std::string mode = "record";
    bool mode_given = false;
};
PluginState g_state;

bool valid_mode(const std::string& m) {
    return m == "record" || m == "trial" || m == "off" || m == "tune" || m.rfind("tune:", 0) == 0;
}

int on_infrarsi_option(int, const char* optarg, int) {
    std::string value = optarg ? optarg : "record";
    if (value.empty()) value = "record";
    if (!valid_mode(value)) {
        slurm_error("infrarsi: invalid --infrarsi value '%s' (allowed: %s)", value.c_str(), kModes);
        return -1;
    }
    g_state.mode = value; // copied: optarg is not ours to keep
    g_state.mode_given = true;
    return 0;
}

struct spank_option g_option = {
    const_cast<char*>("infrarsi"),
    const_cast<char*>("[MODE]"),
    const_cast<char*>(
        "InfraRSI: record this allocation's topology and noise (record, the default), run as an "
        "orchestrator trial (trial), start a tuning campaign (tune[:CONTRACT]) or off"),
    2,
    0,
    on_infrarsi_option};

} // namespace

extern "C" __attribute__((visibility("default"))) int slurm_spank_init(spank_t sp, int, char**) {
    if (spank_option_register(sp, &g_option) != ESPANK_SUCCESS) {
        slurm_error("infrarsi: cannot register --infrarsi");
        return -1;
    }
    return 0;
}
