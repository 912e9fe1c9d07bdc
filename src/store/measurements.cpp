#include "store/measurements.hpp"

#include "util/error.hpp"

#include <limits>
#include <string>

namespace infrarsi::store {

using nlohmann::json;

namespace {

// A number, or NaN where JSON holds null (a NaN is written as null).
double number(const json& v) {
    return v.is_number() ? v.get<double>() : std::numeric_limits<double>::quiet_NaN();
}

std::vector<double> numbers(const json& v) {
    std::vector<double> xs;
    if (v.is_array())
        for (const auto& x : v)
            xs.push_back(number(x));
    return xs;
}

std::optional<double> opt_number(const json& j, const char* key) {
    const auto it = j.find(key);
    return it != j.end() && it->is_number() ? std::optional<double>(it->get<double>()) : std::nullopt;
}

} // namespace

json to_json(const trial::Measurements& m) {
    json j = {{"version", kMeasurementsVersion}};
    if (!m.steady_samples.empty()) j["steady_samples"] = m.steady_samples;
    if (m.losses) j["losses"] = *m.losses;
    if (!m.phases.empty()) j["phases"] = m.phases;
    if (m.excluded_steps) j["excluded_steps"] = *m.excluded_steps;
    if (m.model_flops) j["model_flops"] = *m.model_flops;
    if (m.peak_flops) j["peak_flops"] = *m.peak_flops;
    if (m.reported_step_s) j["reported_step_s"] = *m.reported_step_s;
    if (m.step_numbers) j["step_numbers"] = *m.step_numbers;
    if (m.step_times_s) j["step_times_s"] = *m.step_times_s;
    if (m.started_at) j["started_at"] = *m.started_at;
    if (m.ended_at) j["ended_at"] = *m.ended_at;
    if (m.step_pace) j["step_pace"] = *m.step_pace;
    if (m.eval_loss) j["eval_loss"] = *m.eval_loss;
    if (m.evidence) j["evidence"] = m.evidence->document;
    if (m.isolation) j["isolation"] = trial::to_json(*m.isolation);
    if (!m.self_submitted_jobs.empty()) j["self_submitted_jobs"] = trial::to_json(m.self_submitted_jobs);
    if (m.leftover_processes_killed > 0) j["leftover_processes_killed"] = m.leftover_processes_killed;
    if (m.host_peak_bytes) j["host_peak_bytes"] = *m.host_peak_bytes;
    if (m.gpu_memory_source)
        j["gpu_memory_source"] = trial::gpu_memory_source_names.name(*m.gpu_memory_source);
    if (m.log_signal) j["log_signal"] = trial::to_json(*m.log_signal);
    if (m.job_files_removed) j["job_files_removed"] = trial::to_json(*m.job_files_removed);
    if (m.control) {
        j["control"] = {
            {"trial", m.control->trial}, {"step_s", m.control->step_s}, {"ratio", m.control->ratio}};
        if (m.control->outlier_control_s) j["control"]["outlier_control_s"] = *m.control->outlier_control_s;
    }
    return j;
}

trial::Measurements measurements_from_json(const json& j) {
    trial::Measurements m;
    if (!j.is_object()) return m;
    if (const int v = j.value("version", 1); v > kMeasurementsVersion)
        throw Error(
            "trial measurements of version " + std::to_string(v) + ", newer than this build understands",
            "campaign.db", "version <= " + std::to_string(kMeasurementsVersion) + " (upgrade infrarsi)");
    if (j.contains("steady_samples")) m.steady_samples = numbers(j["steady_samples"]);
    if (j.contains("losses") && j["losses"].is_array()) m.losses = numbers(j["losses"]);
    if (j.contains("phases") && j["phases"].is_object())
        for (const auto& [k, v] : j["phases"].items())
            m.phases[k] = number(v);
    if (j.contains("excluded_steps") && j["excluded_steps"].is_number())
        m.excluded_steps = j["excluded_steps"].get<int>();
    m.model_flops = opt_number(j, "model_flops");
    m.peak_flops = opt_number(j, "peak_flops");
    m.reported_step_s = opt_number(j, "reported_step_s");
    if (j.contains("step_numbers") && j["step_numbers"].is_array()) {
        m.step_numbers.emplace();
        for (const auto& n : j["step_numbers"])
            m.step_numbers->push_back(n.is_number() ? n.get<int>() : 0);
    }
    if (j.contains("step_times_s") && j["step_times_s"].is_array())
        m.step_times_s = numbers(j["step_times_s"]);
    m.started_at = opt_number(j, "started_at");
    m.ended_at = opt_number(j, "ended_at");
    m.step_pace = opt_number(j, "step_pace");
    m.eval_loss = opt_number(j, "eval_loss");
    if (j.contains("evidence") && j["evidence"].is_object()) {
        const auto& e = j["evidence"];
        m.evidence = trial::EvidenceRecord{e.value("source", ""), opt_number(e, "elapsed_s"), e};
    }
    if (j.contains("isolation") && j["isolation"].is_object())
        m.isolation = trial::IsolationRecord{j["isolation"].value("in_place", false),
                                             j["isolation"].value("detail", "")};
    if (j.contains("self_submitted_jobs") && j["self_submitted_jobs"].is_array())
        for (const auto& s : j["self_submitted_jobs"])
            if (s.is_object())
                m.self_submitted_jobs.push_back(
                    {s.value("job", ""), s.value("state", ""), s.value("submitted", "")});
    m.leftover_processes_killed = j.value("leftover_processes_killed", 0);
    m.host_peak_bytes = opt_number(j, "host_peak_bytes");
    if (j.contains("gpu_memory_source") && j["gpu_memory_source"].is_string())
        m.gpu_memory_source = trial::gpu_memory_source_names.parse(j["gpu_memory_source"].get<std::string>());
    if (j.contains("log_signal") && j["log_signal"].is_object())
        m.log_signal = trial::log_diagnosis_from_json(j["log_signal"]);
    if (j.contains("job_files_removed") && j["job_files_removed"].is_object())
        m.job_files_removed =
            trial::JobFilesRemoved{j["job_files_removed"].value("entries", std::uint64_t{0}),
                                   j["job_files_removed"].value("bytes", std::uint64_t{0})};
    if (j.contains("control") && j["control"].is_object()) {
        const auto& c = j["control"];
        if (c.value("ratio", json()).is_number())
            m.control = trial::ControlRatio{c.value("trial", std::int64_t{0}), c.value("step_s", 0.0),
                                            c["ratio"].get<double>(),
                                            c.value("outlier_control_s", json()).is_number()
                                                ? std::optional<double>(c["outlier_control_s"].get<double>())
                                                : std::nullopt};
    }
    return m;
}

} // namespace infrarsi::store
