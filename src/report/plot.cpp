#include "report/plot.hpp"

#include "util/error.hpp"
#include "util/process.hpp"

#include <cstdlib>

namespace infrarsi::report {

std::string gnuplot_program() {
    const char* g = std::getenv("INFRARSI_GNUPLOT");
    return g && *g ? g : "gnuplot";
}

std::string gnuplot_quote(const std::string& s) {
    std::string o = "'";
    for (char c : s) {
        if (c == '\'') o += '\'';
        if (c == '\n') {
            o += ' ';
            continue;
        }
        o += c;
    }
    return o + "'";
}

namespace {
void replace_all(std::string& s, const std::string& from, const std::string& to) {
    for (auto at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
        s.replace(at, from.size(), to);
}
} // namespace

std::string render_svg(const Plot& p, std::chrono::milliseconds timeout) {
    std::string script = "set encoding utf8\n";
    script += "set terminal svg size " + std::to_string(p.width) + "," + std::to_string(p.height) +
              " dynamic noenhanced font 'DejaVu Sans,11' background '#ffffff'\nset output\n";
    for (const auto& [name, rows] : p.data)
        script +=
            "$" + name + " << EOD\n" + rows + (rows.empty() || rows.back() == '\n' ? "" : "\n") + "EOD\n";
    script += p.script + "\n";
    ProcessOptions po;
    po.stdin_data = script;
    po.timeout = timeout;
    ProcessResult r;
    try {
        r = run_process({gnuplot_program()}, po);
    } catch (const Error& e) {
        throw Error("gnuplot cannot be started: " + e.problem(), "plot " + p.id,
                    "gnuplot in PATH (Debian: apt-get install gnuplot-nox; scripts/setup installs it) or "
                    "INFRARSI_GNUPLOT");
    }
    if (!r.ok() || r.out.find("<svg") == std::string::npos)
        throw Error("gnuplot failed: " + r.err, "plot " + p.id, "an SVG from gnuplot's svg terminal");
    std::string svg = r.out.substr(r.out.find("<svg"));
    // Several plots in one page: their element ids must not collide.
    replace_all(svg, "gnuplot_canvas", p.id + "_canvas");
    replace_all(svg, "gpPt", p.id + "_Pt");
    replace_all(svg, "gpDot", p.id + "_Dot");
    replace_all(svg, "<title>Gnuplot</title>", "");
    return svg;
}

} // namespace infrarsi::report
