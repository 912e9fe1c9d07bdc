#pragma once
// One equivalence check of a patch set apart from knobs (campaign/equivalence_stage.cpp), a row of the store's
// equivalence_checks table (schema 8; before, a record of the JSON array in meta 'equivalence'). A check
// that failed a verification's spot check is recorded here too, as a failed check (its pair, no batch).
// Every field but the patches, the state and the extra keys is optional: a record says what its check did,
// and one an older orchestrator wrote says less. to_json writes the record as the array held it (the
// report's and the agent's view); from_json reads one (the migration's and a judgement's fields).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::store {

struct EquivalenceCheck {
    std::int64_t id = 0;                      // the row's id: the checks in the order they were recorded
    std::optional<std::int64_t> batch_id;     // the check's batch; none for a failed spot check
    std::vector<std::string> patches;         // the patch set (sorted, as the candidate keeps it)
    std::optional<std::string> candidate;     // the candidate, described
    std::optional<std::string> candidate_key; // none in a record of an older orchestrator (its patch set)
    std::string state;                        // running, passed, failed, incomplete, retry
    std::optional<int> attempt; // 1, 2, ...: the check's runs, moved nearer the baseline's knobs
    std::optional<std::string> knobs, knobs_key;   // the knobs it ran at (described, key)
    std::optional<nlohmann::json> knobs_candidate; // those knobs, space::Candidate::to_json()
    std::optional<bool> knobs_moved;       // not the candidate's own knobs (they do not fit without it)
    std::optional<std::string> knobs_note; // why moved
    std::optional<long long> seed;
    std::optional<bool> seed_fresh;
    std::optional<std::string> seed_note;
    std::optional<double> tolerance;
    std::optional<std::string> tolerance_key; // equivalence_tolerance or loss_tolerance
    std::optional<bool> math_changing;
    std::optional<std::int64_t> baseline_trial, candidate_trial;
    std::optional<double> max_relative;           // infinite: "inf" in JSON
    std::optional<int> compared;                  // steps compared
    std::optional<nlohmann::json> values, beyond; // [{step, baseline, candidate, relative}]
    std::optional<std::string> reason;
    std::optional<bool> out_of_memory;               // a run of it ran out of memory
    std::optional<int> pair;                         // a spot check's pair (1, 2, ...)
    nlohmann::json other = nlohmann::json::object(); // keys of an older record this build does not know
};

nlohmann::json to_json(const EquivalenceCheck& c);
// The keys of `j` this build knows into their fields, the rest into `other`; no id.
EquivalenceCheck equivalence_check_from_json(const nlohmann::json& j);
// `j`'s keys over `c`'s fields (a judgement's state, reason, values...); `c` keeps its id.
void update(EquivalenceCheck& c, const nlohmann::json& j);

// The spot check of a verification stage (campaign/equivalence_stage.cpp, in VerificationStage): one A/B pair's
// candidate run against the candidate's knobs without its patches at that pair's seed. Its record is an
// equivalence check's: its pair and seed, the knobs it moved to where the check had to, and once judged the
// verdict (state, reason, tolerance, the trials and values compared); not its patches (the verification's
// candidate's), and no state before it is judged. One that fails is recorded as a failed EquivalenceCheck.
struct SpotCheck : EquivalenceCheck {};

// The record as the verification's detail holds it: no "patches" key, none for "state" until judged.
nlohmann::json to_json(const SpotCheck& s);
SpotCheck spot_check_from_json(const nlohmann::json& j);

} // namespace infrarsi::store
