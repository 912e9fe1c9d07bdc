// --infrarsi[=MODE]: one option, one table, registered in a loop as pyxis does; the callback copies its
// argument and accepts the same value twice (Slurm calls it locally and again remotely) but not two.
#include "context.hpp"

#include <iterator>

namespace infrarsi::spank {
namespace {

int on_infrarsi(int, const char* optarg, int remote) {
    Context& ctx = context();
    std::string value = optarg ? optarg : "";
    auto mode = parse_mode(value);
    if (!mode) {
        slurm_error("infrarsi: invalid --infrarsi value '%s' (allowed: %s)", value.c_str(), kAllowedModes);
        return -1;
    }
    if (ctx.option && !(*ctx.option == *mode)) {
        slurm_error("infrarsi: --infrarsi given twice with different values ('%s' and '%s')",
                    ctx.option->text().c_str(), mode->text().c_str());
        return -1;
    }
    if (mode->kind == ModeKind::off && !ctx.config.allow_off && ctx.config.default_mode == ModeKind::record) {
        // Checked where the user submits; the remote side only repeats what was accepted.
        if (!remote) {
            slurm_error("infrarsi: this site records every job; --infrarsi=off is not allowed here "
                        "(allowed: record, trial, tune[:CONTRACT])");
            return -1;
        }
        mode->kind = ModeKind::record;
    }
    if (!remote && submit_tune(*mode) != 0) return -1;
    ctx.option_text = value;
    ctx.option = std::move(*mode);
    return 0;
}

struct spank_option kOptions[] = {
    {const_cast<char*>("infrarsi"), const_cast<char*>("[MODE]"),
     const_cast<char*>("InfraRSI: MODE is record (the default: record this allocation's topology and noise), "
                       "trial (run as an orchestrator trial), tune[:CONTRACT] (start a tuning campaign with "
                       "this job as baseline) or off"),
     2, 0, on_infrarsi},
};

} // namespace

int register_options(spank_t sp) {
    for (auto& opt : kOptions) {
        if (spank_option_register(sp, &opt) != ESPANK_SUCCESS) {
            slurm_error("infrarsi: cannot register --%s", opt.name);
            return -1;
        }
    }
    return 0;
}

} // namespace infrarsi::spank
