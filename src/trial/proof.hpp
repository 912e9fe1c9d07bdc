#pragma once
// What a trial claims, held against what it cannot forge. The candidate patch is written by an agent
// rewarded for speed, so its job's own output (step lines, step times, result.json) is a claim; the evidence
// is what the plugin records as root (spank/stepd.cpp) or the local scheduler as the trial's parent
// (trial/evidence.hpp), and the manifest entry the orchestrator wrote. Each check returns the reason for a
// contract violation (outcome.hpp: StepLines, Timing, Settings), or an empty string when the claim holds.
// Rules and tolerances: docs/orchestrator.md ("Evidence").
#include "measure/steps.hpp"

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::trial {

struct ManifestTask;

// Exactly `expected` step lines (excluded steps count: they are steps the job ran), each step number printed
// once and in increasing order. Fewer lines is not this check's to say (MissingSteps): it returns "" then,
// unless the lines it has are out of order.
std::string check_step_lines(const std::vector<measure::StepSample>& steps, int expected);
// No step line after the contract's last step is taken: the first `expected` lines.
void keep_contract_steps(std::vector<measure::StepSample>& steps, int expected);

// The sum of the step times the job reported: the time it claims its steps took.
double reported_step_time_s(const std::vector<measure::StepSample>& steps);

// The pace of a run's step lines: the time its timed steps claim over the time the trial wrapper saw pass
// between their lines arriving (each timed step whose line and the line before it carry an arrival time; the
// first line's wait, which holds the start-up, is left out). nullopt with fewer than 2 such steps or under
// 10 ms seen. A job that prints each step as it ends claims about what passes (a little less: work outside
// its timer); a clock interposed to run slow claims less, however short the run.
std::optional<double> step_pace(const std::vector<measure::StepSample>& steps);
// A trial's pace may fall to this fraction of the baseline's (the doctor's median) before it is a Timing
// violation: a candidate that only speeds up its timed work while the work outside its timer stays the same
// lowers its pace, but by this much only with a large speed-up and a large untimed part.
inline constexpr double kPaceFloor = 0.7;
// And rise to this multiple of it: a candidate that removes untimed work (data loading outside its timer)
// raises its pace as much as the other lowers it; a run whose step times claim more than that (a result
// rewritten to look slow, the baseline's run of an A/B pair made to lose) is refused as well.
inline constexpr double kPaceCeiling = 1.0 / kPaceFloor;
// A pace above this says the step times are not the time that passed (a simulated clock): the time between
// lines is then process start-up noise, and no ratio to it means anything. A trial of such a baseline must
// claim more than passed too; a run whose step times are wall-clock time against it (the baseline's results
// inflated to look slow, or a simulated-looking baseline made up to switch the check off) is refused.
inline constexpr double kWallClockPaceCeiling = 1.2;
// "" when the trial's pace fits the baseline's: within [kPaceFloor, kPaceCeiling] times a wall-clock
// baseline's pace, above kWallClockPaceCeiling for a baseline above it; no check without a positive baseline
// pace. It never switches itself off.
std::string check_pace(double pace, double baseline_pace);

// What a run spends outside its step lines (process start, data and model set-up, teardown), measured by the
// doctor on the baseline's runs as the evidence's elapsed time minus the sum of its reported step times.
struct Startup {
    double median_s = 0;
    double spread_s = 0; // the largest distance of a run's startup from the median
    int runs = 0;
    // false: the baseline's own step times add up to more than its elapsed time (its step times are not
    // wall-clock time, e.g. a simulated job), so elapsed time cannot check them.
    bool wall_clock = true;
    // The evidence the doctor's runs had (TimingEvidence::source): a trial is checked against a startup
    // measured on the same kind of evidence only (an operator who gives --spool to run but not to doctor).
    std::string source;
};
nlohmann::json to_json(const Startup& s);
std::optional<Startup> startup_from_json(const nlohmann::json& j); // nullopt for anything else
// From the doctor's runs (elapsed - reported, one per run); nullopt with fewer than 2.
std::optional<Startup> measure_startup(const std::vector<double>& startups);

// The trial's elapsed time as something the job cannot write saw it.
struct TimingEvidence {
    double elapsed_s = 0;
    double resolution_s = 0; // the clock's step: 1 s for Slurm's accounting, ~0 for the plugin's and parent's
    std::string source;      // "plugin", "local parent", "slurm accounting": for the detail
};

// Slack for what startup the doctor could not see (a knob that loads more at start, a loaded machine), as a
// fraction of the elapsed time less startup.
inline constexpr double kTimingRelativeTolerance = 0.10;
// And as a fraction of the doctor's startup: the startup may double. Start-up (Python imports, process
// launch) slows with the machine's load as much as the steps do, and the doctor's few runs cannot see that
// spread: measured on a 2-core host, torchgpt's 5.5 s startup took 11.8 s with two builds beside it, and the
// honest baseline's own runs were violations without this. What this leaves open, work moved before the
// first step line, is worth at most one startup; the pace check (check_pace) holds the steps themselves.
inline constexpr double kStartupLoadTolerance = 1.0;
// The job's steps must account for the elapsed time less the doctor's startup: a claim shorter than
//   elapsed - startup.median - (3 * startup.spread + kStartupLoadTolerance * startup.median + resolution +
//   kTimingRelativeTolerance * (elapsed - startup.median))
// is implausible (a clock that runs slow, steps left unprinted). So is a claim longer than the elapsed time
// itself allows,
//   elapsed + resolution + kTimingRelativeTolerance * elapsed,
// (step times rewritten to look slow: a baseline run that makes a candidate look fast). Returns "" when the
// baseline's startup is not wall-clock time (Startup::wall_clock): check_pace holds such a job.
std::string check_timing(double reported_s, const TimingEvidence& evidence, const Startup& startup);

// The settings the trial wrapper actually gave the workload: the value of every variable its manifest entry
// names (nullopt: unset), the argv it ran, the build directory it ran against and that build's identity.
struct Settings {
    std::map<std::string, std::optional<std::string>> env;
    std::vector<std::string> argv;
    std::string build;
    std::string workdir;
    bool operator==(const Settings&) const = default;
};
nlohmann::json to_json(const Settings& s);
Settings settings_from_json(const nlohmann::json& j, const std::string& where); // throws infrarsi::Error
// What a task's entry asks for: its env, its command followed by its arguments, its build and workdir.
Settings expected_settings(const ManifestTask& task);
// "" when `seen` is the task's settings; else what differs (first few), or that none were recorded.
std::string check_settings(const std::optional<Settings>& seen, const ManifestTask& task);

} // namespace infrarsi::trial
