#include "report/html_common.hpp"
#include "report/views.hpp"

namespace infrarsi::report {

using nlohmann::json;
using namespace html;

namespace {

// A click on a column's head sorts the rows by it (numbers by the cell's data-v, else its text; again:
// the other way). The page's only script: without it the table stays in trial order.
const char* kSortScript = R"(<script>
for (const table of document.querySelectorAll('table.sortable')) {
  const heads = table.tHead.rows[0].cells;
  for (let i = 0; i < heads.length; i++) {
    heads[i].addEventListener('click', () => {
      const body = table.tBodies[0], rows = Array.from(body.rows);
      const dir = heads[i].getAttribute('aria-sort') === 'ascending' ? -1 : 1;
      const key = (r) => {
        const c = r.cells[i], v = c.hasAttribute('data-v') ? c.getAttribute('data-v') : c.textContent;
        const n = Number.parseFloat(v);
        return Number.isNaN(n) ? v : n;
      };
      rows.sort((a, b) => {
        const x = key(a), y = key(b);
        if (typeof x !== typeof y) return typeof x === 'number' ? -1 : 1; // no figure: last
        return (x < y ? -1 : x > y ? 1 : 0) * dir;
      });
      for (const h of heads) h.removeAttribute('aria-sort');
      heads[i].setAttribute('aria-sort', dir > 0 ? 'ascending' : 'descending');
      for (const r of rows) body.appendChild(r);
    });
  }
}
</script>
)";

std::string value_text(const json& v) {
    return v.is_string() ? v.get<std::string>() : v.dump();
}

// A number's cell: its figure to sort by, its text to read.
std::string num_cell(const json& v, const std::string& text) {
    return v.is_number() ? fmt::format("<td data-v=\"{}\">{}</td>", g(v.get<double>()), text) : "<td>-</td>";
}

} // namespace

std::string trial_table(const json& r, const AuditLink& link) {
    const json base = r.value("baseline_knobs", json::object());
    const double base_step = r.contains("baseline") ? num(r["baseline"]["median_step_s"]) : NAN;
    std::string o =
        "<table class=\"trials sortable\">\n<thead><tr><th>#</th><th>batch</th><th>kind</th><th>outcome</th>"
        "<th>step s</th><th title=\"over its batch's control where it has one, else the doctor's "
        "baseline\">vs baseline</th><th>peak MiB</th><th>node-s</th><th>node</th><th>settings</th>"
        "<th>patches</th><th>detail</th><th>files</th></tr></thead>\n<tbody>\n";
    for (const auto& t : r["trials"]) {
        const std::string outcome = t["outcome"].get<std::string>();
        const int id = t["id"].get<int>();
        // The settings, each that differs from the baseline's marked.
        std::string settings;
        const json knobs = t.value("knobs", json::object());
        for (const auto& [k, v] : knobs.items()) {
            const std::string kv = esc(k + "=" + value_text(v));
            const bool differs = !base.contains(k) || base[k] != v;
            settings += (settings.empty() ? "" : " ") +
                        (differs ? "<mark class=\"differs\">" + kv + "</mark>" : "<span>" + kv + "</span>");
        }
        std::string patches;
        for (const auto& p : t.value("patches", json::array()))
            patches += (patches.empty() ? "" : " ") + std::string("<mark class=\"differs\">") +
                       esc(p.get<std::string>()) + "</mark>";
        std::string files;
        auto file = [&](const std::string& key, const std::string& name, const std::string& text) {
            const auto path = t.value(key, std::string());
            if (path.empty()) return;
            files += (files.empty() ? "" : " ") +
                     fmt::format("<a href=\"{}\">{}</a>",
                                 esc(link(path, fmt::format("trial-{}-{}", id, name))), text);
        };
        file("result", "result.json", "result.json");
        file("log", outcome == "build_failure" ? "build.log" : "log.txt",
             outcome == "build_failure" ? "build log" : "log.txt");
        // Over its batch's control where it has one (like against like, as the search compared it), else
        // over the doctor's baseline.
        const json step = t["step_s"];
        const json over_control = t.value("ratio_to_control", json());
        const bool controlled = over_control.is_number() && over_control.get<double>() > 0;
        const json speedup = controlled ? json(1 / over_control.get<double>())
                             : step.is_number() && step.get<double>() > 0 && std::isfinite(base_step)
                                 ? json(base_step / step.get<double>())
                                 : json();
        const json peak =
            t["peak_memory_bytes"].is_number() ? json(t["peak_memory_bytes"].get<double>() / kMiB) : json();
        const auto style = outcome_style(outcome);
        o += fmt::format(
            "<tr id=\"trial-{}\" class=\"{}\"><td data-v=\"{}\">{}</td><td>{}</td><td>{}</td>"
            "<td class=\"outcome\" style=\"color:{}\">{}</td>{}{}{}{}<td>{}</td><td>{}</td><td>{}</td>"
            "<td class=\"detail\">{}</td><td>{}</td></tr>\n",
            id,
            outcome == "ok"             ? "ok"
            : outcome == "stopped_slow" ? "stopped"
            : outcome.empty()           ? ""
                                        : "failed",
            id, id, t["batch"].get<int>(), esc(t["kind"].get<std::string>()), style.colour,
            esc(outcome.empty() ? t["state"].get<std::string>() : outcome), num_cell(step, fmt_num(step)),
            num_cell(speedup, fmt_num(speedup, controlled ? "{:.3f}x (its control)" : "{:.3f}x")),
            num_cell(peak, fmt_num(peak, "{:.0f}")),
            num_cell(t["cost_node_s"], fmt_num(t["cost_node_s"], "{:.1f}")),
            esc(t["node"].get<std::string>()), settings, patches.empty() ? "none" : patches,
            outcome == "ok" ? "" : esc(t["detail"].get<std::string>()), files);
    }
    return o + "</tbody>\n</table>\n" + kSortScript;
}

} // namespace infrarsi::report
