// The analytic peak-memory estimate of a candidate (Campaign::memory_estimate): the contract's estimate
// command run against the build of the candidate's patch set, or the transformer formulas.
#include "campaign/campaign.hpp"

#include "model/transformer_memory.hpp"
#include "space/memory_role.hpp"
#include "space/rendering.hpp"
#include "util/bounded_json.hpp"
#include "util/error.hpp"
#include "util/process.hpp"

namespace infrarsi::campaign {

using store::TrialKind;

void Campaign::sandboxes_built() {
    estimate_sandboxes_.clear(); // patch sets built now have their own estimate
}

fs::path Campaign::estimate_sandbox(const space::Candidate& c) {
    std::string set;
    for (const auto& id : c.patches)
        set += id + "\n";
    if (auto it = estimate_sandboxes_.find(set); it != estimate_sandboxes_.end()) return it->second;
    fs::path box;
    if (!c.patches.empty()) {
        std::optional<patch::Sandbox> built;
        try {
            built = sandbox_cache().find(patch_set(c));
        } catch (const Error&) {
        }
        if (built && built->state == patch::Sandbox::State::Ready) box = built->source.parent_path();
    }
    if (box.empty()) {
        // The baseline's build: a doctor trial that ran in a sandbox (the submitted job ran in none).
        for (const auto& t : store_->trials({.kinds = {TrialKind::Doctor}}))
            if (!t.sandbox.empty()) {
                box = dir_ / "sandboxes" / t.sandbox;
                break;
            }
        if (box.empty()) return {};
    }
    estimate_sandboxes_[set] = box;
    return box;
}

std::string memory_prior_name(const contract::Contract& c) {
    if (!c.memory_estimate.empty()) return "the contract's estimate command";
    if (c.memory_transformer) return "the transformer formulas from the declared model dimensions";
    return "none: learned from the trials";
}

std::optional<double> transformer_memory_estimate(const contract::Contract& k, const space::Candidate& c) {
    if (!k.memory_transformer) return std::nullopt;
    const auto& p = *k.memory_transformer;
    model::TransformerShape shape;
    shape.parameters = p.parameters;
    shape.layers = p.layers;
    shape.hidden = p.hidden;
    shape.heads = p.heads;
    shape.seq_len = p.seq_len;
    shape.vocab = p.vocab;
    shape.activation_bytes = p.activation_bytes;
    shape.parameter_bytes = p.parameter_bytes;
    shape.optimizer_bytes = p.optimizer_bytes;
    shape.runtime_bytes = static_cast<double>(p.runtime_bytes);
    model::TransformerSettings st;
    st.micro_batch = p.micro_batch;
    st.zero_stage = p.zero_stage;
    st.ranks_per_node = std::max(1, k.resources.ntasks_per_node);
    for (const auto& knob : k.space.knobs) {
        const auto it = c.knobs.find(knob.name);
        if (it == c.knobs.end()) continue;
        const auto role = space::memory_role(knob);
        if (role == space::MemoryRole::MicroBatch)
            st.micro_batch = static_cast<int>(std::get<long long>(it->second));
        else if (role == space::MemoryRole::Recompute)
            st.recompute = static_cast<model::Recompute>(space::recompute_strength(it->second));
        if (knob.name == p.ranks_knob) st.ranks_per_node = static_cast<int>(std::get<long long>(it->second));
    }
    st.data_parallel = st.ranks_per_node * k.resources.nodes;
    return model::transformer_memory(shape, st).per_node;
}

std::optional<double> Campaign::memory_estimate(const space::Candidate& c) {
    if (contract_.memory_estimate.empty()) return transformer_memory_estimate(contract_, c);
    const fs::path box = estimate_sandbox(c);
    if (box.empty()) return std::nullopt;
    const std::string cache_key = c.key() + "@" + box.filename().string();
    if (auto it = estimates_.find(cache_key); it != estimates_.end()) return it->second;
    // The candidate's environment and the knobs' arguments, as the trial gets them.
    auto job = space::render(contract_.space, c, contract_.workload.env);
    ProcessOptions po;
    po.env = std::move(job.environment);
    po.timeout = std::chrono::seconds(60);
    auto argv = contract::substitute(
        contract_.memory_estimate, {{"build", (box / "build").string()}, {"source", (box / "src").string()}});
    for (auto& a : job.arguments)
        argv.push_back(std::move(a));
    std::optional<double> est;
    try {
        auto r = run_process(argv, po);
        auto brace = r.out.find('{');
        if (r.ok() && brace != std::string::npos) {
            // The contract's command's output: bounded like any outside JSON.
            auto j = parse_bounded_json(std::string_view(r.out).substr(brace), "memory_estimate output",
                                        "a JSON object with estimated_peak_bytes", {.max_depth = 16});
            if (j.is_object() && j.contains("estimated_peak_bytes") && j["estimated_peak_bytes"].is_number())
                est = j["estimated_peak_bytes"].get<double>();
        }
    } catch (const Error&) {
    }
    estimates_[cache_key] = est;
    return est;
}

} // namespace infrarsi::campaign
