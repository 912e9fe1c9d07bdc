#pragma once
// A verification's record, typed: what the verification stage (campaign/verification_stage.cpp) planned and
// decided, the ablation of a promoted bundle (campaign/ablation_stage.cpp), read by the report and the bank's
// findings. The store keeps it as one JSON document per verification (the verifications table's `detail`
// column), versioned by its "version" key; version 1 is the layout every earlier build wrote without the key,
// so a campaign written before the record was typed reads back unchanged. The report's JSON names its fields
// as this document does (docs/orchestrator.md), through `to_json` below.
#include "store/equivalence_check.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::store {

inline constexpr int kVerificationDetailVersion = 1;

// One A/B pair as planned: its place in the stage, its order, where and at which seed it runs.
struct PlannedPair {
    int pair = 0;      // from 1 within the stage
    std::string order; // "AB" or "BA"
    std::vector<std::string> nodes;
    std::optional<int> block; // from 1 within the stage (none in a campaign of an older orchestrator)
    std::optional<long long> seed;
};

// One A/B pair as it ran. (Its place, order and nodes: none in a record of a build before the pairs were
// ordered and placed; each field is kept as the record has it, so a report of it says what it said.)
struct MeasuredPair {
    std::optional<int> pair;
    std::optional<std::string> order;
    std::optional<std::int64_t> baseline_trial, candidate_trial;
    double baseline_step_s = 0, candidate_step_s = 0;
    std::optional<std::string> baseline_node, candidate_node;
    std::optional<bool> same_node;
    std::optional<double> log_ratio;               // both runs complete (verify::robust_pair_log_ratio)
    std::optional<std::vector<std::string>> nodes; // as planned
    std::optional<int> block;
    std::optional<long long> seed;
};

// One look of the sequence (verify/sequential.hpp): the interval over the pairs so far and what came next.
struct Look {
    std::string stage; // "first" or "recheck"
    int pairs = 0, counted = 0, set_aside = 0;
    double estimate = 0, lo = 0, hi = 0; // NaN, -inf, +inf where not known
    std::string next;
};

// MFU with the campaign's one denominator (verify::compare_mfu).
struct MfuRecord {
    double peak_flops = 0;
    std::string peak_flops_source;
    bool peak_flops_by_job = false;
    double model_flops_per_step = 0;
    double baseline_step_s = 0, candidate_step_s = 0;
    std::optional<double> baseline, candidate; // none: not known (`unknown` says why)
    std::optional<std::string> unknown;
};

// What one stage (the first, or the re-check in a fresh allocation) planned: its blocks, one batch each.
struct VerificationStage {
    std::vector<std::int64_t> blocks;
    std::optional<std::uint64_t> order_seed; // the first block's
    std::vector<std::uint64_t> order_seeds;
    std::vector<PlannedPair> plan;
    std::optional<std::string> next; // verify::Next's name
    // The spot check (campaign/equivalence_stage.cpp): one pair's candidate run against the knobs without the
    // patches, recorded as an equivalence check is.
    std::optional<SpotCheck> spot_check;
};

// The re-check's own: its stage and its own look over the fresh allocation's pairs.
struct Recheck : VerificationStage {
    bool skipped = false;              // no room in the budget: not promoted
    std::optional<std::int64_t> batch; // its last block's batch
    std::optional<std::vector<MeasuredPair>> pairs;
    std::optional<double> speedup;
    std::optional<std::pair<double, double>> ci;
    struct AllPairs {
        double speedup = 0, lo = 0, hi = 0;
        int pairs = 0;
    };
    std::optional<AllPairs> all_pairs;
    std::optional<std::vector<std::string>> reasons, evidence;
    std::optional<int> nodes;
};

// A change of a promoted bundle, as its ablation removes it.
struct AblationChange {
    std::string kind; // "knob", "patch", or "knobs" (knobs a constraint ties, removed together)
    std::string name;
    std::optional<std::string> value, baseline;    // a knob's
    std::optional<std::vector<std::string>> names; // "knobs": each knob's name
};

struct AblationPair {
    std::int64_t bundle_trial = 0, without_trial = 0;
    double bundle_step_s = 0, without_step_s = 0;
};

struct AblationComponent {
    AblationChange change;
    std::string name;                   // for people
    std::optional<std::string> without; // the candidate key of the bundle without it
    std::string state;                  // running, measured, required, unmeasured
    std::optional<double> effect, lo, hi;
    std::optional<bool> carries;
    std::optional<std::string> measured_by, why;
    std::optional<std::vector<AblationPair>> pairs;
};

struct AblationSkip {
    AblationChange change;
    std::string name, why;
};

struct Ablation {
    std::string state; // single, running, done, skipped
    std::optional<std::string> note;
    std::vector<AblationComponent> components;
    std::vector<AblationSkip> skipped;
    std::optional<int> rounds;
    std::optional<std::string> bundle; // the candidate key
    std::optional<std::int64_t> batch_id;
};

struct VerificationDetail {
    std::optional<std::int64_t> search_trial; // the search trial that made it a candidate
    // Its patch set's equivalence check (campaign/equivalence_stage.cpp), as it stood when the verification
    // began (written as the report shows it: no id).
    std::optional<EquivalenceCheck> equivalence;
    bool not_equivalent = false; // refused as not the same math (the equivalence check or a spot check)
    std::vector<std::string> reasons, evidence;
    std::optional<double> wall_left_s, trial_s; // skipped for the wall-time budget
    std::optional<int> max_pairs;
    std::optional<double> alpha, min_speedup;
    VerificationStage first; // the first stage (kept at the document's top level)
    std::optional<Recheck> recheck;
    std::vector<Look> sequence;
    std::optional<MfuRecord> mfu;
    std::vector<MeasuredPair> pairs; // the judged stage's pairs (the first stage's)
    std::optional<int> pairs_counted;
    std::optional<double> order_effect, mde;
    std::optional<bool> reproduced;
    std::optional<Ablation> ablation;

    // The first stage, and the re-check's where it has one.
    std::vector<VerificationStage*> stages() {
        std::vector<VerificationStage*> out{&first};
        if (recheck) out.push_back(&*recheck);
        return out;
    }
    std::vector<const VerificationStage*> stages() const {
        std::vector<const VerificationStage*> out{&first};
        if (recheck) out.push_back(&*recheck);
        return out;
    }
};

nlohmann::json to_json(const VerificationDetail& d);
nlohmann::json to_json(const PlannedPair& p);
nlohmann::json to_json(const MeasuredPair& p);
nlohmann::json to_json(const Look& l);
nlohmann::json to_json(const Recheck& r);
nlohmann::json to_json(const MfuRecord& m);
nlohmann::json to_json(const std::vector<Look>& looks);
nlohmann::json to_json(const std::vector<MeasuredPair>& pairs);
nlohmann::json to_json(const Ablation& a);
nlohmann::json to_json(const AblationComponent& c);
// Throws an Error for a document of a newer version than this build writes.
VerificationDetail verification_detail_from_json(const nlohmann::json& j);

} // namespace infrarsi::store
