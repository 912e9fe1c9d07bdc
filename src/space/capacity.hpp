#pragma once
// Capacity rules: how a candidate's capacity-dependent settings move when the memory limit changes. A
// setting verified under one limit is carried to another as a rule relative to memory, not as a raw value
// (the experience bank's seeds use it when there is no memory estimate; see campaign/experience.hpp).
#include "space/space.hpp"

#include <optional>
#include <string>

namespace infrarsi::space {

// The capacity rule without a memory estimate. Capacity knobs are the micro-batch, recompute and gradient
// accumulation knobs of space::memory_role (recognised by name, as the model proposer does). Each
// micro-batch setting is multiplied by `scale` (memory here / memory where it was verified) and rounded down
// to its domain, never below its smallest value; when even that is more than the scaled setting, recompute
// moves one step stronger. Gradient accumulation is then moved to
// satisfy the space's constraints (a fixed global batch). Every other knob and the patches are kept.
// nullopt when no feasible candidate results.
struct CapacityRule {
    Candidate candidate;
    std::string change; // "micro_batch 8 -> 4, grad_accum 2 -> 4"; empty when nothing changed
};
std::optional<CapacityRule> scale_capacity(const Space& space, const Candidate& from, double scale);

} // namespace infrarsi::space
