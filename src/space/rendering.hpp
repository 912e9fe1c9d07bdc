#pragma once
// What a job gets of a candidate, in the three forms a knob reaches it (docs/contract.md, [knobs.NAME]): the
// environment, the job's arguments and sbatch options. The one rendering of a candidate: planning (each
// task's manifest entry and array), the contract's memory-estimate command, the report's audit and `apply`
// take a candidate's settings from `render`, so what is estimated, run, reported and applied is the same.
#include "space/space.hpp"

#include <map>
#include <string>
#include <vector>

namespace infrarsi::space {

struct Rendering {
    // `base` (the contract's workload env, where the job gets it) with the environment knobs' variables over
    // it
    std::map<std::string, std::string> environment;
    std::vector<std::string> arguments;      // the argument knobs' argv elements, in declaration order
    std::vector<std::string> sbatch_options; // "--cpus-per-task=2", in declaration order
};

Rendering render(const Space& space, const Candidate& c, std::map<std::string, std::string> base = {});

} // namespace infrarsi::space
