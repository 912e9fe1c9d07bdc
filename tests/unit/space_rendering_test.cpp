#include "space/rendering.hpp"

#include <doctest/doctest.h>

using namespace infrarsi;

namespace {
// One knob of each delivery: a thread count in the environment, a recompute mode as an argument, CPUs as an
// sbatch option, and a choice whose "default" leaves its variable out.
space::Space three_ways() {
    space::Space s;
    space::Knob threads;
    threads.name = "threads";
    threads.min = 1;
    threads.max = 8;
    threads.env = "OMP_NUM_THREADS";
    threads.baseline = 1LL;
    space::Knob recompute;
    recompute.name = "recompute";
    recompute.kind = space::KnobKind::Choice;
    recompute.choices = {"none", "full"};
    recompute.delivery = space::Delivery::Arg;
    recompute.arg = {"--recompute={}"};
    recompute.baseline = std::string("none");
    space::Knob cpus;
    cpus.name = "cpus";
    cpus.min = 1;
    cpus.max = 4;
    cpus.delivery = space::Delivery::SbatchOption;
    cpus.sbatch_option = "--cpus-per-task";
    cpus.baseline = 1LL;
    space::Knob algo;
    algo.name = "algo";
    algo.kind = space::KnobKind::Choice;
    algo.choices = {"default", "ring"};
    algo.env = "NCCL_ALGO";
    algo.unset_choice = "default";
    algo.baseline = std::string("default");
    s.knobs = {threads, recompute, cpus, algo};
    return s;
}
} // namespace

TEST_CASE("a candidate renders into its job's environment, arguments and sbatch options, the knobs' "
          "variables over the workload's") {
    const auto s = three_ways();
    auto c = s.baseline();
    c.knobs["threads"] = 4LL;
    c.knobs["recompute"] = std::string("full");
    c.knobs["cpus"] = 2LL;
    const auto job = space::render(s, c, {{"OMP_NUM_THREADS", "16"}, {"DATA", "/d"}});
    CHECK(job.environment == std::map<std::string, std::string>{{"DATA", "/d"}, {"OMP_NUM_THREADS", "4"}});
    CHECK(job.arguments == std::vector<std::string>{"--recompute=full"});
    CHECK(job.sbatch_options == std::vector<std::string>{"--cpus-per-task=2"});
    // Without a workload's environment: the knobs' own, as the report's audit and `apply` show them; a
    // choice at its unset value sets nothing.
    const auto own = space::render(s, c);
    CHECK(own.environment == s.environment(c));
    CHECK(own.arguments == s.arguments(c));
    CHECK(own.sbatch_options == s.sbatch_options(c));
    CHECK_FALSE(own.environment.count("NCCL_ALGO"));
    c.knobs["algo"] = std::string("ring");
    CHECK(space::render(s, c).environment.at("NCCL_ALGO") == "ring");
}
