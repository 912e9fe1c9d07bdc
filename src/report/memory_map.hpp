#pragma once
// The memory model's view of a campaign for people: the censored peak-memory model (model/censored_memory_
// model.hpp) fitted on the campaign's trials as the search fits it (the measured peaks of trials that ran
// every step or were stopped early as slower, OOMs censored at the limit, the same prior), and its P(OOM)
// over the two knobs that move its prediction most, each cell the feasible candidate nearest the baseline
// with those two values; the trials placed on it by those values.
#include "campaign/campaign.hpp"

#include <nlohmann/json.hpp>

namespace infrarsi::report {

// {"knobs": [A, B], "a_values": [...], "b_values": [...], "cells": [{"a", "b", "p_oom", "candidate"}],
//  "trials": [{"id", "a", "b", "outcome"}], "limit_bytes", "prior": "analytic"|"constant", "fitted_on": N,
//  "fitted_by_kind": {"doctor": n, "search": m}}.
// B is absent when only one knob has more than one value; null when there is no memory limit or no knob.
nlohmann::json memory_map(campaign::Campaign& c, std::size_t max_values = 16);

} // namespace infrarsi::report
