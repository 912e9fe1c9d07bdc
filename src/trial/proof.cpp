#include "trial/proof.hpp"

#include "measure/statistics.hpp"
#include "trial/manifest.hpp"
#include "util/error.hpp"
#include "util/json_field.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

namespace infrarsi::trial {

using nlohmann::json;

std::string check_step_lines(const std::vector<measure::StepSample>& steps, int expected) {
    for (std::size_t i = 1; i < steps.size(); ++i) {
        if (steps[i].step == steps[i - 1].step)
            return fmt::format("step {} printed twice (lines {} and {})", steps[i].step, i, i + 1);
        if (steps[i].step < steps[i - 1].step)
            return fmt::format("step {} printed after step {} (line {}): out of order", steps[i].step,
                               steps[i - 1].step, i + 1);
    }
    if (expected > 0 && static_cast<int>(steps.size()) > expected)
        return fmt::format(
            "{} step lines, {} more than the contract's {} steps (step {} after the last step, "
            "{})",
            steps.size(), steps.size() - expected, expected, steps[expected].step, steps[expected - 1].step);
    return {};
}

void keep_contract_steps(std::vector<measure::StepSample>& steps, int expected) {
    if (expected > 0 && static_cast<int>(steps.size()) > expected) steps.resize(expected);
}

double reported_step_time_s(const std::vector<measure::StepSample>& steps) {
    double sum = 0;
    for (const auto& s : steps)
        if (std::isfinite(s.step_time_s) && s.step_time_s > 0) sum += s.step_time_s;
    return sum;
}

std::optional<double> step_pace(const std::vector<measure::StepSample>& steps) {
    double claimed = 0, seen = 0;
    int n = 0;
    for (std::size_t i = 1; i < steps.size(); ++i) {
        const auto &prev = steps[i - 1], &s = steps[i];
        if (!s.timed || !prev.arrival_s || !s.arrival_s || !std::isfinite(s.step_time_s) ||
            s.step_time_s <= 0)
            continue;
        const int between = std::max(1, s.step - prev.step);
        claimed += s.step_time_s * between;
        seen += std::max(0.0, *s.arrival_s - *prev.arrival_s);
        ++n;
    }
    if (n < 2 || seen < 0.01) return std::nullopt;
    return claimed / seen;
}

std::string check_pace(double pace, double baseline_pace) {
    if (!(baseline_pace > 0)) return "";
    const std::string claim =
        fmt::format("its step times claim {:.0f}% of the time that passed between its step "
                    "lines (the trial wrapper's clock), the baseline's {:.0f}%",
                    100 * pace, 100 * baseline_pace);
    if (baseline_pace > kWallClockPaceCeiling) {
        if (pace > kWallClockPaceCeiling) return "";
        return fmt::format(
            "{}: the baseline's step times are not wall-clock time (above {:.0f}%), this run's are", claim,
            100 * kWallClockPaceCeiling);
    }
    if (pace < kPaceFloor * baseline_pace)
        return fmt::format("{}: below {:.0f}% of the baseline's pace", claim, 100 * kPaceFloor);
    if (pace > kPaceCeiling * baseline_pace)
        return fmt::format("{}: above {:.0f}% of the baseline's pace", claim, 100 * kPaceCeiling);
    return "";
}

json to_json(const Startup& s) {
    return {{"median_s", s.median_s},
            {"spread_s", s.spread_s},
            {"runs", s.runs},
            {"wall_clock", s.wall_clock},
            {"source", s.source}};
}

std::optional<Startup> startup_from_json(const json& j) {
    if (!j.is_object() || !j.contains("median_s") || !j["median_s"].is_number() || !j.contains("spread_s") ||
        !j["spread_s"].is_number())
        return std::nullopt;
    Startup s;
    s.median_s = j["median_s"].get<double>();
    s.spread_s = j["spread_s"].get<double>();
    s.runs = j.value("runs", 0);
    s.wall_clock = j.value("wall_clock", true);
    if (j.contains("source") && j["source"].is_string()) s.source = j["source"].get<std::string>();
    return s;
}

std::optional<Startup> measure_startup(const std::vector<double>& startups) {
    if (startups.size() < 2) return std::nullopt;
    Startup s;
    s.median_s = measure::median(startups);
    for (double x : startups)
        s.spread_s = std::max(s.spread_s, std::abs(x - s.median_s));
    s.runs = static_cast<int>(startups.size());
    // A startup below zero beyond the runs' spread: the job's step times add up to more than its elapsed
    // time.
    s.wall_clock = s.median_s >= -std::max(0.05, s.spread_s);
    return s;
}

std::string check_timing(double reported_s, const TimingEvidence& e, const Startup& startup) {
    if (!startup.wall_clock || e.elapsed_s <= 0) return {};
    const double steps_s = e.elapsed_s - std::max(0.0, startup.median_s);
    const double tolerance = 3 * startup.spread_s + kStartupLoadTolerance * std::max(0.0, startup.median_s) +
                             e.resolution_s + kTimingRelativeTolerance * std::max(0.0, steps_s);
    const double most_s = e.elapsed_s + e.resolution_s + kTimingRelativeTolerance * e.elapsed_s;
    if (reported_s > most_s)
        return fmt::format(
            "the step lines add up to {:.3f} s, and the {} saw {:.3f} s elapsed: {:.3f} s more "
            "than the run lasted (tolerance {:.3f} s)",
            reported_s, e.source, e.elapsed_s, reported_s - e.elapsed_s, most_s - e.elapsed_s);
    if (reported_s >= steps_s - tolerance) return {};
    return fmt::format(
        "the step lines add up to {:.3f} s, and the {} saw {:.3f} s elapsed; less the doctor's "
        "startup {:.3f} s (spread {:.3f} s over {} runs) that leaves {:.3f} s for the steps, "
        "{:.3f} s more than they claim (tolerance {:.3f} s)",
        reported_s, e.source, e.elapsed_s, startup.median_s, startup.spread_s, startup.runs, steps_s,
        steps_s - reported_s, tolerance);
}

json to_json(const Settings& s) {
    json env = json::object();
    for (const auto& [k, v] : s.env)
        env[k] = v ? json(*v) : json();
    return {{"env", env}, {"argv", s.argv}, {"build", s.build}, {"workdir", s.workdir}};
}

Settings settings_from_json(const json& j, const std::string& where) {
    if (!j.is_object()) throw Error("'settings' must be an object", where);
    Settings s;
    if (j.contains("env")) {
        if (!j["env"].is_object()) throw Error("'settings.env' must be an object", where);
        for (const auto& [k, v] : j["env"].items()) {
            if (!v.is_null() && !v.is_string())
                throw Error("'settings.env." + k + "' must be a string or null", where);
            s.env[k] = v.is_null() ? std::nullopt : std::optional<std::string>(v.get<std::string>());
        }
    }
    s.argv = json_field<std::vector<std::string>>(j, "argv", where);
    s.build = json_field<std::string>(j, "build", where);
    s.workdir = json_field<std::string>(j, "workdir", where);
    return s;
}

Settings expected_settings(const ManifestTask& task) {
    Settings s;
    for (const auto& [k, v] : task.env)
        s.env[k] = v;
    s.argv = task.command;
    s.argv.insert(s.argv.end(), task.args.begin(), task.args.end());
    s.build = task.build;
    s.workdir = task.workdir;
    return s;
}

std::string check_settings(const std::optional<Settings>& seen, const ManifestTask& task) {
    if (!seen) return "the result records no settings (not written by this trial wrapper)";
    const Settings want = expected_settings(task);
    std::vector<std::string> diffs;
    for (const auto& [k, v] : want.env) {
        const auto it = seen->env.find(k);
        const auto got = it == seen->env.end() ? std::nullopt : it->second;
        if (got != v)
            diffs.push_back(fmt::format("{}={} (manifest: {})", k, got ? "'" + *got + "'" : "unset",
                                        v ? "'" + *v + "'" : "unset"));
    }
    if (seen->argv != want.argv)
        diffs.push_back(
            fmt::format("argv of {} elements, not the manifest's {}", seen->argv.size(), want.argv.size()));
    if (seen->build != want.build)
        diffs.push_back(fmt::format("build '{}' (manifest: '{}')", seen->build, want.build));
    if (seen->workdir != want.workdir)
        diffs.push_back(fmt::format("workdir '{}' (manifest: '{}')", seen->workdir, want.workdir));
    std::string out;
    for (std::size_t i = 0; i < diffs.size() && i < 4; ++i)
        out += (out.empty() ? "" : "; ") + diffs[i];
    if (diffs.size() > 4) out += fmt::format("; and {} more", diffs.size() - 4);
    return out;
}

} // namespace infrarsi::trial
