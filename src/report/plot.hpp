#pragma once
// Plots for the HTML report, drawn by gnuplot's SVG terminal (Debian's gnuplot-nox): a C++ tool calls a
// program that is in every distribution's archive, needs no Python and no plotting code of its own, and
// the SVG goes inline into one HTML file that opens offline (docs/report.md says why not matplotlib).
#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace infrarsi::report {

struct Plot {
    std::string id;     // unique in the page (its SVG's element ids are prefixed with it)
    std::string script; // gnuplot commands after the terminal line; data blocks are named $<name>
    std::vector<std::pair<std::string, std::string>> data; // name (without $), rows ("x y\n...")
    int width = 640, height = 380;
};

// The plot as an SVG element, ready to go inline into HTML (no XML declaration, ids prefixed with the plot's
// id). Throws infrarsi::Error when gnuplot is missing or refuses the script (its message included).
std::string render_svg(const Plot& p, std::chrono::milliseconds timeout = std::chrono::seconds(30));

// A gnuplot string literal: single-quoted, a ' doubled.
std::string gnuplot_quote(const std::string& s);

// The gnuplot program used (INFRARSI_GNUPLOT, else "gnuplot" in PATH).
std::string gnuplot_program();

} // namespace infrarsi::report
