#pragma once
// The activation memory one layer of a module needs, as the module itself states it (README.md, "Memory
// model"). Each module's footprint function sits next to the code that allocates those buffers, so that a
// change to the module changes its estimate in the same file; memory.cpp only composes them.

namespace minigpt {

// Bytes, for one micro-batch.
struct Footprint {
    double stored = 0;    // cached by forward until backward (what the cache's bytes() reports)
    double transient = 0; // the most that the layer's temporaries take at once, in forward or in backward
    // Of the two above, the module's dominant buffers, which the estimate's breakdown names on their own
    // (attention: the T x T scores; MoE: the capacity-padded expert slots).
    double dominant_stored = 0, dominant_transient = 0;
};

} // namespace minigpt
