#include "store/baseline.hpp"

#include "util/error.hpp"

namespace infrarsi::store {

nlohmann::json to_json(const Baseline& b) {
    nlohmann::json j = {{"repeats", b.repeats},
                        {"completed", b.completed},
                        {"runs", b.runs},
                        {"median_step_s", b.median_step_s},
                        {"cold_step_s", b.cold_step_s},
                        {"cold_overhead", b.cold_overhead},
                        {"cv_between", b.cv_between},
                        {"cv_within", b.cv_within},
                        {"minimum_detectable_effect", b.minimum_detectable_effect},
                        {"comparison_repeats", b.comparison_repeats},
                        {"phases", b.phases},
                        {"tokens_per_s", b.tokens_per_s},
                        {"reference_losses", b.reference_losses}};
    if (b.mfu) j["mfu"] = *b.mfu;
    if (b.peak_flops) j["peak_flops"] = *b.peak_flops;
    if (b.model_flops_per_step) j["model_flops_per_step"] = *b.model_flops_per_step;
    if (!b.peak_flops_source.empty()) j["peak_flops_source"] = b.peak_flops_source;
    if (b.peak_flops_by_job) j["peak_flops_by_job"] = true;
    if (b.peak_memory_bytes) j["peak_memory_bytes"] = *b.peak_memory_bytes;
    if (!b.eval_losses.empty()) j["eval_losses"] = b.eval_losses;
    return j;
}

Baseline baseline_from_json(const nlohmann::json& j) {
    const auto get = [&](const char* key, auto& out) {
        try {
            j.at(key).get_to(out);
        } catch (const nlohmann::json::exception&) {
            throw Error(std::string("missing or malformed '") + key + "'",
                        "the doctor's baseline in campaign.db", "a baseline written by infrarsi doctor");
        }
    };
    Baseline b;
    get("repeats", b.repeats);
    get("completed", b.completed);
    get("runs", b.runs);
    get("median_step_s", b.median_step_s);
    get("cold_step_s", b.cold_step_s);
    get("cold_overhead", b.cold_overhead);
    get("cv_between", b.cv_between);
    get("cv_within", b.cv_within);
    get("minimum_detectable_effect", b.minimum_detectable_effect);
    get("comparison_repeats", b.comparison_repeats);
    get("phases", b.phases);
    get("tokens_per_s", b.tokens_per_s);
    get("reference_losses", b.reference_losses);
    if (j.contains("mfu")) get("mfu", b.mfu.emplace());
    if (j.contains("peak_flops")) get("peak_flops", b.peak_flops.emplace());
    if (j.contains("model_flops_per_step")) get("model_flops_per_step", b.model_flops_per_step.emplace());
    if (j.contains("peak_flops_source")) get("peak_flops_source", b.peak_flops_source);
    if (j.contains("peak_flops_by_job")) get("peak_flops_by_job", b.peak_flops_by_job);
    if (j.contains("peak_memory_bytes")) get("peak_memory_bytes", b.peak_memory_bytes.emplace());
    if (j.contains("eval_losses")) get("eval_losses", b.eval_losses);
    return b;
}

} // namespace infrarsi::store
