#include "report/html_common.hpp"
#include "report/views.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

namespace infrarsi::report {

using nlohmann::json;
using namespace html;

namespace {

std::string value_text(const json& v) {
    return v.is_string() ? v.get<std::string>() : v.dump();
}

// An axis's values in order: numerically where every value is a number, else as text.
std::vector<std::string> ordered(const std::vector<json>& values) {
    const bool numeric =
        std::all_of(values.begin(), values.end(), [](const json& v) { return v.is_number(); });
    std::vector<json> vs = values;
    std::sort(vs.begin(), vs.end(), [&](const json& a, const json& b) {
        return numeric ? a.get<double>() < b.get<double>() : value_text(a) < value_text(b);
    });
    std::vector<std::string> out;
    for (const auto& v : vs)
        if (out.empty() || out.back() != value_text(v)) out.push_back(value_text(v));
    return out;
}

std::string patch_set(const json& t) {
    std::string s;
    for (const auto& p : t.value("patches", json::array()))
        s += (s.empty() ? "" : "+") + p.get<std::string>();
    return s.empty() ? "none" : s;
}

} // namespace

std::optional<Plot> parallel_coordinates_plot(const json& r) {
    std::vector<json> drawn; // measured trials of the doctor and the search
    for (const auto& t : r["trials"]) {
        const auto kind = t["kind"].get<std::string>();
        if ((kind == "doctor" || kind == "search") && t["step_s"].is_number() &&
            (t["outcome"] == "ok" || t["outcome"] == "stopped_slow"))
            drawn.push_back(t);
    }
    if (drawn.size() < 2) return std::nullopt;
    // The axes: each knob with more than one value among them, the patch set where any had one.
    std::map<std::string, std::vector<json>> values;
    for (const auto& t : drawn) {
        const json knobs = t.value("knobs", json::object());
        for (const auto& [k, v] : knobs.items())
            values[k].push_back(v);
    }
    struct Axis {
        std::string name;
        std::vector<std::string> values; // in order, a tic each
        bool patches = false;            // the patch set's axis
    };
    std::vector<Axis> axes;
    for (const auto& [k, vs] : values)
        if (auto o = ordered(vs); o.size() > 1) axes.push_back({k, std::move(o)});
    std::set<std::string> sets;
    for (const auto& t : drawn)
        sets.insert(patch_set(t));
    if (sets.size() > 1 || !sets.count("none"))
        axes.push_back({"patch set", std::vector<std::string>(sets.begin(), sets.end()), true});
    if (axes.empty()) return std::nullopt;

    std::string rows;
    for (const auto& t : drawn) {
        for (const auto& a : axes) {
            const json& knobs = t["knobs"];
            const std::string v = a.patches                ? patch_set(t)
                                  : knobs.contains(a.name) ? value_text(knobs[a.name])
                                                           : std::string();
            const auto at = std::find(a.values.begin(), a.values.end(), v);
            rows += (at == a.values.end() ? std::string("NaN") : std::to_string(at - a.values.begin())) + " ";
        }
        const std::string colour = t["kind"] == "doctor" ? "#000000" : outcome_style(t["outcome"]).colour;
        rows += g(t["step_s"].get<double>()) + " " +
                std::to_string(std::stoi(colour.substr(1), nullptr, 16)) + "\n";
    }
    const std::size_t n = axes.size() + 1; // the step time's axis last
    std::string script = "set border 0\nunset ytics\nunset key\n";
    script += fmt::format("set xrange [0.7:{}]\n", g(n + 0.3));
    std::string xtics;
    for (std::size_t i = 0; i < axes.size(); ++i) {
        const auto& name = axes[i].name;
        const auto& vs = axes[i].values;
        xtics += fmt::format("{}, ", gnuplot_quote(name) + " " + std::to_string(i + 1));
        std::string tics;
        for (std::size_t j = 0; j < vs.size(); ++j)
            tics += fmt::format("{}{} {}", j ? ", " : "", gnuplot_quote(vs[j]), j);
        script += fmt::format("set paxis {} range [-0.3:{}]\nset paxis {} tics ({})\n", i + 1,
                              g(static_cast<double>(vs.size()) - 0.7), i + 1, tics);
    }
    script += fmt::format("set paxis {} tics\nset xtics ({}'step time (s)' {}) scale 0,0\n", n, xtics, n);
    script += fmt::format("plot $trials using 1:{} with parallelaxes lw 1.5 lc rgb variable", n + 1);
    for (std::size_t i = 2; i <= n; ++i)
        script += fmt::format(", $trials using {} with parallelaxes", i);
    Plot p;
    p.id = "parallel-coordinates";
    p.data = {{"trials", rows}};
    p.script = script;
    p.width = std::max<int>(560, static_cast<int>(140 * n));
    return p;
}

} // namespace infrarsi::report
