#include "store/equivalence_check.hpp"

#include "store/record_json.hpp"

#include <cmath>
#include <limits>

namespace infrarsi::store {

using nlohmann::json;

namespace {

using internal::put;

// Takes `key` out of `j` into `v` when it is there.
template <class T> void take(json& j, const char* key, std::optional<T>& v) {
    if (auto it = j.find(key); it != j.end()) {
        v = it->get<T>();
        j.erase(it);
    }
}

void take_json(json& j, const char* key, std::optional<json>& v) {
    if (auto it = j.find(key); it != j.end()) {
        v = *it;
        j.erase(it);
    }
}

} // namespace

json to_json(const EquivalenceCheck& c) {
    json j = c.other.is_object() ? c.other : json::object();
    j["patches"] = c.patches;
    j["state"] = c.state;
    put(j, "batch_id", c.batch_id);
    put(j, "candidate", c.candidate);
    put(j, "candidate_key", c.candidate_key);
    put(j, "attempt", c.attempt);
    put(j, "knobs", c.knobs);
    put(j, "knobs_key", c.knobs_key);
    put(j, "knobs_candidate", c.knobs_candidate);
    put(j, "knobs_moved", c.knobs_moved);
    put(j, "knobs_note", c.knobs_note);
    put(j, "seed", c.seed);
    put(j, "seed_fresh", c.seed_fresh);
    put(j, "seed_note", c.seed_note);
    put(j, "tolerance", c.tolerance);
    put(j, "tolerance_key", c.tolerance_key);
    put(j, "math_changing", c.math_changing);
    put(j, "baseline_trial", c.baseline_trial);
    put(j, "candidate_trial", c.candidate_trial);
    if (c.max_relative)
        j["max_relative"] = std::isfinite(*c.max_relative) ? json(*c.max_relative) : json("inf");
    put(j, "compared", c.compared);
    put(j, "values", c.values);
    put(j, "beyond", c.beyond);
    put(j, "reason", c.reason);
    put(j, "out_of_memory", c.out_of_memory);
    put(j, "pair", c.pair);
    return j;
}

void update(EquivalenceCheck& c, const json& from) {
    json j = from;
    if (auto it = j.find("patches"); it != j.end()) {
        c.patches = it->get<std::vector<std::string>>();
        j.erase(it);
    }
    if (auto it = j.find("state"); it != j.end()) {
        c.state = it->get<std::string>();
        j.erase(it);
    }
    take(j, "batch_id", c.batch_id);
    take(j, "candidate", c.candidate);
    take(j, "candidate_key", c.candidate_key);
    take(j, "attempt", c.attempt);
    take(j, "knobs", c.knobs);
    take(j, "knobs_key", c.knobs_key);
    take_json(j, "knobs_candidate", c.knobs_candidate);
    take(j, "knobs_moved", c.knobs_moved);
    take(j, "knobs_note", c.knobs_note);
    take(j, "seed", c.seed);
    take(j, "seed_fresh", c.seed_fresh);
    take(j, "seed_note", c.seed_note);
    take(j, "tolerance", c.tolerance);
    take(j, "tolerance_key", c.tolerance_key);
    take(j, "math_changing", c.math_changing);
    take(j, "baseline_trial", c.baseline_trial);
    take(j, "candidate_trial", c.candidate_trial);
    if (auto it = j.find("max_relative"); it != j.end()) {
        c.max_relative = it->is_number() ? it->get<double>() : std::numeric_limits<double>::infinity();
        j.erase(it);
    }
    take(j, "compared", c.compared);
    take_json(j, "values", c.values);
    take_json(j, "beyond", c.beyond);
    take(j, "reason", c.reason);
    take(j, "out_of_memory", c.out_of_memory);
    take(j, "pair", c.pair);
    if (!c.other.is_object()) c.other = json::object();
    c.other.update(j);
}

EquivalenceCheck equivalence_check_from_json(const json& j) {
    EquivalenceCheck c;
    update(c, j);
    return c;
}

json to_json(const SpotCheck& s) {
    json j = to_json(static_cast<const EquivalenceCheck&>(s));
    if (s.patches.empty()) j.erase("patches");
    if (s.state.empty()) j.erase("state");
    return j;
}

SpotCheck spot_check_from_json(const json& j) {
    SpotCheck s;
    update(s, j);
    return s;
}

} // namespace infrarsi::store
