// Campaign pieces that need no cluster: init's locks and refusals, the trial wrapper's result file, the
// batch manifest's knob declarations and the wall-time reserve for verification.
#include "campaign/campaign.hpp"
#include "contract/contract.hpp"
#include "trial/exec.hpp"
#include "trial/manifest.hpp"
#include "trial/result.hpp"
#include "util/error.hpp"

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace infrarsi;
using test::TempDir;

namespace {
// A private copy of the toyload fixture (workload, patches, contract) that the test may change.
fs::path copy_fixture(const fs::path& to) {
    const fs::path fx = INFRARSI_FIXTURES;
    fs::copy(fx / "toyload", to / "toyload", fs::copy_options::recursive);
    fs::copy(fx / "toyload-patches", to / "toyload-patches", fs::copy_options::recursive);
    fs::copy_file(fx / "toyload.contract.toml", to / "toyload.contract.toml");
    return to / "toyload.contract.toml";
}
} // namespace

TEST_CASE("init locks the inputs; a changed protected file stops every later command") {
    TempDir tmp;
    auto contract = copy_fixture(tmp.path);
    campaign::Campaign::init(contract, tmp.path / "c");
    {
        campaign::Campaign c(tmp.path / "c");
        CHECK(c.contract().space.patches ==
              std::vector<std::string>{"broken_build", "fast_kernel", "math_shortcut"});
        CHECK(c.store().locks().size() == 5); // contract, tree, catalog, 2 protected files
    }
    CHECK_THROWS_WITH_AS(campaign::Campaign::init(contract, tmp.path / "c"),
                         doctest::Contains("already exists"), Error);
    std::ofstream(tmp.path / "toyload" / "loss.c", std::ios::app) << "/* edited */\n";
    CHECK_THROWS_WITH_AS(campaign::Campaign(tmp.path / "c"), doctest::Contains("protected loss.c"), Error);
}

TEST_CASE("the trial wrapper resolves its index in the manifest and writes result.json with the step lines") {
    TempDir tmp;
    trial::Manifest m;
    m.campaign = "c1";
    m.knobs = {{"X", std::nullopt}, {"STEPTIME", std::vector<std::string>{"0.5"}}};
    trial::ManifestTask t0;
    t0.index = 0;
    t0.trial_id = "1";
    t0.env = {{"X", "a"}};
    t0.command = {"true"};
    t0.result = (tmp.path / "0/result.json").string();
    t0.log = (tmp.path / "0/log.txt").string();
    trial::ManifestTask t1 = t0;
    t1.index = 1;
    t1.trial_id = "2";
    t1.env = {{"STEPTIME", "0.5"}};
    t1.command = {"sh", "-c",
                  "echo \"INFRARSI_STEP {\\\"step\\\":1,\\\"loss\\\":2.5,\\\"step_time_s\\\":$STEPTIME}\"; "
                  "echo \"id=$INFRARSI_TRIAL_ID result=${INFRARSI_RESULT:-unset}\"; exit 3"};
    t1.result = (tmp.path / "1/result.json").string();
    t1.log = (tmp.path / "1/log.txt").string();
    m.tasks = {t0, t1};
    trial::write_manifest(tmp.path / "manifest.json", m);
    CHECK(trial::execute(tmp.path / "manifest.json", 1) == 3);
    auto r = trial::read_result(tmp.path / "1/result.json");
    REQUIRE(r);
    CHECK(r->trial_id == "2");
    CHECK(r->exit_code == 3);
    REQUIRE(r->steps.steps.size() == 1);
    CHECK(r->steps.steps[0].step_time_s == 0.5);
    // The workload learns its trial id, not where the wrapper's result goes.
    std::ifstream log(tmp.path / "1/log.txt");
    CHECK(std::string(std::istreambuf_iterator<char>(log), {}).find("id=2 result=unset") !=
          std::string::npos);
    CHECK_THROWS_AS(trial::execute(tmp.path / "manifest.json", 7), Error);

    // A job that prints its own log format with no step time: the wrapper's line times give one.
    m.metrics.kind = measure::LogFormatKind::KeyValue;
    m.knobs["PAUSE"] = std::nullopt;
    t1.env = {{"PAUSE", "0.3"}};
    t1.command = {"sh", "-c", "echo setup; echo step=1 loss=2.5; sleep $PAUSE; echo step=2 loss=2.4 >&2"};
    m.tasks = {t1};
    trial::write_manifest(tmp.path / "manifest.json", m);
    CHECK(trial::execute(tmp.path / "manifest.json", 1) == 0);
    r = trial::read_result(tmp.path / "1/result.json");
    REQUIRE(r);
    REQUIRE(r->steps.steps.size() == 2);
    CHECK(r->steps.steps[1].step_time_s > 0);
    CHECK(trial::read_line_times(trial::line_times_path(tmp.path / "1/log.txt")).size() == 3);
}

TEST_CASE("the batch manifest declares every env name a task sets: knobs with their domain, fixed names with "
          "their values") {
    auto c = contract::load(fs::path(INFRARSI_FIXTURES) / "toyload.contract.toml");
    std::vector<trial::ManifestTask> tasks;
    for (const char* mb : {"1", "4"}) {
        trial::ManifestTask t;
        t.index = static_cast<std::uint32_t>(tasks.size());
        t.env = {{"TOY_MICRO_BATCH", mb},
                 {"TOY_GRAD_ACCUM", "16"},
                 {"TOY_RECOMPUTE", "none"},
                 {"TOY_GLOBAL_BATCH", "16"},
                 {"TOY_STEPS", "8"},
                 {"TOY_SEED", "1"},
                 {"TOY_BIN", std::string("/c/sandboxes/") + mb + "/build/toy"}};
        tasks.push_back(t);
    }
    using Values = std::vector<std::string>;
    auto k = campaign::manifest_knobs(c.space, tasks);
    CHECK(k.at("TOY_MICRO_BATCH") == Values{"1", "2", "4", "8", "16"});
    CHECK(k.at("TOY_RECOMPUTE") == Values{"none", "selective", "full"});
    CHECK(k.at("TOY_STEPS") == Values{"8"});
    CHECK(k.at("TOY_GLOBAL_BATCH") == Values{"16"});
    CHECK(k.at("TOY_BIN") == Values{"/c/sandboxes/1/build/toy", "/c/sandboxes/4/build/toy"});
    // Every name any task sets is declared, with that task's value allowed.
    for (const auto& t : tasks)
        for (const auto& [name, value] : t.env) {
            REQUIRE(k.contains(name));
            const auto& allowed = k.at(name);
            CHECK((!allowed || std::find(allowed->begin(), allowed->end(), value) != allowed->end()));
        }

    // A wide integer knob is declared without listing its values; a boolean lists 0 and 1.
    space::Space wide;
    space::Knob n;
    n.name = "tokens";
    n.kind = space::KnobKind::Integer;
    n.min = 1;
    n.max = 1000000;
    n.env = "TOKENS";
    n.baseline = 1LL;
    space::Knob b;
    b.name = "flag";
    b.kind = space::KnobKind::Bool;
    b.env = "FLAG";
    b.baseline = false;
    space::Knob silent = b;
    silent.name = "internal";
    silent.env.clear();
    wide.knobs = {n, b, silent};
    auto kw = campaign::manifest_knobs(wide, {});
    CHECK_FALSE(kw.at("TOKENS"));
    CHECK(kw.at("FLAG") == Values{"0", "1"});
    CHECK(kw.size() == 2);
}

TEST_CASE("the verification reserve: baseline trials plus the observed overhead, two per A/B pair") {
    campaign::TrialCostModel m;
    m.step_s = 0.5;
    m.cold_step_s = 2.0;
    m.steps = 10;
    m.warmup_steps = 2;
    m.overhead_s = 3;
    CHECK(m.steps_s() == doctest::Approx(2 * 2.0 + 8 * 0.5));
    CHECK(m.trial_s() == doctest::Approx(11.0));
    CHECK(campaign::verification_wall_s(m, 2, 3) == doctest::Approx(2 * 3 * 2 * 11.0));
    CHECK(campaign::verification_wall_s(m, 0, 3) == 0);
    // A cold step faster than the steady one (no warm-up effect) is not counted as faster.
    m.cold_step_s = 0.1;
    CHECK(m.steps_s() == doctest::Approx(10 * 0.5));
    m.cold_step_s = 2.0;

    // Pairs that fit what is left of the wall budget.
    CHECK(campaign::affordable_pairs(m, 1000, 3) == 3);
    CHECK(campaign::affordable_pairs(m, 60, 3) == 2);
    CHECK(campaign::affordable_pairs(m, 30, 3) == 1);
    CHECK(campaign::affordable_pairs(m, 21, 3) == 0);
    CHECK(campaign::affordable_pairs(m, -5, 3) == 0);
    // Without a doctor there is no estimate: nothing is cut.
    CHECK(campaign::affordable_pairs(campaign::TrialCostModel{}, 0, 3) == 3);

    // The search may start a batch only when it and the reserve fit in the budget; 0 is no limit.
    campaign::SearchWallPlan p;
    p.next_batch_s = 40;
    p.verify_reserve_s = campaign::verification_wall_s(m, 1, 3);
    CHECK(p.fits(100, 100 + 40 + 66));
    CHECK_FALSE(p.fits(101, 100 + 40 + 66));
    CHECK(p.fits(1e9, 0));
}

TEST_CASE(
    "the memory estimate runs the candidate's patched build once it exists, the baseline build before") {
    TempDir tmp;
    auto contract = copy_fixture(tmp.path);
    // An estimate that depends on the build it runs from: the size of the kernel source in that sandbox
    // (fast_kernel changes the kernel, so its sandbox gives another number).
    std::ofstream(contract, std::ios::app) << R"(
[memory]
estimate_command = ["sh", "-c", 'printf "{\"estimated_peak_bytes\": %s}" $(wc -c < {source}/kernels/compute.c)']
)";
    campaign::Campaign::init(contract, tmp.path / "c");
    campaign::Campaign c(tmp.path / "c");
    auto baseline = c.contract().space.baseline();
    auto patched = baseline;
    patched.patches = {"fast_kernel"};
    CHECK_FALSE(c.memory_estimate(baseline)); // no doctor yet: no baseline build to run
    c.plan_batch("doctor", {{baseline, store::TrialKind::Doctor, "doctor", 0, {}}});
    auto base_est = c.memory_estimate(baseline);
    REQUIRE(base_est);
    CHECK(*base_est == doctest::Approx(double(fs::file_size(tmp.path / "toyload/kernels/compute.c"))));
    CHECK(c.memory_estimate(patched) == base_est); // its patch set is not built yet
    c.plan_batch("search", {{patched, store::TrialKind::Search, "test", 0, {}}});
    auto patched_est = c.memory_estimate(patched);
    REQUIRE(patched_est);
    CHECK(*patched_est > *base_est); // "iterations / 2" is longer than "iterations"
    CHECK(c.memory_estimate(baseline) == base_est);
}
