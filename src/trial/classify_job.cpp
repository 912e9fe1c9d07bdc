#include "trial/classify_job.hpp"

#include "contract/contract.hpp"
#include "measure/log_format.hpp"
#include "slurm/client.hpp"
#include "trial/result.hpp"
#include "util/bounded_json.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"
#include "util/json_field.hpp"

#include <fmt/core.h>

namespace infrarsi::trial {

using nlohmann::json;

slurm::JobRecord job_record_from_json(const json& j, const std::string& where) {
    if (!j.is_object()) throw Error("a job record is a JSON object", where, R"({"state": "COMPLETED", ...})");
    slurm::JobRecord r;
    r.raw_state = json_field<std::string>(j, "state", where);
    r.state = slurm::parse_job_state(r.raw_state);
    if (r.state == slurm::JobState::Unknown)
        throw Error(fmt::format("unknown job state '{}'", r.raw_state), where,
                    "a Slurm state (COMPLETED, FAILED, OUT_OF_MEMORY, TIMEOUT, NODE_FAIL, CANCELLED, ...)");
    const auto number = [&](const char* key) -> std::optional<double> {
        if (!j.contains(key) || j[key].is_null()) return std::nullopt;
        if (!j[key].is_number()) throw Error(fmt::format("'{}' must be a number", key), where);
        return j[key].get<double>();
    };
    r.exit_code = static_cast<int>(number("exit_code").value_or(0));
    r.exit_signal = static_cast<int>(number("signal").value_or(0));
    r.elapsed_s = number("elapsed_s").value_or(0);
    if (const auto m = number("max_rss_bytes"); m && *m > 0) r.max_rss_bytes = static_cast<long long>(*m);
    if (j.contains("node") && j["node"].is_string()) r.node_list = j["node"].get<std::string>();
    return r;
}

json to_json(const slurm::JobRecord& r) {
    json j = {{"state", r.raw_state.empty() ? slurm::to_string(r.state) : r.raw_state},
              {"exit_code", r.exit_code},
              {"signal", r.exit_signal},
              {"elapsed_s", r.elapsed_s},
              {"node", r.node_list}};
    if (r.max_rss_bytes) j["max_rss_bytes"] = *r.max_rss_bytes;
    return j;
}

slurm::JobRecord finished_slurm_record(const std::string& job_id) {
    for (const auto& r : slurm::Client().query({job_id})) {
        if (r.job_id != job_id) continue;
        if (!slurm::is_finished(r.state))
            throw Error(fmt::format("job {} has not ended ({})", job_id, r.raw_state),
                        "infrarsi trial classify", "a job that has ended (wait for it first)");
        return r;
    }
    throw Error(fmt::format("Slurm knows no job {}", job_id), "infrarsi trial classify",
                "a job id from sbatch --parsable (array tasks as JOB_INDEX)");
}

ClassifiedJob classify_job(const slurm::JobRecord& record, const JobFiles& files, const Limits& limits) {
    // Each output's step lines in files.format, with the line times the trial wrapper writes beside a log
    // (<output>.times) where they are: a format that prints no step time (torchtitan, the HF Trainer, ...)
    // times its steps by them, as ingest does. Without them such steps are counted, untimed (`counted`, one
    // second a line: never shown as a step time).
    std::string output;
    measure::LogReader timed(files.format), counted(files.format);
    double line_no = 0;
    for (const auto& f : files.outputs) {
        const std::string text = read_regular_file(f, {.max_bytes = 256u << 20});
        const auto times = read_line_times(line_times_path(f));
        std::size_t i = 0;
        for (std::size_t at = 0; at < text.size(); ++i) {
            const auto end = std::min(text.find('\n', at), text.size());
            const std::string_view line(text.data() + at, end - at);
            timed.line(line, i < times.size() ? std::optional(times[i]) : std::nullopt);
            counted.line(line, line_no += 1);
            at = end + 1;
        }
        output += text;
        if (!text.empty() && text.back() != '\n') output += '\n';
    }
    Evidence e;
    e.record = &record;
    e.job_output = output;
    std::optional<Result> result;
    if (!files.result.empty()) result = read_result(files.result);
    e.has_result = files.result.empty() || result.has_value();
    const bool from_result = result && !result->steps.steps.empty();
    const bool untimed = !from_result && counted.log().steps.size() > timed.log().steps.size();
    const auto steps = from_result ? result->steps.steps
                       : untimed   ? counted.take().steps
                                   : timed.take().steps;
    e.steps = static_cast<int>(steps.size());
    std::optional<measure::TrialSummary> summary;
    if (static_cast<int>(steps.size()) > files.warmup_steps) {
        measure::StepLog log;
        log.steps = steps;
        summary = measure::summarize(log, files.warmup_steps);
        e.summary = &*summary;
    }
    // The last lines of the output, for a crash's detail (as ingest gives it).
    std::vector<std::string_view> lines;
    for (std::size_t at = 0; at < output.size();) {
        const auto end = std::min(output.find('\n', at), output.size());
        lines.emplace_back(output.data() + at, end - at);
        at = end + 1;
    }
    std::string tail;
    for (std::size_t i = lines.size() > 3 ? lines.size() - 3 : 0; i < lines.size(); ++i)
        tail += (tail.empty() ? "" : " | ") + std::string(lines[i]);
    e.log_tail = tail;
    auto verdict = classify(e, limits);
    if (untimed && verdict.outcome == Outcome::Ok)
        verdict.detail = fmt::format("{} steps, untimed: {} prints no step time and no output has the "
                                     "trial wrapper's line times beside it (<output>.times)",
                                     e.steps, measure::describe(files.format));
    return {verdict, e.steps};
}

json to_json(const ClassifiedJob& c) {
    const Verdict& v = c.verdict;
    json j = {{"outcome", to_string(v.outcome)},
              {"violation", to_string(v.violation)},
              {"detail", v.detail},
              {"steps", c.steps}};
    if (v.log) j["log"] = to_json(*v.log);
    return j;
}

json classify_request(const ClassifyRequest& request) {
    if (request.job.empty() == request.record_file.empty())
        throw Error("which job?", "infrarsi trial classify", "either --job JOB_ID or --record FILE");
    const auto record = request.job.empty()
                            ? job_record_from_json(read_bounded_json(request.record_file,
                                                                     "a job record (slurm::JobRecord JSON)"),
                                                   request.record_file)
                            : finished_slurm_record(request.job);
    Limits limits;
    limits.mem = request.mem;
    limits.mem_bytes = request.mem.empty() ? 0 : contract::parse_memory(request.mem);
    limits.time_limit = request.time_limit;
    limits.steps = request.steps;
    measure::check(request.files.format, "infrarsi trial classify");
    limits.step_lines = measure::describe(request.files.format);
    auto j = to_json(classify_job(record, request.files, limits));
    j["record"] = to_json(record);
    return j;
}

} // namespace infrarsi::trial
