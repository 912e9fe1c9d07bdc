// The SPANK plugin on the real local cluster (scripts/test loads build/spank/infrarsi.so with its spool at
// $INFRARSI_SLURM_DIR/spank-spool): the option on srun and sbatch, record mode's per-node records, trial
// mode's environment and tune mode's request. Tests that need other plugstack arguments start their own
// cluster: tests/integration/2N-spank-*.sh.
#include "cluster.hpp"
#include "node/allocation_record.hpp"
#include "node/topology.hpp"
#include "slurm/client.hpp"
#include "util/process.hpp"

#include <chrono>
#include <cstdlib>
#include <doctest/doctest.h>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace infrarsi;
using infrarsi::testing::require_cluster;
using infrarsi::testing::scratch_dir;
using infrarsi::testing::wait_for;
namespace fs = std::filesystem;

namespace {

fs::path spool() {
    const char* dir = std::getenv("INFRARSI_SLURM_DIR");
    REQUIRE_MESSAGE(dir != nullptr, "INFRARSI_SLURM_DIR is not set: run through scripts/test");
    return fs::path(dir) / "spank-spool";
}

ProcessResult run(const std::vector<std::string>& argv, std::map<std::string, std::string> env = {}) {
    ProcessOptions o;
    o.timeout = std::chrono::seconds(120);
    o.env = std::move(env);
    return run_process(argv, o);
}

std::vector<node::AllocationRecord> records_of(const std::string& job_id) {
    std::vector<node::AllocationRecord> out;
    auto path = spool() / "allocations.jsonl";
    if (!fs::exists(path)) return out;
    auto all = node::read_records(path.string());
    for (auto& r : all.records)
        if (std::to_string(r.job_id) == job_id) out.push_back(r);
    return out;
}

// Waits until job_id has exactly n records in the spool (slurmstepd writes them; see wait_for).
std::vector<node::AllocationRecord> wait_for_records(const std::string& job_id, size_t n) {
    std::vector<node::AllocationRecord> recs;
    wait_for(std::chrono::seconds(60),
             std::to_string(n) + " records of job " + job_id + " in " + spool().string(),
             [&](std::string& last) {
                 recs = records_of(job_id);
                 last = std::to_string(recs.size()) + " records";
                 return recs.size() == n;
             });
    return recs;
}

std::string first_line(const std::string& s) {
    return s.substr(0, s.find('\n'));
}

std::map<std::string, std::string> read_env_file(const fs::path& p) {
    std::map<std::string, std::string> env;
    std::ifstream in(p);
    std::string line;
    while (std::getline(in, line)) {
        auto eq = line.find('=');
        // Multi-line values (bash functions) continue on lines without a NAME= prefix: skip those.
        if (eq == std::string::npos || eq == 0) continue;
        env[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return env;
}

} // namespace

TEST_CASE("srun and sbatch --help list --infrarsi") {
    require_cluster();
    for (const char* cmd : {"srun", "sbatch"}) {
        auto r = run({cmd, "--help"});
        CHECK_MESSAGE(r.out.find("--infrarsi") != std::string::npos, cmd << " --help: " << r.out);
    }
}

TEST_CASE("a bad --infrarsi value is refused at submit time with the allowed values") {
    require_cluster();
    auto dir = scratch_dir("spank-bad");
    for (std::vector<std::string> argv : {std::vector<std::string>{"srun", "--infrarsi=fast", "true"},
                                          {"sbatch", "--infrarsi=fast", "--wrap", "true"}}) {
        auto r = run(argv);
        CHECK(r.exit_code != 0);
        CHECK_MESSAGE(r.err.find("record, trial, tune[:CONTRACT], off") != std::string::npos, r.err);
        CHECK(r.out.find("Submitted") == std::string::npos);
    }
}

TEST_CASE("record mode writes one record per node of a 2-node allocation, however many steps run") {
    require_cluster();
    // Two steps on both nodes: the second must not add records.
    auto r = run({"salloc", "-N2", "-n2", "--infrarsi", "bash", "-c",
                  "srun -N2 -n2 true && srun -N2 -n2 true && echo $SLURM_JOB_ID"});
    REQUIRE_MESSAGE(r.ok(), r.err);
    auto job = first_line(r.out.substr(r.out.find_first_of("0123456789")));
    auto recs = wait_for_records(job, 2);
    REQUIRE(recs.size() == 2);
    std::set<std::string> nodes;
    auto here = node::topology_from_live(); // the fake nodes are this host
    for (const auto& rec : recs) {
        nodes.insert(rec.node);
        CHECK(rec.mode == "record");
        CHECK(rec.topology.cores == here.cores);
        CHECK(rec.topology.pus == here.pus);
        CHECK(rec.topology.l1d_bytes > 0);
        CHECK(rec.topology.l2_bytes > 0);
        CHECK(rec.topology.l3_bytes > 0);
        CHECK(rec.topology.memory_bytes > 0);
        CHECK(rec.calibration.compute_gflops.samples.size() == 5);
        CHECK(rec.calibration.compute_gflops.median > 0);
        CHECK(rec.calibration.memory_gbs.median > 0);
        CHECK(rec.calibration.budget_ms == 300);
        CHECK(rec.record_ms > 0);
    }
    CHECK(nodes.size() == 2);
}

TEST_CASE("each node of an srun inside a batch job is recorded under its own name, whatever the job's "
          "SLURMD_NODENAME says") {
    require_cluster();
    auto dir = scratch_dir("spank-nodename");
    // The batch step sees the batch host's SLURMD_NODENAME, and srun carries it to every node of the step; a
    // user may also set it: root-side records must name the node slurmstepd serves.
    auto r = run({"sbatch", "--parsable", "--wait", "-N2", "--infrarsi", "-o", (dir / "out.txt").string(),
                  "--wrap", "SLURMD_NODENAME=forged srun -N2 -n2 true && srun -N2 -n2 hostname"});
    REQUIRE_MESSAGE(r.ok(), r.err);
    auto job = first_line(r.out);
    auto recs = wait_for_records(job, 2);
    REQUIRE(recs.size() == 2);
    // The allocation's nodes, as Slurm names them (the record of a finished job stays for MinJobAge).
    auto show = run({"scontrol", "-o", "show", "job", job});
    REQUIRE_MESSAGE(show.ok(), show.err);
    auto at = show.out.find(" NodeList=");
    REQUIRE(at != std::string::npos);
    auto list = show.out.substr(at + 10, show.out.find(' ', at + 1) - at - 10);
    std::set<std::string> allocated;
    std::istringstream hosts(run({"scontrol", "show", "hostnames", list}).out);
    for (std::string h; std::getline(hosts, h);)
        allocated.insert(h);
    std::set<std::string> recorded;
    for (const auto& rec : recs)
        recorded.insert(rec.node);
    CHECK(recorded == allocated);
}

TEST_CASE("--infrarsi=off writes no record") {
    require_cluster();
    auto r = run({"srun", "-N1", "--infrarsi=off", "bash", "-c", "echo $SLURM_JOB_ID"});
    REQUIRE_MESSAGE(r.ok(), r.err);
    CHECK(records_of(first_line(r.out)).empty());
}

TEST_CASE("trial mode gives each array index exactly its declared knobs plus INFRARSI_*") {
    require_cluster();
    auto dir = scratch_dir("spank-trial");
    // The orchestrator's current format: the tasks' knob arguments and sbatch options are the wrapper's and
    // sbatch's; the plugin sets the environment alone.
    nlohmann::json manifest = {
        {"format", "infrarsi-manifest/3"},
        {"campaign", "it-trial"},
        {"knobs", {{"OMP_NUM_THREADS", {"1", "2"}}, {"MICRO_BATCH", nullptr}, {"NEVER_SET", nullptr}}},
        {"tasks",
         {{{"index", 0},
           {"trial_id", "t0"},
           {"env", {{"OMP_NUM_THREADS", "1"}, {"MICRO_BATCH", "8"}}},
           {"args", {"--batch_size=8"}},
           {"sbatch_options", {"--cpus-per-task=1"}},
           {"result", (dir / "t0.json").string()}},
          {{"index", 1},
           {"trial_id", "t1"},
           {"env", {{"OMP_NUM_THREADS", "2"}}},
           {"result", (dir / "t1.json").string()}}}}};
    std::ofstream(dir / "manifest.json") << manifest.dump();
    std::map<std::string, std::string> env = {{"INFRARSI_MANIFEST", (dir / "manifest.json").string()}};
    // The same array once in record mode: what the trial adds is the difference of the two environments.
    for (const char* mode : {"record", "trial"}) {
        auto r = run({"sbatch", "--wait", "--array=0-1", std::string("--infrarsi=") + mode, "-o",
                      (dir / (std::string(mode) + "-%a.out")).string(), "--wrap", "env"},
                     env);
        REQUIRE_MESSAGE(r.ok(), mode << ": " << r.err);
    }
    std::map<int, std::map<std::string, std::string>> expected = {
        {0,
         {{"OMP_NUM_THREADS", "1"},
          {"MICRO_BATCH", "8"},
          {"INFRARSI_CAMPAIGN", "it-trial"},
          {"INFRARSI_TRIAL_ID", "t0"},
          {"INFRARSI_RESULT", (dir / "t0.json").string()}}},
        {1,
         {{"OMP_NUM_THREADS", "2"},
          {"INFRARSI_CAMPAIGN", "it-trial"},
          {"INFRARSI_TRIAL_ID", "t1"},
          {"INFRARSI_RESULT", (dir / "t1.json").string()}}}};
    for (int i : {0, 1}) {
        auto base = read_env_file(dir / ("record-" + std::to_string(i) + ".out"));
        auto trial = read_env_file(dir / ("trial-" + std::to_string(i) + ".out"));
        REQUIRE(!base.empty());
        std::map<std::string, std::string> added;
        for (const auto& [k, v] : trial)
            if (!base.contains(k)) added[k] = v;
        CHECK_MESSAGE(added == expected[i], "index " << i);
    }
}

TEST_CASE("a trial manifest nested a million levels deep ends its job at once with the plugin's error, "
          "root slurmstepd survives it") {
    // Issue 29: the parse was fine, but dump() and the copy of the deep "version" recursed and slurmstepd got
    // SIGSEGV inside the plugin: the batch job stayed RUNNING with no process until scancel.
    require_cluster();
    auto dir = scratch_dir("spank-deep");
    std::ofstream(dir / "manifest.json")
        << R"({"version": )" << std::string(1'000'000, '[') << std::string(1'000'000, ']') << "}";
    const auto out = dir / "job.out";
    auto r =
        run({"sbatch", "--parsable", "--infrarsi=trial", "-o", out.string(), "--wrap", "echo WORKLOAD-RAN"},
            {{"INFRARSI_MANIFEST", (dir / "manifest.json").string()}});
    REQUIRE_MESSAGE(r.ok(), r.err);
    const std::string job = first_line(r.out);
    slurm::JobRecord rec;
    const bool ended = wait_for(std::chrono::seconds(60), "job " + job + " to end", [&](std::string& last) {
        for (const auto& x : slurm::Client().query({job}))
            if (x.job_id == job) {
                rec = x;
                last = x.raw_state;
                return slurm::is_finished(x.state);
            }
        return false;
    });
    if (!ended) run({"scancel", job});
    REQUIRE(ended);
    CHECK_MESSAGE(rec.state == slurm::JobState::Failed, rec.raw_state);
    CHECK(rec.exit_code == 97); // the plugin's "trial not run" exit (spank/stepd.cpp)
    std::string text;
    wait_for(std::chrono::seconds(30), "the plugin's error in " + out.string(), [&](std::string& last) {
        std::ifstream in(out);
        text.assign(std::istreambuf_iterator<char>(in), {});
        last = text;
        return text.find("nested more than 64 levels") != std::string::npos;
    });
    CHECK(text.find("infrarsi: trial not run:") != std::string::npos);
    CHECK(text.find("WORKLOAD-RAN") == std::string::npos);
    // srun -N2: both stepds crashed and srun hung. Now each node's task ends with the plugin's error, and
    // srun returns (the bound here is far above the second or two it takes).
    ProcessOptions o;
    o.timeout = std::chrono::seconds(60);
    o.env = {{"INFRARSI_MANIFEST", (dir / "manifest.json").string()}};
    const auto two = run_process({"srun", "-N2", "-n2", "--infrarsi=trial", "echo", "WORKLOAD-RAN"}, o);
    INFO("srun: " << two.out << two.err);
    CHECK_FALSE(two.timed_out);
    CHECK(two.exit_code != 0);
    CHECK(two.out.find("WORKLOAD-RAN") == std::string::npos);
    CHECK((two.out + two.err).find("nested more than 64 levels") != std::string::npos);
    // The nodes' slurmd and the next steps are fine: a plain two-node step runs.
    const auto after = run({"srun", "-N2", "-n2", "--infrarsi=off", "echo", "AFTER"});
    CHECK_MESSAGE(after.ok(), after.err);
    CHECK(after.out.find("AFTER") != std::string::npos);
    fs::remove_all(dir);
}

TEST_CASE("tune mode hands a request with script and contract to the spool and runs the job as baseline") {
    require_cluster();
    auto dir = scratch_dir("spank-tune");
    std::ofstream(dir / "train.sbatch") << "#!/bin/bash\necho baseline-ran\n";
    // No contract beside the script yet: refused at submission, saying where it looked.
    auto refused = run({"sbatch", "--infrarsi=tune", (dir / "train.sbatch").string()});
    CHECK(refused.exit_code != 0);
    CHECK_MESSAGE(refused.err.find((dir / "train.contract.toml").string()) != std::string::npos, refused.err);

    std::ofstream(dir / "train.contract.toml") << "# contract\n";
    ProcessOptions o;
    o.cwd = dir.string();
    o.timeout = std::chrono::seconds(120);
    auto r = run_process({"sbatch", "--parsable", "--wait", "--infrarsi=tune", "-o",
                          (dir / "out.txt").string(), "train.sbatch"},
                         o);
    REQUIRE_MESSAGE(r.ok(), r.err);
    auto job = first_line(r.out);
    std::ifstream out(dir / "out.txt");
    std::string text((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
    CHECK(text.find("baseline-ran") != std::string::npos);
    auto req_path = spool() / "tune" / (job + ".json");
    REQUIRE(
        wait_for(std::chrono::seconds(60), "the tune request " + req_path.string(), [&](std::string& last) {
            last = fs::exists(req_path) ? "" : "no file";
            return fs::exists(req_path);
        }));
    // The request names the job's paths: root's, 0640, in the job's group, so other users cannot read it
    // (issue 29: it was 0644).
    struct stat st {};
    REQUIRE(::lstat(req_path.c_str(), &st) == 0);
    CHECK(S_ISREG(st.st_mode));
    CHECK((st.st_mode & 07777) == 0640);
    CHECK(st.st_uid == 0);
    CHECK(st.st_gid == ::getegid());
    auto req = nlohmann::json::parse(std::ifstream(req_path));
    CHECK(req["format"] == "infrarsi-tune-request/1");
    CHECK(std::to_string(req["job_id"].get<uint32_t>()) == job);
    CHECK(req["script"] == (dir / "train.sbatch").string());
    CHECK(req["contract"] == (dir / "train.contract.toml").string());
    CHECK(req["submit_dir"] == dir.string());
    auto recs = wait_for_records(job, 1);
    REQUIRE(recs.size() == 1);
    CHECK(recs.at(0).mode == "tune");
}
