#include "trial/result.hpp"

#include "util/atomic_file.hpp"
#include "util/bounded_json.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"
#include "util/json_field.hpp"
#include "util/sha256.hpp"

#include <cerrno>
#include <cstdlib>
#include <limits>
#include <sys/stat.h>

namespace infrarsi::trial {

using nlohmann::json;

json to_json(const Result& r) {
    json j = {{"format", kResultFormat},
              {"trial_id", r.trial_id},
              {"index", r.index},
              {"exit_code", r.exit_code},
              {"signal", r.signal},
              {"wall_s", r.wall_s},
              {"max_rss_children_bytes", r.max_rss_children_bytes},
              {"log", r.log},
              {"steps", json::array()},
              {"malformed_step_lines", r.steps.malformed}};
    for (const auto& s : r.steps.steps)
        j["steps"].push_back(measure::to_json(s));
    if (r.steps.summary) j["summary"] = *r.steps.summary;
    if (!r.steps.evals.empty()) {
        j["eval_losses"] = json::array();
        for (const auto& e : r.steps.evals) // a loss of nan is written as null
            j["eval_losses"].push_back({{"step", e.step}, {"loss", e.loss}});
    }
    if (!r.error.empty()) j["error"] = r.error;
    if (!r.slurm.empty()) j["slurm"] = r.slurm;
    if (r.job_cgroup_peak_bytes) j["job_cgroup_peak_bytes"] = *r.job_cgroup_peak_bytes;
    if (r.gpu_sampled_peak_bytes) j["gpu_sampled_peak_bytes"] = *r.gpu_sampled_peak_bytes;
    if (r.settings) j["settings"] = to_json(*r.settings);
    if (r.leftover_processes_killed) j["leftover_processes_killed"] = r.leftover_processes_killed;
    if (!r.isolation.empty()) j["isolation"] = {{"in_place", r.isolated}, {"detail", r.isolation}};
    if (r.stopped_slow) j["stopped_slow"] = *r.stopped_slow;
    return j;
}

Result result_from_json(const json& j, const std::string& where) {
    if (!j.is_object()) throw Error("a result must be a JSON object", where);
    if (j.contains("format") && j.at("format") != kResultFormat)
        throw Error("unknown result format " + j.at("format").dump(), where, kResultFormat);
    Result r;
    // The first format numbered trials with integers.
    const json& id = j.contains("trial_id") ? j.at("trial_id") : json();
    r.trial_id = id.is_number_integer() ? std::to_string(id.get<std::int64_t>())
                                        : json_field<std::string>(j, "trial_id", where);
    r.index = json_field<std::uint32_t>(j, "index", where);
    r.exit_code = json_field<int>(j, "exit_code", where);
    r.signal = json_field<int>(j, "signal", where);
    r.wall_s = json_field<double>(j, "wall_s", where);
    r.max_rss_children_bytes = json_field<double>(j, "max_rss_children_bytes", where);
    r.log = json_field<std::string>(j, "log", where);
    const json& steps = j.contains("steps") ? j.at("steps") : json::array();
    if (!steps.is_array()) throw Error("'steps' must be an array", where);
    for (std::size_t i = 0; i < steps.size(); ++i) {
        try {
            r.steps.steps.push_back(measure::step_from_json(steps[i]));
        } catch (const json::exception&) {
            throw Error("steps[" + std::to_string(i) + "] is not a step (step, loss, step_time_s)", where);
        }
    }
    if (j.contains("malformed_step_lines"))
        r.steps.malformed = json_field<int>(j, "malformed_step_lines", where);
    if (j.contains("summary")) r.steps.summary = j.at("summary");
    if (j.contains("eval_losses")) {
        const json& evals = j.at("eval_losses");
        if (!evals.is_array()) throw Error("'eval_losses' must be an array", where);
        for (const auto& e : evals) {
            if (!e.is_object() || !e.contains("loss") ||
                !(e.at("loss").is_number() || e.at("loss").is_null()))
                throw Error("an entry of 'eval_losses' is not {\"step\": N, \"loss\": X}", where);
            r.steps.evals.push_back({json_field<int>(e, "step", where),
                                     e.at("loss").is_null() ? std::numeric_limits<double>::quiet_NaN()
                                                            : e.at("loss").get<double>()});
        }
    }
    if (j.contains("error")) r.error = json_field<std::string>(j, "error", where);
    if (j.contains("slurm")) r.slurm = json_field<std::map<std::string, std::string>>(j, "slurm", where);
    if (j.contains("job_cgroup_peak_bytes"))
        r.job_cgroup_peak_bytes = json_field<double>(j, "job_cgroup_peak_bytes", where);
    if (j.contains("gpu_sampled_peak_bytes")) {
        r.gpu_sampled_peak_bytes = json_field<double>(j, "gpu_sampled_peak_bytes", where);
        if (!(*r.gpu_sampled_peak_bytes >= 0))
            throw Error("field 'gpu_sampled_peak_bytes' must not be negative", where);
    }
    if (j.contains("settings")) r.settings = settings_from_json(j.at("settings"), where);
    if (j.contains("leftover_processes_killed"))
        r.leftover_processes_killed = json_field<int>(j, "leftover_processes_killed", where);
    if (j.contains("stopped_slow")) r.stopped_slow = json_field<std::string>(j, "stopped_slow", where);
    if (j.contains("isolation")) {
        r.isolated = json_field<bool>(j.at("isolation"), "in_place", where);
        r.isolation = json_field<std::string>(j.at("isolation"), "detail", where);
    }
    return r;
}

void write_result(const std::filesystem::path& path, const Result& r) {
    write_file_atomically(path, to_json(r).dump(1) + "\n");
}

std::optional<Result> read_result(const std::filesystem::path& path, FileDigest* seen) {
    if (seen) *seen = FileDigest{};
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 && errno == ENOENT) return std::nullopt;
    // The job can write this file: a bounded, non-blocking read of a regular file (never through a symlink:
    // the wrapper renames it into place) and a bounded parse, so no content can hang or crash ingest. The
    // bytes parsed are the bytes digested (`seen`): one read, nothing to swap in between.
    std::string text;
    try {
        text = read_regular_file(path.string(), {.max_bytes = kMaxResultBytes, .follow_symlink = false});
    } catch (const Error& e) {
        if (seen) seen->problem = e.what();
        throw;
    }
    if (seen) *seen = FileDigest{true, text.size(), sha256_hex(text), ""};
    return result_from_json(parse_bounded_json(text, path.string(), "a result written by the trial wrapper",
                                               {.max_bytes = kMaxResultBytes}),
                            path.string());
}

std::filesystem::path line_times_path(const std::filesystem::path& log) {
    return log.string() + ".times";
}

std::vector<double> read_line_times(const std::filesystem::path& path) {
    std::vector<double> times;
    std::string text;
    try {
        text = read_regular_file(path.string(), {.max_bytes = kMaxResultBytes, .follow_symlink = false});
    } catch (const Error&) {
        return times; // none, or not ours to read: the formats that need times then measure nothing
    }
    const char* p = text.c_str();
    while (*p) {
        char* end = nullptr;
        const double t = std::strtod(p, &end);
        if (end == p || *end != '\n' || !(t >= 0)) break;
        times.push_back(t);
        p = end + 1;
    }
    return times;
}

TrialOutput read_trial_output(const std::filesystem::path& file, std::size_t max_bytes) {
    TrialOutput out;
    struct stat st {};
    if (::lstat(file.c_str(), &st) != 0 && errno == ENOENT) return out;
    try {
        // One byte more than asked tells a file that was cut from one that fits.
        out.text =
            read_regular_file_tail(file.string(), {.max_bytes = max_bytes + 1, .follow_symlink = false});
    } catch (const Error& e) {
        out.problem = e.what();
        return out;
    }
    if (out.text.size() > max_bytes) {
        out.cut = true;
        const auto nl = out.text.find('\n');
        out.text.erase(0, nl == std::string::npos ? out.text.size() : nl + 1);
    }
    return out;
}

} // namespace infrarsi::trial
