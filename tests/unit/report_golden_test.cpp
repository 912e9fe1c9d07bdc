// Golden outputs of the machine-readable formats (docs/json-formats.md): `status --json`, `report --json` and
// `bank show --json` of fixed fixtures, compared field by field with tests/fixtures/golden/*.json, so a
// change to a field is a deliberate diff there. Values that depend on the clock or the temporary directory
// are replaced by "<volatile>" and "<tmp>" before the comparison. INFRARSI_UPDATE_GOLDEN=1 rewrites the
// files.
#include "bank/experience_bank.hpp"
#include "report/bank_report.hpp"
#include "report/format.hpp"
#include "report/report.hpp"

#include "report_fixture.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <set>

using namespace infrarsi;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

json normalized(json j, const std::string& tmp) {
    static const std::set<std::string> volatile_keys = {"wall_s", "estimate_left_s", "time", "created"};
    if (j.is_object()) {
        for (auto& [k, v] : j.items())
            v = volatile_keys.count(k) && !v.is_null() ? json("<volatile>") : normalized(v, tmp);
    } else if (j.is_array()) {
        for (auto& v : j)
            v = normalized(v, tmp);
    } else if (j.is_string()) {
        std::string s = j.get<std::string>();
        for (auto at = s.find(tmp); at != std::string::npos; at = s.find(tmp))
            s.replace(at, tmp.size(), "<tmp>");
        j = s;
    }
    return j;
}

void check_golden(const json& got, const std::string& name) {
    const fs::path file = fs::path(INFRARSI_FIXTURES) / "golden" / (name + ".json");
    if (const char* u = std::getenv("INFRARSI_UPDATE_GOLDEN"); u && std::string(u) == "1") {
        std::ofstream(file) << got.dump(2) << "\n";
        MESSAGE("rewrote " << file.string());
    }
    const json want = json::parse(test::read_file(file), nullptr, false);
    REQUIRE_MESSAGE(!want.is_discarded(), "cannot read " << file.string());
    // The first differing field, by its JSON pointer, rather than two large documents.
    const json diff = json::diff(want, got);
    CHECK_MESSAGE(diff.empty(), name << " differs from " << file.string() << ": " << diff.dump());
}

} // namespace

TEST_CASE("status --json of the fixture campaign matches its golden file, format infrarsi-status/2") {
    test::TempDir d;
    campaign::Campaign c(test::fixture_campaign(d));
    auto j = normalized(report::status(c), d.path.string());
    CHECK(j["format"] == json({{"name", "infrarsi-status"}, {"version", 2}}));
    check_golden(j, "status");
}

TEST_CASE("report --json of the fixture campaign matches its golden file, format infrarsi-report/2") {
    test::TempDir d;
    campaign::Campaign c(test::fixture_campaign(d));
    auto j = report::build(c);
    j["campaign"]["id"] = "<volatile>"; // made at init, at random
    j = normalized(j, d.path.string());
    CHECK(j["format"] == json({{"name", "infrarsi-report"}, {"version", 2}}));
    check_golden(j, "report");
}

TEST_CASE("bank show --json of a fixture bank matches its golden file, format infrarsi-bank/1") {
    test::TempDir d;
    bank::SoftwareStack stack{"g++ 12.2.0", "Open MPI 4.1.4", "", "minigpt@abc"};
    auto machine = [&](const char* synthetic) {
        return bank::HardwareKey{node::topology_from_synthetic(synthetic), 0, stack};
    };
    const auto a = machine("pack:2(memory=64GB) l3:1(size=32MB) l2:8(size=1MB) core:1 pu:2");
    const auto b = machine("pack:1(memory=16GB) l3:1(size=8MB) l2:4(size=256KB) core:1 pu:1");
    bank::ExperienceBank bank((d.path / "bank.sqlite").string(), "cluster-a");
    bank::Finding f;
    f.kind = "knob_setting";
    f.workload = "minigpt/dense-1node";
    f.verified = true;
    f.content = {{"candidate", test::toy(4, 4, "none").to_json()}, {"speedup", 1.42}, {"lower_bound", 1.38}};
    f.campaign = "c1";
    f.trials = {5, 6};
    CHECK(bank.add_finding(a, f));
    f.verified = false;
    f.content["speedup"] = 1.1;
    CHECK(bank.add_finding(b, f));
    auto j = normalized(report::describe_bank(bank, a), d.path.string());
    CHECK(j["format"] == json({{"name", "infrarsi-bank"}, {"version", 1}}));
    check_golden(j, "bank");
}

TEST_CASE(
    "the text report gives the failed trials' share of the cost apart from the trials stopped as slow") {
    test::TempDir d;
    campaign::Campaign c(test::fixture_campaign(d));
    auto j = report::build(c);
    const double failed = [&] {
        double s = 0;
        for (const auto& [k, v] : j["failed_cost_node_s"].items())
            s += v.get<double>();
        return s;
    }();
    REQUIRE(failed > 0);
    // A trial stopped after its first steps, slower than the incumbent: 20 node-seconds more, not a failure.
    j["outcomes"]["stopped_slow"] = 1;
    j["cost_node_s"]["stopped_slow"] = 20.0;
    j["failed_cost_node_s"]["stopped_slow"] = 20.0;
    const double total = j["total_cost_node_s"].get<double>() + 20.0;
    j["total_cost_node_s"] = total;
    const auto text = report::render(j);
    CHECK_MESSAGE(text.find(fmt::format("failed trials cost {:.1f} of {:.1f} node-seconds ({:.1f}%)", failed,
                                        total, 100 * failed / total)) != std::string::npos,
                  text);
    CHECK(text.find("trials stopped early as slower than the incumbent cost 20.0 node-seconds") !=
          std::string::npos);
}
