// Jobs a trial submitted itself (campaign/self_submitted.cpp) are a warning on that trial in the report: in
// its JSON (self_submitted_jobs, only where there were any) and in the text under "Warnings".
#include "report/report.hpp"

#include "report_fixture.hpp"

#include <doctest/doctest.h>

using namespace infrarsi;
using nlohmann::json;

TEST_CASE("the report names the jobs submitted while a trial ran that the campaign did not submit") {
    test::TempDir d;
    campaign::Campaign c(test::fixture_campaign(d));
    auto& s = c.store();
    auto trials = s.trials();
    REQUIRE(trials.size() > 2);
    auto t = trials[1];
    t.measurements.self_submitted_jobs = {{"4242", "RUNNING", "2026-12-06T07:49:51"}};
    s.update_trial(t);
    const auto r = report::build(c);
    int named = 0;
    for (const auto& tj : r["trials"]) {
        if (tj["id"] == t.id) {
            REQUIRE(tj.contains("self_submitted_jobs"));
            CHECK(tj["self_submitted_jobs"][0]["job"] == "4242");
            ++named;
        } else {
            CHECK_FALSE(tj.contains("self_submitted_jobs")); // only where there were any
        }
    }
    CHECK(named == 1);
    const std::string text = report::render(r);
    CHECK(text.find("Warnings:\n  trial #" + std::to_string(t.id) +
                    ": jobs submitted while it ran that the campaign did not submit: 4242 (RUNNING, "
                    "submitted 2026-12-06T07:49:51)") != std::string::npos);
}
