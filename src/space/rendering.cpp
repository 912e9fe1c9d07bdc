#include "space/rendering.hpp"

namespace infrarsi::space {

Rendering render(const Space& space, const Candidate& c, std::map<std::string, std::string> base) {
    Rendering r;
    r.environment = std::move(base);
    for (auto& [k, v] : space.environment(c))
        r.environment[k] = std::move(v);
    r.arguments = space.arguments(c);
    r.sbatch_options = space.sbatch_options(c);
    return r;
}

} // namespace infrarsi::space
