#pragma once
// What a knob does to peak memory, recognised from its name and domain (the naming convention of
// docs/contract.md): the micro-batch grows activations, recompute trades time for activation memory,
// gradient accumulation keeps the global batch without memory of its own. The model proposer's dominance
// rule and the capacity rules (space/capacity.hpp) both rely on it.
#include "space/space.hpp"

namespace infrarsi::space {

enum class MemoryRole {
    Other,        // no known direction
    MicroBatch,   // numeric, named *micro_batch* or mbs: more is more memory
    Recompute,    // bool, or a choice among none/selective/full, named *recompute*: more is less memory
    Accumulation, // named *grad_accum* or *gradient_accumulation*: no memory of its own
};

MemoryRole memory_role(const Knob& k);

// Recompute strength of a Recompute knob's value: none/false 0, selective 1, full/true 2.
int recompute_strength(const Value& v);

} // namespace infrarsi::space
