// Campaign pieces that need no cluster: init's locks and refusals, the trial wrapper's result file, the
// batch manifest's knob declarations and the wall-time reserve for verification.
#include "campaign/campaign.hpp"
#include "contract/contract.hpp"
#include "trial/exec.hpp"
#include "trial/manifest.hpp"
#include "trial/rendezvous.hpp"
#include "trial/result.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"

#include "test_support.hpp"

#include "verify/sequential.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <arpa/inet.h>
#include <filesystem>
#include <fstream>
#include <netinet/in.h>
#include <sys/socket.h>
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

TEST_CASE("init locks the inputs, a changed protected file stops every later command") {
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

TEST_CASE("a campaign opened read-only (status, report, apply) after its inputs changed: readable, with what "
          "changed, and the contract as it ran") {
    TempDir tmp;
    auto contract = copy_fixture(tmp.path);
    campaign::Campaign::init(contract, tmp.path / "c");
    const auto name = campaign::Campaign(tmp.path / "c").contract().name;
    // The user applies a result: edits the contract (here: breaks it) and a protected file.
    std::ofstream(contract, std::ios::app) << "\nnot toml at all [[[\n";
    std::ofstream(tmp.path / "toyload" / "loss.c", std::ios::app) << "/* edited */\n";
    CHECK_THROWS_AS(campaign::Campaign(tmp.path / "c"), Error); // a stage would run from changed inputs
    campaign::Campaign c(tmp.path / "c", campaign::Campaign::Open::read_only);
    CHECK(c.contract().name == name); // the text locked at init, not the file as it is now
    const auto& changed = c.changed_inputs();
    // The contract, the tree (loss.c is in it) and the protected file, in the store's order.
    REQUIRE(changed.size() == 3);
    auto has = [&](const std::string& prefix) {
        return std::any_of(changed.begin(), changed.end(),
                           [&](const auto& x) { return x.rfind(prefix, 0) == 0; });
    };
    CHECK(has("contract "));
    CHECK(has("tree "));
    CHECK(has("protected loss.c"));
    // Unchanged inputs: nothing to say.
    TempDir other;
    campaign::Campaign::init(copy_fixture(other.path), other.path / "c");
    CHECK(campaign::Campaign(other.path / "c", campaign::Campaign::Open::read_only).changed_inputs().empty());
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

TEST_CASE(
    "the trial wrapper runs the script with its fixed arguments, then the knobs' arguments, each one argv "
    "element that no shell reads") {
    TempDir tmp;
    std::ofstream(tmp.path / "job.sbatch") << "#!/bin/bash\nfor a in \"$@\"; do echo \"arg[$a]\"; done\n";
    trial::Manifest m;
    m.campaign = "c1";
    trial::ManifestTask t;
    t.trial_id = "1";
    t.command = {"bash", (tmp.path / "job.sbatch").string(), "--fixed", "x"};
    t.args = {"--batch_size=8", "--name=a b", "--x=$(touch " + (tmp.path / "pwned").string() + ")", ""};
    t.result = (tmp.path / "0/result.json").string();
    t.log = (tmp.path / "0/log.txt").string();
    m.tasks = {t};
    trial::write_manifest(tmp.path / "manifest.json", m);
    CHECK(trial::execute(tmp.path / "manifest.json", 0) == 0);
    std::ifstream log(tmp.path / "0/log.txt");
    CHECK(std::string(std::istreambuf_iterator<char>(log), {}) ==
          "arg[--fixed]\narg[x]\narg[--batch_size=8]\narg[--name=a b]\narg[--x=$(touch " +
              (tmp.path / "pwned").string() + ")]\narg[]\n");
    CHECK_FALSE(fs::exists(tmp.path / "pwned"));
}

TEST_CASE(
    "each trial gets a free rendezvous port (MASTER_PORT, and torchrun's PET_MASTER_PORT), never one in "
    "use, a port the contract sets is kept") {
    // A port in use, as another trial's launcher holds its store's.
    const int held = trial::free_tcp_port();
    UniqueFd listener(::socket(AF_INET, SOCK_STREAM, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(held));
    REQUIRE(::bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(listener.get(), 1) == 0);
    for (int i = 0; i < 50; ++i)
        CHECK(trial::free_tcp_port() != held);

    TempDir tmp;
    trial::Manifest m;
    m.campaign = "c1";
    m.knobs = {{"MASTER_PORT", std::vector<std::string>{"23456"}}};
    for (std::uint32_t i = 0; i < 2; ++i) {
        trial::ManifestTask t;
        t.index = i;
        t.trial_id = std::to_string(i + 1);
        t.command = {"bash", "-c", "echo \"$MASTER_PORT ${PET_MASTER_PORT:-unset}\""};
        if (i == 1) t.env = {{"MASTER_PORT", "23456"}};
        t.result = (tmp.path / std::to_string(i) / "result.json").string();
        t.log = (tmp.path / std::to_string(i) / "log.txt").string();
        m.tasks.push_back(t);
    }
    trial::write_manifest(tmp.path / "manifest.json", m);
    ::setenv("MASTER_PORT", "29500", 1); // the submitting shell's: every trial would share it
    for (int i : {0, 1})
        CHECK(trial::execute(tmp.path / "manifest.json", i) == 0);
    ::unsetenv("MASTER_PORT");
    auto read_log = [&](int i) {
        std::ifstream log(tmp.path / std::to_string(i) / "log.txt");
        std::string first, second;
        log >> first >> second;
        return std::pair{first, second};
    };
    const auto [port, pet] = read_log(0);
    CHECK(port != "29500");
    CHECK(pet == port);
    CHECK(std::stoi(port) > 0);
    CHECK(read_log(1) == std::pair<std::string, std::string>{"23456", "unset"});
}

TEST_CASE("a batch's trials with different sbatch-option knobs are planned as one array per option set, in "
          "the manifest and the store") {
    TempDir tmp;
    auto contract = copy_fixture(tmp.path);
    {
        std::ifstream in(contract);
        std::string text{std::istreambuf_iterator<char>(in), {}};
        const std::string knob = "env = \"TOY_RECOMPUTE\"";
        text.replace(text.find(knob), knob.size(), "arg = \"--recompute={}\"");
        text.replace(text.find("[constants]"), 11,
                     "[knobs.cpus]\nkind = \"integer\"\nmin = 1\nmax = 2\nsbatch_option = "
                     "\"--cpus-per-task\"\nbaseline = 1\n\n[constants]");
        std::ofstream(contract) << text;
    }
    campaign::Campaign::init(contract, tmp.path / "c");
    campaign::Campaign c(tmp.path / "c");
    std::vector<campaign::Task> tasks;
    for (long long cpus : {2LL, 1LL, 2LL}) {
        campaign::Task t;
        t.candidate = c.contract().space.baseline();
        t.candidate.knobs["cpus"] = cpus;
        t.candidate.knobs["recompute"] = std::string(cpus == 1 ? "full" : "none");
        tasks.push_back(t);
    }
    const auto batch = c.batches().plan(store::BatchKind::Search, tasks).id;
    const auto arrays = c.store().arrays(batch);
    REQUIRE(arrays.size() == 2);
    CHECK(arrays[0].options == std::vector<std::string>{"--cpus-per-task=1"});
    CHECK((arrays[0].first_index == 0 && arrays[0].tasks == 1));
    CHECK(arrays[1].options == std::vector<std::string>{"--cpus-per-task=2"});
    CHECK((arrays[1].first_index == 1 && arrays[1].tasks == 2));
    const auto m = trial::read_manifest(c.store().batch(batch).manifest);
    REQUIRE(m.tasks.size() == 3);
    for (const auto& t : m.tasks) {
        CAPTURE(t.index);
        const bool one = t.index == 0;
        CHECK(t.sbatch_options == std::vector<std::string>{one ? "--cpus-per-task=1" : "--cpus-per-task=2"});
        CHECK(t.args == std::vector<std::string>{one ? "--recompute=full" : "--recompute=none"});
        CHECK(t.env.count("TOY_RECOMPUTE") == 0);
    }
    // A verification batch keeps its order (the A/B pairs are interleaved): one array per run of equal sets.
    const auto verify = c.batches().plan(store::BatchKind::Verify, tasks).id;
    CHECK(c.store().arrays(verify).size() == 3);
}

TEST_CASE(
    "a workload with no build step runs its tree as is, with a candidate's patches applied in a sandbox "
    "copy") {
    TempDir tmp;
    auto contract = copy_fixture(tmp.path);
    {
        std::ifstream in(contract);
        std::string text{std::istreambuf_iterator<char>(in), {}};
        const auto b = text.find("build = [[");
        text.erase(b, text.find('\n', b) - b + 1);
        const std::string cmd = "command = [\"{build}/toy\"]";
        text.replace(text.find(cmd), cmd.size(), "command = [\"cat\", \"{source}/kernels/compute.c\"]");
        std::ofstream(contract) << text;
    }
    campaign::Campaign::init(contract, tmp.path / "c");
    campaign::Campaign c(tmp.path / "c");
    CHECK(c.contract().workload.build.empty());
    campaign::Task base, patched;
    base.candidate = c.contract().space.baseline();
    patched.candidate = base.candidate;
    patched.candidate.patches = {"fast_kernel"};
    const auto batch = c.batches().plan(store::BatchKind::Search, {base, patched}).id;
    for (const auto& t : c.store().trials_of_batch(batch))
        CHECK(t.array_index >= 0); // nothing to build, nothing failed
    const auto m = trial::read_manifest(c.store().batch(batch).manifest);
    REQUIRE(m.tasks.size() == 2);
    auto text_of = [](const std::string& path) {
        std::ifstream in(path);
        return std::string{std::istreambuf_iterator<char>(in), {}};
    };
    int with_patch = 0;
    for (const auto& t : m.tasks) {
        REQUIRE(t.command.size() == 2);
        CHECK(t.command[1].rfind((tmp.path / "c").string(), 0) == 0); // a sandbox copy, not the tree
        with_patch += text_of(t.command[1]).find("iterations / 2") != std::string::npos;
    }
    CHECK(with_patch == 1);
    CHECK(text_of((tmp.path / "toyload" / "kernels" / "compute.c").string()).find("iterations / 2") ==
          std::string::npos);
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

TEST_CASE(
    "the pairs the reserve plans: the first look expected to clear 1 + min_speedup at the doctor's noise, "
    "and the re-check's block") {
    verify::Design d; // min_speedup 3%, alpha 1% over 2 candidates, 16 pairs at most
    // A large gain at 3% noise clears at the first block: 2 pairs and the re-check's 2.
    CHECK(d.planned_pairs(0.03, 1.5) == 4);
    // A 1.10x needs more looks, and more again at twice the noise.
    const int small = d.planned_pairs(0.03, 1.10);
    CHECK(small > 4);
    CHECK(small < d.max_pairs);
    CHECK(small % verify::Design::kBlock == 0);
    CHECK(d.planned_pairs(0.06, 1.10) > small);
    // Nothing to plan for a candidate the rule cannot promote: the cap.
    CHECK(d.planned_pairs(0.03, 1.02) == d.max_pairs);
    CHECK(d.planned_pairs(0.5, 1.10) == d.max_pairs);
    CHECK(d.planned_pairs(std::nan(""), 1.10) == d.max_pairs);
}

TEST_CASE("the verification reserve: baseline trials plus the observed overhead, two per A/B pair, the "
          "equivalence checks") {
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
    // The equivalence checks count too, 2 trials each.
    CHECK(campaign::verification_wall_s(m, 2, 3, 1) == doctest::Approx((2 * 3 * 2 + 2) * 11.0));
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
    c.batches().plan(store::BatchKind::Doctor, {{baseline, store::TrialKind::Doctor, "doctor", 0, {}, {}}});
    auto base_est = c.memory_estimate(baseline);
    REQUIRE(base_est);
    CHECK(*base_est == doctest::Approx(double(fs::file_size(tmp.path / "toyload/kernels/compute.c"))));
    CHECK(c.memory_estimate(patched) == base_est); // its patch set is not built yet
    c.batches().plan(store::BatchKind::Search, {{patched, store::TrialKind::Search, "test", 0, {}, {}}});
    auto patched_est = c.memory_estimate(patched);
    REQUIRE(patched_est);
    CHECK(*patched_est > *base_est); // "iterations / 2" is longer than "iterations"
    CHECK(c.memory_estimate(baseline) == base_est);
}

TEST_CASE("a search batch none of whose candidates built runs no control, and one with a built candidate "
          "does") {
    TempDir tmp;
    campaign::Campaign::init(copy_fixture(tmp.path), tmp.path / "c");
    campaign::Campaign c(tmp.path / "c");
    const auto base = c.contract().space.baseline();
    auto broken = base;
    broken.patches = {"broken_build"};
    const campaign::Task control{base, store::TrialKind::SearchControl, "control", 0, {}, {}};
    const campaign::Task bad{broken, store::TrialKind::Search, "test", 0, {}, {}};

    const auto none = c.batches().plan(store::BatchKind::Search, {control, bad}).id;
    const auto rows = c.store().trials_of_batch(none);
    REQUIRE(rows.size() == 1);
    CHECK(rows[0].kind == store::TrialKind::Search);
    CHECK(rows[0].outcome == trial::Outcome::BuildFailure);
    CHECK(c.store().batches(store::BatchState::Finished).back().id == none); // nothing to submit

    // The test can fail: beside a candidate that builds, the control is planned to run.
    auto fast = base;
    fast.patches = {"fast_kernel"};
    const auto some = c.batches()
                          .plan(store::BatchKind::Search,
                                {control, bad, {fast, store::TrialKind::Search, "test", 0, {}, {}}})
                          .id;
    int controls = 0;
    for (const auto& t : c.store().trials_of_batch(some))
        controls += t.kind == store::TrialKind::SearchControl && t.array_index >= 0;
    CHECK(controls == 1);
}
