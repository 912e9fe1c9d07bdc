// The Slurm client against the real local cluster: arrays, OOM, time limits, the plugin's option.
#include "cluster.hpp"
#include "slurm/client.hpp"
#include "util/error.hpp"
#include "util/process.hpp"

#include <doctest/doctest.h>
#include <fstream>
#include <set>

using namespace infrarsi;
using namespace infrarsi::slurm;
using infrarsi::testing::require_cluster;
using infrarsi::testing::scratch_dir;

namespace {
std::string write_script(const std::filesystem::path& dir, const std::string& name, const std::string& body) {
    auto path = dir / name;
    std::ofstream(path) << "#!/bin/bash\n" << body << "\n";
    std::filesystem::permissions(path, std::filesystem::perms::owner_all, std::filesystem::perm_options::add);
    return path.string();
}
} // namespace

TEST_CASE("a 4-task job array spreads over nodes and every task is seen completed") {
    require_cluster();
    auto dir = scratch_dir("array");
    Client slurm;
    SubmitRequest q;
    q.script = write_script(dir, "array.sh", "echo task=$SLURM_ARRAY_TASK_ID node=$SLURMD_NODENAME; sleep 2");
    q.array = "0-3";
    q.mem = "300M";
    q.time_limit = "5";
    q.output = (dir / "%A_%a.out").string();
    q.job_name = "it-array";
    // Two CPUs per task fill a node, so four tasks need more than one node.
    q.cpus_per_task = 2;
    auto id = slurm.submit(q);
    auto rs = slurm.wait(id, std::chrono::seconds(120));
    REQUIRE(rs.size() == 4);
    std::set<std::string> nodes;
    std::set<int> tasks;
    for (const auto& r : rs) {
        CHECK_MESSAGE(classify(r) == JobEnd::Completed, r.job_id << " " << r.raw_state);
        CHECK(r.array_job_id == id);
        tasks.insert(r.array_task_id.value_or(-1));
        nodes.insert(r.node_list);
    }
    CHECK(tasks == std::set<int>{0, 1, 2, 3});
    CHECK(nodes.size() >= 2);
}

TEST_CASE("a job that allocates beyond its --mem is classified out of memory") {
    require_cluster();
    auto dir = scratch_dir("oom");
    Client slurm;
    SubmitRequest q;
    // Touch 600 MiB under a 150 MB limit: the cgroup OOM killer ends it.
    q.script = write_script(dir, "oom.sh", "head -c 600M /dev/zero | tail > /dev/null; echo survived");
    q.mem = "150M";
    q.time_limit = "5";
    q.output = (dir / "oom.out").string();
    auto id = slurm.submit(q);
    auto rs = slurm.wait(id, std::chrono::seconds(120));
    REQUIRE(rs.size() == 1);
    CHECK_MESSAGE(classify(rs[0]) == JobEnd::OutOfMemory,
                  rs[0].raw_state << " exit " << rs[0].exit_code << ":" << rs[0].exit_signal);
}

TEST_CASE("a job that exits non-zero is failed with its exit code") {
    require_cluster();
    auto dir = scratch_dir("fail");
    Client slurm;
    SubmitRequest q;
    q.script = write_script(dir, "fail.sh", "exit 7");
    q.mem = "100M";
    q.output = (dir / "fail.out").string();
    auto rs = slurm.wait(slurm.submit(q), std::chrono::seconds(60));
    REQUIRE(rs.size() == 1);
    CHECK(classify(rs[0]) == JobEnd::Failed);
    CHECK(rs[0].exit_code == 7);
}

TEST_CASE("a cancelled job is classified cancelled") {
    require_cluster();
    auto dir = scratch_dir("cancel");
    Client slurm;
    SubmitRequest q;
    q.script = write_script(dir, "sleep.sh", "sleep 120");
    q.mem = "100M";
    q.output = (dir / "c.out").string();
    auto id = slurm.submit(q);
    slurm.cancel(id);
    auto rs = slurm.wait(id, std::chrono::seconds(60));
    REQUIRE(rs.size() == 1);
    CHECK(classify(rs[0]) == JobEnd::Cancelled);
}

TEST_CASE("a job past its time limit is classified timeout") {
    require_cluster();
    auto dir = scratch_dir("timeout");
    Client slurm;
    SubmitRequest q;
    q.script = write_script(dir, "long.sh", "sleep 600");
    q.mem = "100M";
    q.time_limit = "1"; // Slurm's smallest limit: one minute
    q.output = (dir / "t.out").string();
    auto id = slurm.submit(q);
    auto rs = slurm.wait(id, std::chrono::seconds(240));
    REQUIRE(rs.size() == 1);
    CHECK(classify(rs[0]) == JobEnd::Timeout);
}

TEST_CASE("sbatch refusing a job is an error carrying Slurm's reason") {
    require_cluster();
    auto dir = scratch_dir("refused");
    Client slurm;
    SubmitRequest q;
    q.script = write_script(dir, "true.sh", "true");
    q.mem = "999999M";
    CHECK_THROWS_WITH_AS(slurm.submit(q), doctest::Contains("Memory specification"), Error);
}

TEST_CASE("the cluster answers and the plugin's --infrarsi option is listed by srun and sbatch") {
    require_cluster();
    Client slurm;
    std::string why;
    CHECK_MESSAGE(slurm.reachable(&why), why);
    for (const char* cmd : {"srun", "sbatch"}) {
        auto r = run_process({cmd, "--help"});
        CHECK_MESSAGE(r.out.find("--infrarsi") != std::string::npos, cmd << " --help lacks --infrarsi");
    }
}
