// The job cgroup's peak (trial/memory_peak.hpp): found from /proc/self/cgroup under v1 and v2, read from a
// cgroup directory laid out as the kernel does.
#include "trial/memory_peak.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace infrarsi::trial;

TEST_CASE("the job cgroup is the job_<id> ancestor of the wrapper's, v1's memory controller first") {
    const fs::path root = "/sys/fs/cgroup";
    // cgroup v1 as Slurm's cgroup/v1 plugin makes it (captured on the local cluster).
    const std::string v1 = "9:name=systemd:/\n8:pids:/\n4:memory:/slurm_n1/uid_0/job_12/step_batch/task_0\n"
                           "1:cpu:/\n0::/\n";
    CHECK(job_cgroup_dir(v1, root) == root / "memory/slurm_n1/uid_0/job_12");
    // cgroup v2 as Slurm's cgroup/v2 plugin makes it.
    const std::string v2 = "0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0\n";
    CHECK(job_cgroup_dir(v2, root) == root / "system.slice/slurmstepd.scope/job_7");
    // Co-mounted controllers.
    CHECK(job_cgroup_dir("5:cpuacct,memory:/slurm/uid_1000/job_3/step_extern\n", root) ==
          root / "memory/slurm/uid_1000/job_3");
    // Not a Slurm job, or a name that only looks like one.
    CHECK(!job_cgroup_dir("4:memory:/process_api/82d037a7\n0::/\n", root));
    CHECK(!job_cgroup_dir("4:memory:/user/job_x/job_\n", root));
    CHECK(!job_cgroup_dir("", root));
    CHECK(!job_cgroup_dir("garbage without colons\n4:memory:relative/job_1\n", root));
}

TEST_CASE("the peak is read from memory.max_usage_in_bytes (v1) or memory.peak (v2), junk is none") {
    const fs::path dir = fs::temp_directory_path() / ("infrarsi-cg-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    CHECK(!cgroup_peak_bytes(dir));
    std::ofstream(dir / "memory.peak") << "629145600\n";
    CHECK(cgroup_peak_bytes(dir) == 629145600.0);
    std::ofstream(dir / "memory.max_usage_in_bytes") << "734003200\n";
    CHECK(cgroup_peak_bytes(dir) == 734003200.0);
    std::ofstream(dir / "memory.max_usage_in_bytes") << "lots\n";
    CHECK(cgroup_peak_bytes(dir) == 629145600.0); // the junk one is skipped
    std::ofstream(dir / "memory.peak") << "-1\n";
    CHECK(!cgroup_peak_bytes(dir));
    fs::remove_all(dir);
}

TEST_CASE("a memory cgroup's peak and OOM kills are read from v1's and v2's files") {
    const fs::path fixtures = fs::path(INFRARSI_FIXTURES) / "cgroup";
    // v1, captured: a process killed at a 64 MiB limit, and one that stayed under 256 MiB. v2, in the
    // kernel's format (fixtures/cgroup/README.md): memory.events' `max` (the limit hit, 35 times) is not a
    // kill; `oom_kill` is.
    struct Case {
        const char* dir;
        int version;
        double peak_bytes;
        int oom_kills;
    };
    for (const auto& c : {Case{"v1-oom", 1, 67108864.0, 1}, Case{"v1-ok", 1, 108232704.0, 0},
                          Case{"v2-oom", 2, 67108864.0, 1}, Case{"v2-ok", 2, 108232704.0, 0}}) {
        CAPTURE(c.dir);
        const auto m = read_cgroup_memory(fixtures / c.dir);
        CHECK(m.version == c.version);
        CHECK(m.peak_bytes == c.peak_bytes);
        CHECK(m.oom_kills == c.oom_kills);
    }
    CHECK(cgroup_peak_bytes(fixtures / "v2-ok") == 108232704.0);
    // Neither layout: nothing.
    const auto none = read_cgroup_memory(fixtures);
    CHECK(none.version == 0);
    CHECK(!none.peak_bytes);
    CHECK(!none.oom_kills);
}
