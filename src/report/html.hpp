#pragma once
// The report for people who would rather look than read: one self-contained HTML file (no external resource:
// it opens offline and can be mailed; its one script, inline, sorts the trial table), its plots drawn by
// gnuplot (report/plot.hpp) and inline: search progress against trials and node-hours, step time against peak
// memory, the memory model's P(OOM) map, the verification pairs, cost by outcome; below them the promoted
// changes with their audit paths as links, the verifications, and the trials: their loss and step-time
// curves, knobs against step time, a timeline and the sortable table (report/views.hpp). docs/report.md
// describes each plot.
#include "campaign/campaign.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::report {

struct HtmlOptions {
    std::filesystem::path file;      // the HTML file
    std::filesystem::path audit_dir; // empty: link the audit files where they are; else copy them here
    std::filesystem::path table;     // a recorded table (tests/bench/tables): its best drawn on progress
};

// Writes the report of `c` (report::build, memory_map) to o.file, the audit files to o.audit_dir when set;
// returns the files written. Throws infrarsi::Error when gnuplot fails.
std::vector<std::filesystem::path> write_html(campaign::Campaign& c, const HtmlOptions& o);

// An audit file's href: its path, and the name it takes when copied (unique per file: "trial-12-log.txt").
using AuditLink = std::function<std::string(const std::string& path, const std::string& name)>;

// The page, from the report's JSON (report::build), the memory map (report::memory_map, may be null) and a
// table's best step time; `link` makes an audit file's href.
std::string render_html(const nlohmann::json& report, const nlohmann::json& memory_map,
                        std::optional<double> table_best_step_s, const AuditLink& link);

// The best reference step time of a recorded table (infrarsi-bench-table/1: the median of a feasible
// configuration's successful repeats, feasible when more than half of its repeats ran). Throws on a file
// that is not such a table.
double table_best_step_s(const std::filesystem::path& table);

} // namespace infrarsi::report
