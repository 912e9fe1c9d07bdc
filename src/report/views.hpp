#pragma once
// The HTML report's views of the trials themselves, beside the campaign's plots (html.cpp): what people who
// run sweeps look for. Each draws only what was measured, from the report's JSON (report::build):
// - the per-trial curves: each trial's loss (the invariant) and step time against the job's own step
//   numbers, a line per trial, coloured by kind and outcome (curves.cpp);
// - the parallel coordinates: each measured trial's knobs and patch set against its step time
//   (parallel_coordinates.cpp);
// - the timeline: when each trial ran, by the scheduler's record, coloured by outcome (timeline.cpp);
// - the trial table: every trial, sortable by any column, its settings that differ from the baseline's
//   marked (trial_table.cpp).
#include "report/html.hpp"
#include "report/plot.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace infrarsi::report {

// Each trial's loss (`loss`) or step time against its step numbers; nullopt when no trial kept its steps.
std::optional<Plot> curves_plot(const nlohmann::json& report, bool loss);

// Doctor and search trials with a step time (ok, or stopped early: both measured), an axis per knob that
// varied, one for the patch set where any trial had patches, and their step time; nullopt with fewer than two
// such trials.
std::optional<Plot> parallel_coordinates_plot(const nlohmann::json& report);

// Each trial as a bar from its start to its end (seconds since the first trial started); nullopt when no
// trial has its times.
std::optional<Plot> timeline_plot(const nlohmann::json& report);

// The trial table (an HTML <table> and the script that sorts it by a click on a column's head).
std::string trial_table(const nlohmann::json& report, const AuditLink& link);

} // namespace infrarsi::report
