#pragma once
// Step lines: the workload's rank 0 prints `PREFIX {json}` once per step (step, loss, step_time_s, phases,
// tokens, tokens_per_s, model_flops, mfu, peak_rss_bytes) and `SUMMARY_PREFIX {json}` at the end.
#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::measure {

struct StepSample {
    int step = 0;
    double loss = 0;
    double step_time_s = 0;
    std::map<std::string, double> phases; // forward_s, backward_s, comm_s, optimizer_s, data_s, ...
    double tokens = 0, tokens_per_s = 0, model_flops = 0;
    std::optional<double> mfu;
    std::optional<double> peak_rss_bytes;
    std::optional<double> peak_device_bytes; // the accelerator memory peak the job reports (a framework log's
                                             // "memory"); the host's peak comes from the scheduler's record
};

struct StepLog {
    std::vector<StepSample> steps;
    int malformed = 0; // prefixed lines that were not valid step JSON
    std::optional<nlohmann::json> summary;
};

// Lines may carry text before the prefix (an MPI rank tag); lines without the prefix are ignored.
StepLog parse_step_log(const std::string& text, const std::string& step_prefix,
                       const std::string& summary_prefix);

nlohmann::json to_json(const StepSample& s);
StepSample step_from_json(const nlohmann::json& j); // throws nlohmann::json errors on missing keys

} // namespace infrarsi::measure
