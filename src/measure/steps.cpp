#include "measure/steps.hpp"

#include "util/bounded_json.hpp"
#include "util/error.hpp"

#include <limits>
#include <sstream>

namespace infrarsi::measure {
namespace {

constexpr JsonLimits kLineLimits{.max_bytes = 1u << 20, .max_depth = 16};

} // namespace

StepSample step_from_json(const nlohmann::json& j) {
    StepSample s;
    s.step = j.at("step").get<int>();
    // A loss of nan or inf (a diverged run) is written as null by JSON.
    s.loss = j.at("loss").is_null() ? std::numeric_limits<double>::quiet_NaN() : j.at("loss").get<double>();
    s.step_time_s = j.at("step_time_s").get<double>();
    if (j.contains("phases") && j["phases"].is_object())
        for (const auto& [k, v] : j["phases"].items())
            if (v.is_number()) s.phases[k] = v.get<double>();
    s.tokens = j.value("tokens", 0.0);
    s.tokens_per_s = j.value("tokens_per_s", 0.0);
    s.model_flops = j.value("model_flops", 0.0);
    if (j.contains("mfu") && j["mfu"].is_number()) s.mfu = j["mfu"].get<double>();
    // The memory limit is per node: a workload that reports its node's peak (all its ranks there) is measured
    // by that; else by the peak it reports.
    for (const char* key : {"peak_rss_node_bytes", "peak_rss_bytes"})
        if (j.contains(key) && j[key].is_number()) {
            s.peak_rss_bytes = j[key].get<double>();
            break;
        }
    if (j.contains("peak_device_bytes") && j["peak_device_bytes"].is_number())
        s.peak_device_bytes = j["peak_device_bytes"].get<double>();
    if (j.contains("timed") && j["timed"].is_boolean()) s.timed = j["timed"].get<bool>();
    if (j.contains("arrival_s") && j["arrival_s"].is_number()) s.arrival_s = j["arrival_s"].get<double>();
    return s;
}

nlohmann::json to_json(const StepSample& s) {
    nlohmann::json j = {{"step", s.step},
                        {"loss", s.loss},
                        {"step_time_s", s.step_time_s},
                        {"phases", s.phases},
                        {"tokens", s.tokens},
                        {"tokens_per_s", s.tokens_per_s},
                        {"model_flops", s.model_flops}};
    if (s.mfu) j["mfu"] = *s.mfu;
    if (s.peak_rss_bytes) j["peak_rss_bytes"] = *s.peak_rss_bytes;
    if (s.peak_device_bytes) j["peak_device_bytes"] = *s.peak_device_bytes;
    if (!s.timed) j["timed"] = false;
    if (s.arrival_s) j["arrival_s"] = *s.arrival_s;
    return j;
}

StepLineReader::StepLineReader(std::string step_prefix, std::string summary_prefix,
                               std::function<bool(const std::string& line)> excluder)
    : step_prefix_(std::move(step_prefix)), summary_prefix_(std::move(summary_prefix)),
      excluder_(std::move(excluder)) {}

void StepLineReader::line(const std::string& line, std::optional<double> arrival) {
    auto payload = [&](const std::string& prefix) -> std::optional<std::string> {
        auto pos = line.find(prefix + " ");
        if (pos == std::string::npos) return std::nullopt;
        return line.substr(pos + prefix.size() + 1);
    };
    if (excluder_ && excluder_(line)) exclude_next_ = true;
    if (auto p = payload(step_prefix_)) {
        try {
            // The job's output: bounded like any outside JSON (a deep line must not crash the reader).
            const auto j = parse_bounded_json(*p, "step line", "a step's JSON object", kLineLimits);
            auto s = step_from_json(j);
            s.timed = !exclude_next_; // what times a step is the contract's to say, not the job's
            // When its line arrived is the wrapper's to say, never the job's (an arrival_s it printed).
            s.arrival_s = arrival;
            exclude_next_ = false;
            if (j.contains("eval_loss") && (j["eval_loss"].is_number() || j["eval_loss"].is_null()))
                log_.evals.push_back({s.step, j["eval_loss"].is_null()
                                                  ? std::numeric_limits<double>::quiet_NaN()
                                                  : j["eval_loss"].get<double>()});
            log_.steps.push_back(std::move(s));
        } catch (const nlohmann::json::exception&) {
            ++log_.malformed;
        } catch (const Error&) {
            ++log_.malformed;
        }
    } else if (auto q = payload(summary_prefix_)) {
        try {
            log_.summary = parse_bounded_json(*q, "summary line", "a summary JSON object", kLineLimits);
        } catch (const Error&) {
            ++log_.malformed;
        }
    }
}

StepLog parse_step_log(const std::string& text, const std::string& step_prefix,
                       const std::string& summary_prefix,
                       const std::function<bool(const std::string& line)>& excluder,
                       const std::vector<double>* line_times) {
    StepLineReader reader(step_prefix, summary_prefix, excluder);
    std::size_t line_no = 0;
    std::istringstream in(text);
    std::string line;
    for (; std::getline(in, line); ++line_no)
        reader.line(line, line_times && line_no < line_times->size()
                              ? std::optional<double>((*line_times)[line_no])
                              : std::nullopt);
    return std::move(reader.log());
}

} // namespace infrarsi::measure
