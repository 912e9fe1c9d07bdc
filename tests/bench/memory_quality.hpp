#pragma once
// The censored memory model's own quality on an environment, as a campaign would use it: fitted on the
// outcomes of a few trials (peaks of the runs, OOMs censored at the limit), judged on every other
// configuration's fresh run. Coverage: how often a held-out measured peak lies in the model's central 90%
// predictive interval (target >= 0.85). Brier score: mean (P(OOM) - [it OOMed])^2 over the held-out runs
// that ran or OOMed (0 is perfect; always answering 0.5 scores 0.25).
#include "environment.hpp"

namespace infrarsi::bench {

struct MemoryQuality {
    double coverage = 0;     // NaN without held-out measured peaks
    double brier = 0;        // NaN without held-out runs that ran or OOMed
    int peaks = 0, runs = 0; // held-out points behind each figure, over all repetitions
};

// `train` trials (distinct configurations drawn at random, one run each), repeated `repetitions` times.
MemoryQuality memory_quality(const Environment& env, int train, int repetitions, std::uint64_t seed);

} // namespace infrarsi::bench
