#pragma once
// Failure edges: what one OOM or one timeout says about the untried candidates that share its cause, so that
// a search pays for each such edge once (issue 32). The statistical models spread a failure over everything
// the failed configuration had (the censored memory model over every feature of an OOM, the runtime GP over
// its neighbourhood), so that a second try of the cause with other threads or patches still looks like an
// even bet. These rules blame the knob that caused the failure instead:
//
// OOM edge. An OOM at x makes every candidate y near-certain to run out of memory when y needs at least x's
// memory on every declared coordinate (memory_key: the micro-batch and larger, no stronger recompute, no
// memory saver more) and differs from x otherwise only in knobs and patches of unknown memory effect
// (memory_unknown) whose change is not known to save memory. A change is known to save memory when
//   - measured: two successful trials with the same declared coordinates differ in it and the one with the
//     change peaked at least `saving_fraction` lower;
//   - contradicted: a trial that fitted would have been on x's edge (each unknown change it made from x is
//     then taken to save memory, and an edge that a trial with no such change contradicts is dropped);
//   - estimated: y's analytic peak estimate is below x's by more than `prior_margin` (with no estimate every
//     candidate has the same constant, which says nothing);
// and an ordered knob of unknown effect that an OOM had higher than a trial that fitted, although that trial
// needed at least the OOM's memory on the declared knobs (they do not explain the OOM), is learned to drive
// memory: y must have at least x's value of it (an undeclared sequence length is not presumed neutral).
// Threads and BLAS choices change no activation memory, and nothing claims they do: the edge crosses them.
//
// Timeout edge. A timeout with no step measured (none at all, or only a lower bound: step_time_censored)
// bounds the step time from below for what caused it: the encoded values it had that no trial that finished
// ever had (the reference BLAS among trials that all used OpenBLAS). Every candidate with all of those values
// reaches the time limit as surely; one whose cause cannot be told apart (every value it had also finished
// elsewhere) bounds only itself, as before. The neighbourhood keeps the runtime model's prediction.
#include "model/candidate.hpp"

#include <string>
#include <vector>

namespace infrarsi::model {

struct EdgeSettings {
    double near_certain = 0.97;    // P(failure) given to a candidate on an edge
    double saving_fraction = 0.05; // a measured peak this much lower is a memory saving
    double prior_margin = 0.02;    // an analytic estimate this much lower is a memory saving
    // Per memory_unknown coordinate: whether its values are ordered (a numeric knob); empty: none is.
    std::vector<char> unknown_ordered;
    // Names of the encoded features, for the notes (empty: the notes name candidates only).
    std::vector<std::string> feature_names;
};

struct FailureEdges {
    std::vector<double> oom;        // per candidate: P(OOM) from the OOM edges (0 when on none)
    std::vector<double> timeout;    // per candidate: P(timeout) from the timeout edges (0 when on none)
    std::vector<std::string> notes; // one line per edge that reaches an untried candidate, for the audit
};

FailureEdges failure_edges(const std::vector<Candidate>& candidates,
                           const std::vector<TrialObservation>& trials, const EdgeSettings& settings = {});

} // namespace infrarsi::model
