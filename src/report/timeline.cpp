#include "report/html_common.hpp"
#include "report/views.hpp"

#include <algorithm>
#include <map>

namespace infrarsi::report {

using nlohmann::json;
using namespace html;

std::optional<Plot> timeline_plot(const json& r) {
    double t0 = INFINITY, t1 = -INFINITY;
    int lo = 0, hi = 0;
    for (const auto& t : r["trials"])
        if (t.value("started_at", json()).is_number() && t.value("ended_at", json()).is_number()) {
            t0 = std::min(t0, t["started_at"].get<double>());
            t1 = std::max(t1, t["ended_at"].get<double>());
            const int id = t["id"].get<int>();
            lo = lo ? std::min(lo, id) : id, hi = std::max(hi, id);
        }
    if (!std::isfinite(t0)) return std::nullopt;
    std::map<std::string, std::string> rows; // outcome -> "start end id"
    for (const auto& t : r["trials"]) {
        if (!t.value("started_at", json()).is_number() || !t.value("ended_at", json()).is_number()) continue;
        rows[t["outcome"].get<std::string>()] +=
            fmt::format("{} {} {}\n", g(t["started_at"].get<double>() - t0),
                        g(t["ended_at"].get<double>() - t0), t["id"].get<int>());
    }
    Plot p;
    p.id = "timeline";
    std::string plot;
    for (const auto& [outcome, data] : rows) {
        const auto style = outcome_style(outcome);
        const std::string block = "o" + std::to_string(p.data.size());
        p.data.emplace_back(block, data);
        plot += fmt::format("{}${} using 1:3:($2-$1):(0) with vectors nohead lw 6 lc rgb '{}' title {}",
                            plot.empty() ? "" : ", ", block, style.colour,
                            gnuplot_quote(std::string(style.label) == "other failure"
                                              ? "other failure (" + outcome + ")"
                                              : std::string(style.label)));
    }
    p.script =
        fmt::format("set key below\nset grid xtics\nset xlabel 'seconds since the first trial started'\n"
                    "set ylabel 'trial #'\nset xrange [0:{}]\nset yrange [{}:{}]\nplot {}",
                    g(std::max(1.0, (t1 - t0) * 1.02)), hi + 1, lo - 1, plot);
    p.width = 760;
    p.height = std::clamp(120 + 12 * (hi - lo + 1), 300, 900);
    return p;
}

} // namespace infrarsi::report
