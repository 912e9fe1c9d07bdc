// The HTML report of the fixture campaign: every plot drawn by gnuplot and inline, the audit links, the
// trial table; self-contained (nothing loaded from elsewhere). The browser check is tests/browser.
#include "report/html.hpp"
#include "report/memory_map.hpp"
#include "report/plot.hpp"
#include "report/report.hpp"
#include "util/error.hpp"

#include "report_fixture.hpp"

#include <doctest/doctest.h>

#include <fstream>
#include <regex>

using namespace infrarsi;
namespace fs = std::filesystem;

namespace {
int count(const std::string& s, const std::string& what) {
    int n = 0;
    for (auto at = s.find(what); at != std::string::npos; at = s.find(what, at + 1))
        ++n;
    return n;
}
} // namespace

TEST_CASE("the HTML report of a campaign has its plots inline, the audit path as links and every trial") {
    test::TempDir d;
    campaign::Campaign c(test::fixture_campaign(d));
    report::HtmlOptions o;
    o.file = d.path / "out" / "report.html";
    o.audit_dir = d.path / "out" / "audit";
    // The supporting trial's result and log: copied next to the page and linked relatively.
    store::TrialRow t;
    for (const auto& x : c.store().trials({.kinds = {store::TrialKind::Search}}))
        if (x.candidate_key == test::toy(4, 4, "none").key()) t = x;
    REQUIRE(t.id > 0);
    fs::create_directories(d.path / "trials" / "t5");
    std::ofstream(d.path / "trials" / "t5" / "result.json") << "{}";
    std::ofstream(d.path / "trials" / "t5" / "log.txt") << "step 1\n";
    t.result_path = (d.path / "trials" / "t5" / "result.json").string();
    c.store().update_trial(t);

    const auto written = report::write_html(c, o);
    const auto page = test::read_file(o.file);
    for (const char* id : {"progress-trials", "progress-node-hours", "memory", "oom-map", "verification",
                           "cost", "parallel-coordinates"})
        CHECK_MESSAGE(page.find(std::string("data-plot=\"") + id + "\"") != std::string::npos, id);
    // The fixture's trials kept no steps and no times: no curves, no timeline, and the page says so.
    CHECK(page.find("Loss by step, each trial: nothing to draw yet.") != std::string::npos);
    CHECK(page.find("Timeline: nothing to draw yet.") != std::string::npos);
    // The verification plot's threshold line is the rule's, 1 + [verify] min_speedup, not 1 + MDE.
    CHECK(page.find("1 + min speed-up (the promotion threshold)") != std::string::npos);
    CHECK(page.find("minimum detectable effect'") == std::string::npos);
    CHECK(count(page, "<svg") == 7);
    CHECK(count(page, "</svg>") == 7);
    // Self-contained: one script, inline (the trial table's sort), nothing fetched.
    CHECK(count(page, "<script") == 1);
    CHECK(page.find("<script src") == std::string::npos);
    CHECK_FALSE(std::regex_search(page, std::regex("(src|href)=\"https?:")));
    // The audit path: the diff of a patch is none here (knobs only), the supporting trial's files copied.
    CHECK(page.find("diff: none (knob settings only)") != std::string::npos);
    CHECK(page.find("href=\"audit/trial-" + std::to_string(t.id) + "-result.json\"") != std::string::npos);
    CHECK(page.find("href=\"audit/trial-" + std::to_string(t.id) + "-log.txt\"") != std::string::npos);
    CHECK(fs::exists(o.audit_dir / ("trial-" + std::to_string(t.id) + "-result.json")));
    CHECK(written.size() == 3);
    // Every trial is a row; the promoted verification is linked from the summary.
    CHECK(count(page, "<tr id=\"trial-") == static_cast<int>(c.store().trials().size()));
    CHECK(page.find("href=\"#verification-1\"") != std::string::npos);
}

TEST_CASE("the memory map puts the OOM where the model learned it: P(OOM) grows with the micro-batch") {
    test::TempDir d;
    campaign::Campaign c(test::fixture_campaign(d));
    const auto m = report::memory_map(c);
    REQUIRE(m.is_object());
    CHECK(m["knobs"][0] == "micro_batch"); // grad_accum holds no memory of its own; recompute moves less here
    CHECK(m["fitted_on"] == 7);            // the measured peaks of ok trials (3 doctor, 3 search) and the OOM
    CHECK(m["fitted_by_kind"] == nlohmann::json({{"doctor", 3}, {"search", 4}}));
    double small = -1, large = -1;
    for (const auto& cell : m["cells"]) {
        if (cell["a"] == 0 && cell["b"] == 0) small = cell["p_oom"].get<double>();
        if (cell["a"] == 4 && cell["b"] == 0) large = cell["p_oom"].get<double>();
    }
    CHECK(small >= 0);
    CHECK(small < 0.2);
    CHECK(large > 0.9); // micro_batch=16 OOMed
}

TEST_CASE("a plot gnuplot refuses is an error that says so") {
    report::Plot p;
    p.id = "bad";
    p.script = "plot $missing using 1:2";
    CHECK_THROWS_AS(report::render_svg(p), Error);
}

TEST_CASE("a recorded table's best is the fastest median of a feasible configuration") {
    // tests/bench/tables/minigpt-dense-1node.jsonl, computed apart (python3, the README's rule): 0.563465 s.
    const auto table = std::filesystem::path(INFRARSI_FIXTURES).parent_path() / "bench" / "tables" /
                       "minigpt-dense-1node.jsonl";
    CHECK(report::table_best_step_s(table) == doctest::Approx(0.563465));
    test::TempDir d;
    std::ofstream(d.path / "not-a-table.jsonl") << "{\"format\": \"something-else\"}\n";
    CHECK_THROWS_AS(report::table_best_step_s(d.path / "not-a-table.jsonl"), Error);
}
