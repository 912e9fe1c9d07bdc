#include "space/presets.hpp"

#include <map>

namespace infrarsi::space {
namespace {

Knob choice(const std::string& name, const std::string& env, std::vector<std::string> values) {
    Knob k;
    k.name = name;
    k.kind = KnobKind::Choice;
    values.insert(values.begin(), kUnsetChoice);
    k.choices = std::move(values);
    k.delivery = Delivery::Env;
    k.env = env;
    k.unset_choice = kUnsetChoice;
    k.baseline = std::string(kUnsetChoice);
    return k;
}

// NCCL reads these once, when a communicator is made: a trial's whole run uses the setting, and the step
// times the campaign measures (collectives inside the training step) show its effect.
std::vector<Knob> nccl_algo() {
    // LL128 and NVLS/CollNet/PAT are left out: NCCL documents LL128 as unsafe where the platform does not
    // support it, and the others fail outright where the fabric lacks them.
    return {choice("nccl_algo", "NCCL_ALGO", {"Ring", "Tree"}),
            choice("nccl_proto", "NCCL_PROTO", {"Simple", "LL"})};
}
std::vector<Knob> nccl_channels() {
    return {choice("nccl_min_nchannels", "NCCL_MIN_NCHANNELS", {"2", "4", "8", "16", "32"}),
            choice("nccl_max_nchannels", "NCCL_MAX_NCHANNELS", {"2", "4", "8", "16", "32"})};
}
std::vector<Knob> nccl_buffers() {
    Knob k;
    k.name = "nccl_buffsize";
    k.kind = KnobKind::Pow2;
    k.min = 1LL << 20;
    k.max = 16LL << 20;
    k.delivery = Delivery::Env;
    k.env = "NCCL_BUFFSIZE";
    k.baseline = 4LL << 20; // NCCL's default (docs: NCCL_BUFFSIZE, 4194304)
    return {k};
}
std::vector<Knob> nccl_net() {
    return {choice("nccl_net_gdr_level", "NCCL_NET_GDR_LEVEL", {"LOC", "PIX", "PXB", "PHB", "SYS"})};
}

} // namespace

std::optional<std::vector<Knob>> preset_knobs(const std::string& name) {
    if (name == "nccl-algo") return nccl_algo();
    if (name == "nccl-channels") return nccl_channels();
    if (name == "nccl-buffers") return nccl_buffers();
    if (name == "nccl-net") return nccl_net();
    if (name == "nccl") {
        std::vector<Knob> all;
        for (auto part : {nccl_algo(), nccl_channels(), nccl_buffers(), nccl_net()})
            all.insert(all.end(), part.begin(), part.end());
        return all;
    }
    return std::nullopt;
}

std::string preset_names() {
    return "nccl, nccl-algo, nccl-channels, nccl-buffers, nccl-net";
}

} // namespace infrarsi::space
