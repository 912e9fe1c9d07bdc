#pragma once
// What the HTML report's parts share (html.cpp and the views beside it): HTML escaping, number formats, and
// one colour and name per trial outcome, so that every plot and table of the page says an outcome alike (a
// trial stopped early as slower is a measurement, never drawn as a failure).
#include <nlohmann/json.hpp>

#include <fmt/core.h>

#include <cmath>
#include <string>

namespace infrarsi::report::html {

inline std::string esc(const std::string& s) {
    std::string o;
    o.reserve(s.size());
    for (char c : s) {
        switch (c) {
        case '&':
            o += "&amp;";
            break;
        case '<':
            o += "&lt;";
            break;
        case '>':
            o += "&gt;";
            break;
        case '"':
            o += "&quot;";
            break;
        case '\'':
            o += "&#39;";
            break;
        default:
            o += c;
        }
    }
    return o;
}

inline double num(const nlohmann::json& v, double otherwise = NAN) {
    return v.is_number() ? v.get<double>() : otherwise;
}
inline std::string g(double v) {
    return fmt::format("{:.6g}", v);
}
inline std::string fmt_num(const nlohmann::json& v, const char* spec = "{:.4f}") {
    return v.is_number() ? fmt::format(fmt::runtime(spec), v.get<double>()) : "-";
}
inline constexpr double kMiB = 1 << 20;

// How the page draws and names an outcome (trial::Outcome's names).
struct OutcomeStyle {
    const char* colour; // gnuplot's rgb and CSS
    const char* label;
};
inline OutcomeStyle outcome_style(const std::string& outcome) {
    if (outcome == "ok") return {"#2ca02c", "ok"};
    if (outcome == "stopped_slow") return {"#ff7f0e", "stopped early (slower than the best so far)"};
    if (outcome == "oom") return {"#d62728", "OOM"};
    if (outcome == "build_failure") return {"#8c564b", "build failure"};
    if (outcome == "contract_violation") return {"#e377c2", "contract violation"};
    if (outcome.empty()) return {"#bcbd22", "not finished"};
    return {"#7f7f7f", "other failure"};
}

// A trial's step times and losses as the job printed them (report.cpp's trial_json "curve"): whether there
// are any.
inline bool has_curve(const nlohmann::json& t) {
    return t.value("curve", nlohmann::json()).is_object() && t["curve"]["steps"].is_array() &&
           !t["curve"]["steps"].empty();
}

} // namespace infrarsi::report::html
