#include "node_identity.hpp"

#include <doctest/doctest.h>

using infrarsi::spank::node_from_cgroup;

TEST_CASE("the node is read from slurmstepd's cgroup v1 path when several slurmd share a host") {
    CHECK(node_from_cgroup("12:pids:/\n4:memory:/slurm_n3/uid_0/job_5000002/step_0\n1:name=systemd:/\n") ==
          "n3");
}

TEST_CASE("the node is read from slurmstepd's cgroup v2 scope when several slurmd share a host") {
    CHECK(node_from_cgroup("0::/system.slice/gpu-017_slurmstepd.scope/job_12/step_batch/user/task_0\n") ==
          "gpu-017");
}

TEST_CASE("a cgroup path that names no node gives none, so the host name is used") {
    CHECK_FALSE(
        node_from_cgroup("4:memory:/slurm/uid_0/job_3/step_0\n0::/system.slice/slurmstepd.scope/job_3\n"));
    CHECK_FALSE(node_from_cgroup(""));
    CHECK_FALSE(node_from_cgroup("garbage without colons\n4:memory\n"));
    CHECK_FALSE(node_from_cgroup("4:memory:/user.slice/slurm_n1\n")); // only the first component decides
}
