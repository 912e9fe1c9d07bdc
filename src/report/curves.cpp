#include "report/html_common.hpp"
#include "report/views.hpp"

#include <map>
#include <vector>

namespace infrarsi::report {

using nlohmann::json;
using namespace html;

namespace {

// The series a trial's curve goes in: the baseline's runs (the doctor's, the search batches' controls), the
// search's by outcome, the checks' (verification, equivalence, ablation).
std::string series_of(const json& t) {
    const auto kind = t["kind"].get<std::string>();
    if (kind == "doctor" || kind == "search_control") return "baseline";
    if (kind == "search") return "search_" + t["outcome"].get<std::string>();
    return "checks";
}

} // namespace

std::optional<Plot> curves_plot(const json& r, bool loss) {
    std::map<std::string, std::string> rows; // series -> trials, a blank line between two
    for (const auto& t : r["trials"]) {
        if (!has_curve(t)) continue;
        const auto& c = t["curve"];
        const auto& ys = loss ? c["loss"] : c["step_s"];
        if (!ys.is_array()) continue;
        std::string lines;
        for (std::size_t i = 0; i < c["steps"].size() && i < ys.size(); ++i)
            if (ys[i].is_number() && c["steps"][i].is_number() && (loss || ys[i].get<double>() > 0))
                lines += g(c["steps"][i].get<double>()) + " " + g(ys[i].get<double>()) + "\n";
        if (lines.empty()) continue;
        auto& dest = rows[series_of(t)];
        dest += (dest.empty() ? "" : "\n") + lines;
    }
    if (rows.empty()) return std::nullopt;
    Plot p;
    p.id = loss ? "loss-curves" : "step-time-curves";
    std::string plot;
    auto add = [&](const std::string& name, const std::string& colour, const std::string& width,
                   const std::string& title) {
        if (!rows.count(name)) return;
        const std::string block = "s" + std::to_string(p.data.size());
        p.data.emplace_back(block, rows[name]);
        plot += fmt::format("{}${} using 1:2 with lines lw {} lc rgb '{}' title {}", plot.empty() ? "" : ", ",
                            block, width, colour, gnuplot_quote(title));
        rows.erase(name);
    };
    add("baseline", "#000000", "1.5", "baseline (doctor, search controls)");
    add("checks", "#9ecae1", "1", "verification, equivalence and ablation runs");
    for (const std::string o : {"ok", "stopped_slow", "contract_violation"})
        add("search_" + o, outcome_style(o).colour, "1.2", std::string("search: ") + outcome_style(o).label);
    std::vector<std::string> rest; // the search's other outcomes (a crash, a timeout), each its own
    for (const auto& kv : rows)
        rest.push_back(kv.first);
    for (const auto& name : rest)
        add(name, outcome_style(name.substr(7)).colour, "1", "search: " + name.substr(7));
    p.script =
        fmt::format("set key below\nset grid\nset xlabel 'step (as the job numbers its steps)'\n"
                    "set ylabel {}\n{}plot {}",
                    gnuplot_quote(loss ? "loss" : "step time (s)"), loss ? "" : "set logscale y\n", plot);
    p.width = 760;
    return p;
}

} // namespace infrarsi::report
