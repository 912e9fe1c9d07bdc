#include "report/html.hpp"

#include "measure/statistics.hpp"
#include "report/html_common.hpp"
#include "report/memory_map.hpp"
#include "report/plot.hpp"
#include "report/report.hpp"
#include "report/views.hpp"
#include "util/atomic_file.hpp"
#include "util/error.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>

namespace infrarsi::report {

using nlohmann::json;
namespace fs = std::filesystem;
using namespace html;

namespace {

// The search trials in the order they were planned.
std::vector<json> search_trials(const json& r) {
    std::vector<json> out;
    for (const auto& t : r["trials"])
        if (t["kind"] == "search") out.push_back(t);
    return out;
}

// The best verified (promoted) step time: what the campaign hands over.
std::optional<double> verified_step_s(const json& r) {
    std::optional<double> best;
    for (const auto& p : r["promoted"])
        if (p["candidate_step_s"].is_number() && (!best || p["candidate_step_s"].get<double>() < *best))
            best = p["candidate_step_s"].get<double>();
    return best;
}

// Horizontal reference lines of the progress plots.
std::string reference_lines(const json& r, std::optional<double> table_best) {
    std::string o;
    if (r.contains("baseline") && r["baseline"]["median_step_s"].is_number())
        o += fmt::format(", {} with lines dt 2 lw 1.5 lc rgb '#000000' title 'baseline {:.4g} s'",
                         g(r["baseline"]["median_step_s"].get<double>()),
                         r["baseline"]["median_step_s"].get<double>());
    if (auto v = verified_step_s(r))
        o += fmt::format(", {} with lines lw 2 lc rgb '#2ca02c' title 'verified {:.4g} s'", g(*v), *v);
    if (table_best)
        o += fmt::format(", {} with lines dt 3 lw 1.5 lc rgb '#9467bd' title 'table best {:.4g} s'",
                         g(*table_best), *table_best);
    return o;
}

// Best step time so far against the trial number, or against the node-hours spent when the trial finished.
std::optional<Plot> progress_plot(const json& r, bool by_node_hours, std::optional<double> table_best) {
    std::map<int, double> spent; // trial id -> node-hours of every trial up to and including it
    double cum = 0;
    for (const auto& t : r["trials"]) {
        cum += num(t["cost_node_s"], 0) / 3600.0;
        spent[t["id"].get<int>()] = cum;
    }
    // A trial stopped early as slower than the best so far is a measurement too (its first timed steps),
    // drawn as such (as Optuna's history draws pruned trials); the best-so-far line is over the trials that
    // ran every step, the ones that can be promoted.
    std::string ok, stopped, best;
    double best_so_far = INFINITY, last_x = 0;
    int n = 0;
    for (const auto& t : search_trials(r)) {
        ++n;
        const double x = by_node_hours ? spent[t["id"].get<int>()] : n;
        last_x = x;
        if (!t["step_s"].is_number()) continue;
        const double y = t["step_s"].get<double>();
        if (t["outcome"] == "ok") {
            ok += g(x) + " " + g(y) + "\n";
            best_so_far = std::min(best_so_far, y);
        } else if (t["outcome"] == "stopped_slow") {
            stopped += g(x) + " " + g(y) + "\n";
        }
        if (std::isfinite(best_so_far)) best += g(x) + " " + g(best_so_far) + "\n";
    }
    if (ok.empty() && stopped.empty()) return std::nullopt;
    Plot p;
    p.id = by_node_hours ? "progress-node-hours" : "progress-trials";
    std::string plot;
    for (const auto& [name, rows, style, title] :
         std::vector<std::tuple<std::string, std::string, std::string, std::string>>{
             {"best", best, "with steps lw 2.5 lc rgb '#1f77b4'", "best so far"},
             {"ok", ok, "with points pt 7 ps 0.7 lc rgb '#2ca02c'", "search trial, every step run"},
             {"stopped", stopped, "with points pt 9 ps 0.9 lc rgb '#ff7f0e'",
              "search trial stopped early as slower (its first steps)"}}) {
        if (rows.empty()) continue;
        p.data.emplace_back(name, rows);
        plot += fmt::format("{}${} using 1:2 {} title {}", plot.empty() ? "" : ", ", name, style,
                            gnuplot_quote(title));
    }
    p.script =
        fmt::format("set key below\nset grid\nset xlabel {}\nset ylabel 'step time (s)'\n"
                    "set xrange [{}:{}]\nplot {}{}",
                    gnuplot_quote(by_node_hours ? "node-hours spent (all trials, in order)" : "search trial"),
                    by_node_hours ? "0" : "0.5", g(by_node_hours ? last_x * 1.02 : n + 0.5), plot,
                    reference_lines(r, table_best));
    return p;
}

// Every trial's step time against its peak memory: the limit drawn, an OOM at its censored lower bound (the
// limit, an arrow: the peak was above it), build failures and contract violations marked; a trial without a
// step time sits on the dashed "no step time" line above the measured ones.
std::optional<Plot> memory_plot(const json& r) {
    const double limit = num(r.value("memory_limit_bytes", json()), 0) / kMiB;
    double ymax = 0, xmax = limit;
    for (const auto& t : r["trials"]) {
        ymax = std::max(ymax, num(t["step_s"], 0));
        xmax = std::max(xmax, num(t["peak_memory_bytes"], 0) / kMiB);
    }
    if (ymax <= 0 && xmax <= 0) return std::nullopt;
    const double band = ymax > 0 ? ymax * 1.15 : 1.0;
    std::map<std::string, std::string> rows; // series -> rows
    for (const auto& t : r["trials"]) {
        if (t["state"] != "finished") continue;
        const std::string o = t["outcome"].get<std::string>();
        const double y = num(t["step_s"], band);
        double x = num(t["peak_memory_bytes"], NAN) / kMiB;
        std::string series;
        if (o == "ok")
            series = t["kind"] == "search" ? "ok" : "ok_other";
        else if (o == "oom")
            series = "oom", x = limit;
        else if (o == "build_failure")
            series = "build";
        else if (o == "contract_violation")
            series = "violation";
        else if (o == "stopped_slow")
            series = "stopped";
        else
            series = "failed";
        if (!std::isfinite(x)) x = 0;
        rows[series] += g(x) + " " + g(y) + "\n";
    }
    const std::vector<std::tuple<std::string, std::string, std::string>> styles = {
        {"ok", "with points pt 7 ps 0.8 lc rgb '#1f77b4'", "ok (search)"},
        {"ok_other", "with points pt 6 ps 0.8 lc rgb '#17becf'", "ok (doctor, verification)"},
        {"oom", "with points pt 9 ps 1.3 lc rgb '#d62728'", "OOM (at its lower bound: the limit)"},
        {"build", "with points pt 2 ps 1.3 lc rgb '#8c564b'", "build failure"},
        {"violation", "with points pt 5 ps 1.1 lc rgb '#e377c2'", "contract violation"},
        {"stopped", "with points pt 9 ps 1.0 lc rgb '#ff7f0e'", "stopped early as slower (measured)"},
        {"failed", "with points pt 3 ps 1.1 lc rgb '#7f7f7f'", "other failure"}};
    if (rows.empty()) return std::nullopt;
    Plot p;
    p.id = "memory";
    std::string plot;
    for (const auto& [name, style, title] : styles) {
        if (!rows.count(name)) continue;
        p.data.emplace_back(name, rows[name]);
        plot += fmt::format("{}${} using 1:2 {} title {}", plot.empty() ? "" : ", ", name, style,
                            gnuplot_quote(title));
        if (name == "oom") // the censoring: the peak was somewhere to the right of the limit
            plot += fmt::format(", $oom using 1:2:({}):(0) with vectors head filled size screen 0.008,20 "
                                "lc rgb '#d62728' notitle",
                                g(std::max(xmax, limit) * 0.06));
    }
    p.script = fmt::format(
        "set key below\nset grid\nset xlabel 'peak memory per node (MiB)'\n"
        "set ylabel 'step time (s)'\nset xrange [0:{}]\nset yrange [0:{}]\n"
        "set arrow from {},graph 0 to {},graph 1 nohead lw 2 lc rgb '#d62728'\n"
        "set label 'limit {:.0f} MiB' at {},graph 0.97 right offset -0.5,0 textcolor rgb '#d62728'\n"
        "set arrow from graph 0,first {} to graph 1,first {} nohead dt 2 lc rgb '#999999'\n"
        "set label 'no step time' at graph 0.01,first {} offset 0,0.6 textcolor rgb '#666666'\nplot {}",
        g(std::max(xmax, limit) * 1.12), g(band * 1.1), g(limit), g(limit), limit, g(limit), g(band), g(band),
        g(band), plot);
    p.width = 760;
    return p;
}

// The censored memory model's P(OOM) over two knobs, the trials on top.
std::optional<Plot> oom_map_plot(const json& m) {
    if (!m.is_object() || m["cells"].empty()) return std::nullopt;
    const auto& av = m["a_values"];
    const json bv = m["b_values"].empty() ? json::array({""}) : m["b_values"];
    std::string cells, tok, tstopped, toom, tother;
    for (const auto& c : m["cells"])
        cells += fmt::format("{} {} {}\n", c["a"].get<int>(), c["b"].get<int>(), g(c["p_oom"].get<double>()));
    std::map<std::pair<int, int>, int> seen; // trials in one cell side by side
    for (const auto& t : m["trials"]) {
        const int a = t["a"].get<int>(), b = t["b"].get<int>();
        const int k = seen[{a, b}]++;
        const double dx = -0.32 + 0.08 * (k % 9), dy = 0.22 - 0.1 * (k / 9 % 3);
        auto& dest = t["outcome"] == "ok"             ? tok
                     : t["outcome"] == "stopped_slow" ? tstopped
                     : t["outcome"] == "oom"          ? toom
                                                      : tother;
        dest += fmt::format("{} {}\n", g(a + dx), g(b + dy));
    }
    auto tics = [](const json& vs) {
        std::string s;
        for (std::size_t i = 0; i < vs.size(); ++i)
            s += fmt::format("{}{} {}", i ? ", " : "", gnuplot_quote(vs[i].get<std::string>()), i);
        return "(" + s + ")";
    };
    Plot p;
    p.id = "oom-map";
    p.data = {{"cells", cells}};
    std::string plot =
        "$cells using 1:2:(0.5):(0.5):3 with boxxyerror fs solid 1.0 noborder lc palette notitle, "
        "$cells using 1:($2-0.3):(sprintf('%.2f',$3)) with labels font ',9' notitle";
    for (const auto& [name, rows, style, title] :
         std::vector<std::tuple<std::string, std::string, std::string, std::string>>{
             {"tok", tok, "pt 7 ps 0.9 lc rgb '#2ca02c'", "ok trial"},
             {"tstopped", tstopped, "pt 9 ps 0.9 lc rgb '#ff7f0e'", "stopped early as slower"},
             {"toom", toom, "pt 2 ps 1.4 lw 2 lc rgb '#000000'", "OOM trial"},
             {"tother", tother, "pt 4 ps 0.9 lc rgb '#7f7f7f'", "other outcome"}}) {
        if (rows.empty()) continue;
        p.data.emplace_back(name, rows);
        plot += fmt::format(", ${} using 1:2 with points {} title {}", name, style, gnuplot_quote(title));
    }
    const auto& knobs = m["knobs"];
    p.script = fmt::format(
        "set key outside right bottom\nset xrange [-0.5:{}]\nset yrange [-0.5:{}]\nset xtics {}\nset ytics "
        "{}\n"
        "set xlabel {}\nset ylabel {}\nset cbrange [0:1]\nset cblabel 'P(OOM)'\n"
        "set palette defined (0 '#f7fbff', 0.3 '#c6dbef', 0.6 '#fdae6b', 1 '#d62728')\nset tics out\nplot {}",
        g(av.size() - 0.5), g(bv.size() - 0.5), tics(av), tics(bv),
        gnuplot_quote(knobs[0].get<std::string>()),
        gnuplot_quote(knobs.size() > 1 ? knobs[1].get<std::string>() : ""), plot);
    p.width = 760;
    return p;
}

// Each verification's A/B pairs as speed-ups (baseline step / candidate step), its interval, and the line a
// promotion's lower bound must clear: 1 + the contract's [verify] min_speedup (a record from before that
// rule, without it, was judged at 1 + MDE: that one).
std::optional<Plot> verification_plot(const json& r) {
    std::string pairs, ci, tics;
    int k = 0;
    for (const auto& v : r["verifications"]) {
        const auto& ps = v.value("pairs", json::array());
        if (ps.empty()) continue;
        int j = 0;
        for (const auto& p : ps) {
            const double b = p.value("baseline_step_s", 0.0), c = p.value("candidate_step_s", 0.0);
            if (b > 0 && c > 0)
                pairs += fmt::format("{} {}\n", g(k - 0.3 + 0.6 * (j + 0.5) / ps.size()), g(b / c));
            ++j;
        }
        if (v["speedup_ci"].is_array() && v["speedup"].is_number())
            ci += fmt::format(
                "{} {} {} {} {}\n", k, g(v["speedup_ci"][0].get<double>()),
                g(v["speedup_ci"][1].get<double>()), g(v["speedup"].get<double>()),
                g(v["min_speedup"].is_number() ? v["min_speedup"].get<double>() : num(v["mde"], 0)));
        tics += fmt::format("{}{} {}", k ? ", " : "",
                            gnuplot_quote(fmt::format("#{}{}", v["id"].get<int>(),
                                                      v["promoted"].get<bool>() ? " promoted" : "")),
                            k);
        ++k;
    }
    if (k == 0) return std::nullopt;
    Plot p;
    p.id = "verification";
    p.data = {{"pairs", pairs}};
    std::string plot = "1 with lines dt 3 lc rgb '#000000' title 'no change'";
    if (!ci.empty()) {
        p.data.emplace_back("ci", ci);
        plot += ", $ci using 1:4:($1-0.4):($1+0.4):2:3 with boxxyerror fs transparent solid 0.2 noborder "
                "lc rgb '#1f77b4' title '95% interval', "
                "$ci using 1:4:($1-0.4):($1+0.4) with xerrorbars pt 0 lw 2.5 lc rgb '#1f77b4' title "
                "'speed-up', $ci using ($1-0.45):(1+$5):(0.9):(0) with vectors nohead dt 2 lw 1.5 "
                "lc rgb '#d62728' title '1 + min speed-up (the promotion threshold)'";
    }
    if (!pairs.empty())
        plot += ", $pairs using 1:2 with points pt 7 ps 0.8 lc rgb '#ff7f0e' title 'A/B pair'";
    p.script =
        fmt::format("set key outside right top\nset grid ytics\nset xrange [-0.6:{}]\nset xtics ({})\n"
                    "set ylabel 'speed-up (baseline / candidate step time)'\nset xlabel 'verification'\n"
                    "plot {}",
                    g(k - 0.4), tics, plot);
    p.width = 760;
    return p;
}

// Node-seconds spent by outcome.
std::optional<Plot> cost_plot(const json& r) {
    const auto& cost = r["cost_node_s"];
    if (cost.empty()) return std::nullopt;
    std::string rows;
    for (const auto& [o, v] : cost.items())
        rows += fmt::format("\"{}\" {} {}\n", o.empty() ? "unfinished" : o, g(v.get<double>()),
                            std::stoi(std::string(outcome_style(o).colour).substr(1), nullptr, 16));
    Plot p;
    p.id = "cost";
    p.data = {{"cost", rows}};
    p.script = "set style fill solid 0.8\nset boxwidth 0.6\nset grid ytics\nset yrange [0:*]\n"
               "set ylabel 'node-seconds'\nset xtics rotate by -20\n"
               "plot $cost using 0:2:3:xtic(1) with boxes lc rgb variable notitle, "
               "$cost using 0:2:(sprintf('%.0f',$2)) with labels offset 0,0.7 notitle";
    p.width = 560;
    p.height = 320;
    return p;
}

// The trials the memory map was fitted on, by kind ("3 doctor, 10 search").
std::string fitted_by_kind(const json& m) {
    std::string s;
    const json kinds = m.value("fitted_by_kind", json::object());
    for (const auto& [kind, n] : kinds.items())
        s += fmt::format("{}{} {}", s.empty() ? "" : ", ", n.get<int>(), kind);
    return s.empty() ? "none measured" : s;
}

std::string figure(const Plot& p, const std::string& title, const std::string& caption) {
    return fmt::format("<figure class=\"plot\" id=\"plot-{}\" data-plot=\"{}\">\n<figcaption><b>{}</b> {}"
                       "</figcaption>\n{}\n</figure>\n",
                       p.id, p.id, esc(title), caption, render_svg(p));
}

std::string audit_links(const json& t, const AuditLink& link) {
    std::string o = fmt::format("<a href=\"#trial-{}\">#{}</a>", t["id"].get<int>(), t["id"].get<int>());
    std::string files;
    if (const auto result = t.value("result", std::string()); !result.empty())
        files += fmt::format("<a href=\"{}\">result.json</a>",
                             esc(link(result, fmt::format("trial-{}-result.json", t["id"].get<int>()))));
    if (const auto log = t.value("log", std::string()); !log.empty())
        files += fmt::format("{}<a href=\"{}\">log.txt</a>", files.empty() ? "" : ", ",
                             esc(link(log, fmt::format("trial-{}-log.txt", t["id"].get<int>()))));
    return files.empty() ? o : o + " (" + files + ")";
}

const char* kStyle = R"(
body { font-family: 'DejaVu Sans', sans-serif; margin: 1.5em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
figure.plot { display: inline-block; vertical-align: top; margin: 0.5em 1em 1em 0; }
figure.plot svg { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { max-width: 760px; font-size: 0.9em; margin-bottom: 0.3em; }
table { border-collapse: collapse; font-size: 0.85em; }
td, th { border: 1px solid #ddd; padding: 2px 6px; text-align: left; vertical-align: top; }
table.sortable th { cursor: pointer; } table.sortable th[aria-sort=ascending]::after { content: " \25B2"; }
table.sortable th[aria-sort=descending]::after { content: " \25BC"; }
mark.differs { background: #fff3b0; } td.detail { white-space: pre-wrap; max-width: 40em; }
.summary td:first-child { font-weight: bold; } .note { color: #555; font-size: 0.9em; }
)";

} // namespace

double table_best_step_s(const fs::path& table) {
    std::ifstream in(table);
    if (!in) throw Error("cannot read the table", table.string(), "a recorded table (tests/bench/tables)");
    std::string line;
    std::getline(in, line);
    auto head = json::parse(line, nullptr, false);
    if (!head.is_object() || head.value("format", "") != "infrarsi-bench-table/1")
        throw Error("not a recorded table", table.string() + ":1", "format infrarsi-bench-table/1");
    double best = INFINITY;
    int n = 1;
    while (std::getline(in, line)) {
        ++n;
        if (line.empty()) continue;
        auto row = json::parse(line, nullptr, false);
        if (!row.is_object() || !row.contains("repeats"))
            throw Error("not a configuration line", fmt::format("{}:{}", table.string(), n),
                        "{\"repeats\": ...}");
        std::vector<double> ok;
        int ran = 0;
        for (const auto& rep : row["repeats"]) {
            if (rep.value("outcome", "") != "failed") ++ran;
            if (rep.value("outcome", "") == "ok" && rep.contains("step_time_s"))
                ok.push_back(rep["step_time_s"].get<double>());
        }
        if (2 * ran > static_cast<int>(row["repeats"].size()) && !ok.empty())
            best = std::min(best, measure::median(ok));
    }
    if (!std::isfinite(best)) throw Error("no feasible configuration", table.string(), "a measured table");
    return best;
}

namespace {
// The report's figures, each with its title and caption, or a note where there is nothing to draw yet.
struct Figures {
    std::string o;
    int drawn = 0;
    void add(const std::optional<Plot>& p, const std::string& title, const std::string& caption) {
        if (!p) {
            o += "<p class=\"note\">" + esc(title) + ": nothing to draw yet.</p>\n";
            return;
        }
        o += figure(*p, title, caption);
        ++drawn;
    }
};

// The summary table's rows: where the campaign is, its baseline, what it promoted, what it used.
std::string summary_rows(const json& r, std::optional<double> table_best) {
    std::string o;
    auto row = [&](const std::string& k, const std::string& v) {
        o += "<tr><td>" + k + "</td><td>" + v + "</td></tr>\n";
    };
    row("directory", esc(r["campaign"]["dir"].get<std::string>()));
    row("contract", esc(r["campaign"]["contract"].get<std::string>()));
    row("state", esc(r["campaign"]["state"].get<std::string>()));
    if (r.contains("baseline")) {
        const auto& b = r["baseline"];
        row("baseline",
            fmt::format("{} s/step (doctor, {} runs), noise CV {:.2f}%, minimum detectable effect {:.2f}%",
                        fmt_num(b["median_step_s"]), b.value("completed", 0), 100 * num(b["cv_between"], 0),
                        100 * num(b["minimum_detectable_effect"], 0)));
    }
    if (r["promoted"].empty() && r.contains("none_promoted"))
        row("promoted", esc(r["none_promoted"]["text"].get<std::string>()));
    for (const auto& p : r["promoted"])
        row("promoted",
            fmt::format("<a href=\"#verification-{}\">{}</a>: <b>{:.3f}x</b> (95% CI {:.3f}-{:.3f}), "
                        "{:.4f} &rarr; {:.4f} s/step",
                        p["id"].get<int>(), esc(p["candidate"].get<std::string>()), num(p["speedup"], 0),
                        num(p["speedup_ci"][0], 0), num(p["speedup_ci"][1], 0), num(p["baseline_step_s"], 0),
                        num(p["candidate_step_s"], 0)));
    const auto& bu = r["budget"];
    row("budget used",
        fmt::format("{} of {} search trials, {:.3f} node-hours, {:.0f} s wall", bu["trials_used"].get<int>(),
                    bu["trials"].get<int>(), num(bu["node_hours_used"], 0), num(bu["wall_s"], 0)));
    if (table_best) row("recorded table", fmt::format("best reference step time {:.4f} s", *table_best));
    return o;
}

// The campaign's plots: the search's progress, memory, the memory model's P(OOM), verification, cost.
void campaign_plots(Figures& f, const json& r, const json& memory_map, std::optional<double> table_best) {
    f.add(
        progress_plot(r, false, table_best), "Search progress by trial",
        "The best step time so far among search trials that ran every step (line), each of them (green dots) "
        "and each trial stopped early as slower than the best so far, at the time of the steps it ran "
        "(amber: "
        "a measurement, not a failure), with the baseline, the verified result and, given a recorded table, "
        "its best.");
    f.add(
        progress_plot(r, true, table_best), "Search progress by node-hours",
        "The same against the node-hours all trials (doctor, search, verification) had cost when each search "
        "trial finished.");
    f.add(memory_plot(r), "Step time against peak memory",
          "Every finished trial. An OOM trial is drawn at its censored lower bound, the limit (its peak was "
          "above it: the arrow); a trial without a measured step time sits on the dashed line.");
    if (memory_map.is_object())
        f.add(
            oom_map_plot(memory_map), "The memory model's P(OOM)",
            fmt::format(
                "The censored memory model fitted on {} trials ({}: each measured peak, of trials that ran "
                "every step or were stopped early as slower, and each OOM censored at the limit; {} prior) "
                "over the two knobs that move its prediction most, each cell the feasible candidate nearest "
                "the baseline; the trials at their values of those knobs on top.",
                memory_map["fitted_on"].get<int>(), esc(fitted_by_kind(memory_map)),
                esc(memory_map.value("prior", ""))));
    else
        f.o +=
            "<p class=\"note\">The memory model's P(OOM): no memory limit or no knob to draw it over.</p>\n";
    f.add(verification_plot(r), "Verification",
          "Each verification's counterbalanced A/B pairs as speed-ups (baseline / candidate step time), its "
          "95% interval, and 1 + the minimum detectable effect it had to clear.");
    f.add(cost_plot(r), "Cost by outcome", "Node-seconds spent on trials of each outcome.");
}

// Each promoted change with its audit path: its diff, settings, trials and verification.
std::string promoted_audits(const json& r, const AuditLink& link) {
    std::string o;
    if (r["promoted"].empty()) o += "<p>None.</p>\n";
    for (const auto& p : r["promoted"]) {
        o += fmt::format("<h3 id=\"promoted-{}\">{}</h3>\n<ul>\n", p["id"].get<int>(),
                         esc(p["candidate"].get<std::string>()));
        for (const auto& patch : p["patches"])
            o += fmt::format("<li>diff: <a href=\"{}\">{}</a>: {}</li>\n",
                             esc(link(patch["diff"].get<std::string>(),
                                      "patch-" + patch["id"].get<std::string>() + ".patch")),
                             esc(patch["id"].get<std::string>()),
                             esc(patch["description"].get<std::string>()));
        if (p["patches"].empty()) o += "<li>diff: none (knob settings only)</li>\n";
        o += "<li>settings: <code>";
        for (const auto& opt : p.value("sbatch_options", json::array()))
            o += "#SBATCH " + esc(opt.get<std::string>()) + "<br>";
        const json env = p.value("environment", json::object());
        for (const auto& [k, v] : env.items())
            o += "export " + esc(k) + "=" + esc(v.get<std::string>()) + "<br>";
        for (const auto& a : p.value("arguments", json::array()))
            o += esc(a.get<std::string>()) + " ";
        o += "</code></li>\n<li>supporting search trials:";
        for (const auto& t : p["supporting_trials"])
            o += " " + audit_links(t, link);
        o += "</li>\n<li>measurements (verification trials):";
        for (const auto& t : p["verification_trials"])
            o += " " + audit_links(t, link);
        o += fmt::format("</li>\n<li>verification: <a href=\"#verification-{}\">#{}</a>", p["id"].get<int>(),
                         p["id"].get<int>());
        for (const auto& e : p["evidence"])
            o += "; " + esc(e.get<std::string>());
        o += "</li>\n</ul>\n";
    }
    return o;
}

// Every verification, one row each.
std::string verification_table(const json& r) {
    std::string o;
    if (r["verifications"].empty())
        o += "<p class=\"none-verified\">No verification: " +
             esc(r.contains("none_promoted") ? r["none_promoted"]["text"].get<std::string>() : "none ran") +
             "</p>\n";
    else
        o += "<table>\n<tr><th>#</th><th>candidate</th><th>decision</th><th>speed-up</th><th>95% CI</th>"
             "<th>MDE</th><th>pairs</th><th>reasons</th></tr>\n";
    for (const auto& v : r["verifications"]) {
        std::string reasons;
        for (const auto& why : v["reasons"])
            reasons += esc(why.get<std::string>()) + "<br>";
        o += fmt::format("<tr id=\"verification-{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                         "<td>{:.2f}%</td><td>{}</td><td>{}</td></tr>\n",
                         v["id"].get<int>(), v["id"].get<int>(), esc(v["candidate"].get<std::string>()),
                         v["promoted"].get<bool>() ? "<b>promoted</b>" : esc(v.value("state", "")),
                         fmt_num(v["speedup"], "{:.3f}x"),
                         v["speedup_ci"].is_array()
                             ? fmt::format("{:.3f}-{:.3f}", num(v["speedup_ci"][0]), num(v["speedup_ci"][1]))
                             : "-",
                         100 * num(v["mde"], 0), v.value("pairs", json::array()).size(), reasons);
    }
    if (!r["verifications"].empty()) o += "</table>\n";
    return o;
}

// The trials' plots: loss and step time by step, knobs against step time, the timeline.
void trial_plots(Figures& f, const json& r) {
    f.add(
        curves_plot(r, true), "Loss by step, each trial",
        "Each trial's loss as the job printed it, against the job's own step numbers (the loss is the "
        "invariant: a candidate's curve must follow the baseline's); black the baseline's runs (the doctor's "
        "and the search batches' controls), coloured the search's by outcome, light blue the runs of the "
        "checks (verification, equivalence, ablation).");
    f.add(curves_plot(r, false), "Step time by step, each trial",
          "Each trial's step time as the job printed it (log scale: the first steps compile and warm up), a "
          "trial stopped early as slower ends where it was stopped.");
    f.add(
        parallel_coordinates_plot(r), "Knobs against step time",
        "Each measured trial of the doctor (black) and the search (green: ran every step; amber: stopped "
        "early as slower) as a line through its value of each knob that varied, its patch set, and its step "
        "time.");
    f.add(timeline_plot(r), "Timeline",
          "When each trial ran, as the scheduler recorded it, coloured by outcome (a build failure never "
          "ran).");
}

} // namespace

std::string render_html(const json& r, const json& memory_map, std::optional<double> table_best,
                        const AuditLink& link) {
    const std::string name = r["campaign"]["name"].get<std::string>();
    std::string o =
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>InfraRSI report: " +
        esc(name) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n";
    o += "<h1>InfraRSI report: campaign " + esc(name) + "</h1>\n<table class=\"summary\">\n";
    o += summary_rows(r, table_best);
    o += "</table>\n<h2>Plots</h2>\n";
    Figures f;
    campaign_plots(f, r, memory_map, table_best);
    o += f.o;
    o += "<h2>Promoted changes and their audit paths</h2>\n";
    o += promoted_audits(r, link);
    o += "<h2>Verifications</h2>\n";
    o += verification_table(r);
    o += "<h2>Trials</h2>\n";
    f.o.clear();
    trial_plots(f, r);
    o += f.o;
    o += "<p class=\"note\">Every trial; a click on a column's head sorts by it (again: the other way). "
         "Settings that differ from the baseline's are marked.</p>\n";
    o += trial_table(r, link);
    o += fmt::format("<p class=\"note\">{} plots, drawn by gnuplot (SVG terminal). Machine-readable: "
                     "<code>infrarsi report --json</code> (format {} {}).</p>\n</body>\n</html>\n",
                     f.drawn, r["format"]["name"].get<std::string>(), r["format"]["version"].get<int>());
    return o;
}

std::vector<fs::path> write_html(campaign::Campaign& c, const HtmlOptions& o) {
    const json r = build(c);
    const json m = memory_map(c);
    std::optional<double> table_best;
    if (!o.table.empty()) table_best = table_best_step_s(o.table);
    std::vector<fs::path> written;
    const fs::path html_dir = fs::absolute(o.file).parent_path();
    std::map<std::string, std::string> copied; // source -> href
    auto link = [&](const std::string& path, const std::string& name) -> std::string {
        if (path.empty()) return "#";
        // Only a regular file is copied (the job wrote it: a FIFO would block the copy, a symlink would copy
        // what it points at); anything else is linked where it is.
        std::error_code ec;
        if (o.audit_dir.empty() || !fs::is_regular_file(fs::symlink_status(path, ec)))
            return "file://" + fs::absolute(path).string();
        if (auto it = copied.find(path); it != copied.end()) return it->second;
        fs::create_directories(o.audit_dir);
        fs::copy_file(path, o.audit_dir / name, fs::copy_options::overwrite_existing);
        written.push_back(o.audit_dir / name);
        return copied[path] = fs::relative(fs::absolute(o.audit_dir / name), html_dir).string();
    };
    const std::string page = render_html(r, m, table_best, link);
    if (!html_dir.empty()) fs::create_directories(html_dir);
    write_file_atomically(o.file, page);
    written.insert(written.begin(), o.file);
    return written;
}

} // namespace infrarsi::report
