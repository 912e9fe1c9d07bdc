#pragma once
// The campaign store: everything a campaign knows, in one SQLite database that only the orchestrator writes
// (trial jobs write result files that it ingests). Schema versioned with PRAGMA user_version and forward
// migrations; a newer database than this build understands is refused.
#include "store/agent_call_detail.hpp"
#include "store/bank_facts.hpp"
#include "store/baseline.hpp"
#include "store/campaign_state.hpp"
#include "store/equivalence_check.hpp"
#include "store/sqlite.hpp"
#include "store/verification_detail.hpp"
#include "trial/outcome.hpp"
#include "trial/proof.hpp"
#include "trial/record.hpp"
#include "util/enum_names.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::store {

// What a trial is for. equivalence_*: a patch set's equivalence check, the baseline and the patch set at the
// baseline's knobs and one fresh seed (campaign/equivalence_stage.cpp); ablation: a promoted bundle and the
// bundle without one of its changes, in rounds (campaign/ablation_stage.cpp); search_control: the baseline
// run in a search batch beside its candidates, under the same conditions, whose step time theirs are compared
// with (campaign/search_stage.cpp).
enum class TrialKind {
    Doctor,
    Search,
    VerifyBaseline,
    VerifyCandidate,
    EquivalenceBaseline,
    EquivalenceCandidate,
    Ablation,
    SearchControl
};
inline constexpr util::EnumNames<TrialKind, 8> trial_kind_names{
    {{{TrialKind::Doctor, "doctor"},
      {TrialKind::Search, "search"},
      {TrialKind::VerifyBaseline, "verify_baseline"},
      {TrialKind::VerifyCandidate, "verify_candidate"},
      {TrialKind::EquivalenceBaseline, "equivalence_baseline"},
      {TrialKind::EquivalenceCandidate, "equivalence_candidate"},
      {TrialKind::Ablation, "ablation"},
      {TrialKind::SearchControl, "search_control"}}}};
inline std::string to_string(TrialKind k) {
    return std::string(trial_kind_names.name(k));
}
TrialKind parse_trial_kind(const std::string& s); // throws an Error naming the kinds

// planned: in the DB, not yet in Slurm; submitted: job id known; finished: outcome recorded.
enum class TrialState { Planned, Submitted, Finished };
inline constexpr util::EnumNames<TrialState, 3> trial_state_names{{{{TrialState::Planned, "planned"},
                                                                    {TrialState::Submitted, "submitted"},
                                                                    {TrialState::Finished, "finished"}}}};
inline std::string to_string(TrialState s) {
    return std::string(trial_state_names.name(s));
}

struct Lock {
    std::string kind; // contract, tree, protected
    std::string path;
    std::string hash;
};

struct PatchRow {
    std::string id;
    bool accepted = false;
    std::string reason;  // why refused
    nlohmann::json info; // description, tags, touched paths
};

// One call of the campaign's agent (campaign/agent_stage.cpp): when, why, how it ended, what it offered and
// what it cost. `detail` holds the refusals, the knob priors, the call's isolation and its stderr tail (the
// agent's words): store/agent_call_detail.hpp.
struct AgentCallRow {
    std::int64_t id = 0; // the call's number, from 1
    double started = 0, finished = 0;
    std::string trigger;  // after_doctor, after_batch, space_exhausted
    std::string outcome;  // agent::CallOutcome's name, invalid_output, or running
    std::string reason;   // for people, when not ok
    int offered = 0;      // patches in its answer
    int accepted = 0;     // of those, accepted for the search
    long long tokens = 0; // as the agent reported
    double cost = 0;
    std::string model;
    AgentCallDetail detail;
};

// What a batch is for: the stage that plans a kind finishes it (campaign/: each stage registers its
// finisher). doctor_remeasure: the doctor's re-measurement, one job at a time, of a baseline too noisy at
// first; submitted: the job the user submitted with --infrarsi=tune (one doctor trial, the job's own id);
// equivalence: a patch set's equivalence check; ablation: a promoted bundle's changes removed in turn.
enum class BatchKind { Doctor, DoctorRemeasure, Submitted, Search, Verify, Equivalence, Ablation };
inline constexpr util::EnumNames<BatchKind, 7> batch_kind_names{
    {{{BatchKind::Doctor, "doctor"},
      {BatchKind::DoctorRemeasure, "doctor_remeasure"},
      {BatchKind::Submitted, "submitted"},
      {BatchKind::Search, "search"},
      {BatchKind::Verify, "verify"},
      {BatchKind::Equivalence, "equivalence"},
      {BatchKind::Ablation, "ablation"}}}};
inline std::string to_string(BatchKind k) {
    return std::string(batch_kind_names.name(k));
}

struct BatchRow {
    std::int64_t id = 0;
    BatchKind kind = BatchKind::Search;
    BatchState state = BatchState::Planned; // changed by set_batch_submitted / set_batch_finished only
    std::string job_id;   // once submitted: its arrays' job ids, comma-separated (for people; see arrays())
    std::string manifest; // path
    double created = 0, submitted = 0, finished = 0;
    std::string placement;       // JSON {"SEQ": [node, ...]}: the nodes each array was placed on; empty: none
    std::string manifest_sha256; // the manifest's digest when the orchestrator wrote it; empty: none recorded
};

// The campaign's run (one row, schema 7): when it started (its first batch submitted) and ended, why it is
// paused (the doctor's noise) or cancelled, why its noise was accepted (`run --accept-noise`), and, in a
// campaign started by `sbatch --infrarsi=tune`, what became of the user's job: "adopted" (the doctor's first
// run; its output file), "not adopted: <why>" or "not adopted after it ran: <why>"; none before the doctor.
// Schema 8: what the doctor found of the nodes and the job's pace, which later trials are held to: the nodes
// whose GPUs are slow (trials are kept off them; none found: none) and the baseline's median step pace over
// its runs (trial/proof.hpp; none before the doctor has measured it). They were meta 'slow_nodes' and
// 'step_pace'. Schema 9: the startup the doctor measured, which the timing check allows later trials (none:
// not measured, the check is off; it was meta 'startup'), and what the experience bank gave the campaign
// and took from it (store/bank_facts.hpp; they were meta 'bank_seeds', 'agent_bank_pairs' and
// 'bank_ingested'): none before the bank was asked (a campaign without a bank never asks it). Schema 10:
// the experience-bank file the seeds came from and the bank's match of this hardware (the JSON document
// bank::ExperienceBank::match_hardware returns; one that cannot be read back reads as none); they were meta
// 'bank' and 'bank_hardware'.
struct CampaignRun {
    std::optional<double> started, ended; // store::now_seconds()
    std::optional<std::string> paused, cancelled, noise_accepted;
    std::optional<std::string> submitted_job, submitted_job_output;
    std::optional<std::vector<std::string>> slow_nodes;
    std::optional<double> step_pace;
    std::optional<int> step_pace_runs;
    std::optional<trial::Startup> startup;
    std::optional<std::vector<BankSeed>> bank_seeds; // looked up once: an empty list is an answer
    std::optional<AgentBankPairs> agent_bank_pairs;  // only where the contract has an agent
    std::optional<BankIngested> bank_ingested;
    std::optional<std::string> bank_path;        // set once the seeds are kept
    std::optional<nlohmann::json> bank_hardware; // {"entries": N, "seen": ..., "similarity": ..., ...}
};

// One array job of a batch: the trials with array indices first_index .. first_index + tasks - 1, which share
// their sbatch options (a batch is one array unless its trials' sbatch-option knobs differ). Recorded when
// the batch is planned; job_id once submitted.
struct ArrayRow {
    int seq = 0; // 0, 1, ...: the order they run in
    int first_index = 0;
    int tasks = 0;
    std::vector<std::string> options; // the knobs' sbatch options ("--cpus-per-task=2")
    std::string job_id;               // empty until submitted
};

struct TrialRow {
    std::int64_t id = 0;
    std::int64_t batch_id = 0;
    int array_index = 0;
    TrialKind kind = TrialKind::Search;
    std::string candidate_key;
    nlohmann::json candidate; // space::Candidate::to_json()
    std::string sandbox;      // build hash
    TrialState state = TrialState::Planned;
    std::optional<trial::Outcome> outcome;               // set once finished
    trial::Violation violation = trial::Violation::None; // how a contract violation broke the contract
    std::string detail;                                  // a line saying why, for people
    std::string job_id;
    std::string node;
    std::optional<double> step_time_s; // steady-state median
    std::optional<double> step_time_lo, step_time_hi;
    std::optional<double> cold_step_s;
    std::optional<double> tokens_per_s, mfu, loss, peak_memory_bytes;
    double cost_node_s = 0;
    bool counted = true; // false: re-queued after a node failure, not counted against the budget
    int attempt = 0;
    std::string reason; // the proposer's reason
    std::string result_path;
    std::optional<std::int64_t> verification_id;
    trial::Measurements measurements; // per-step samples, phases, evidence (store/measurements.hpp)
};

// The trial's row takes what its assessment found (trial/record.hpp); the notes are for the log.
void record_assessment(TrialRow& t, const trial::TrialRecord& r);

// The outcome's name ("ok", "oom", ...), empty while the trial has none.
inline std::string outcome_name(const TrialRow& t) {
    return t.outcome ? trial::to_string(*t.outcome) : "";
}

// Which trials to read: every field that is set must match; empty kinds: any kind.
struct TrialQuery {
    // Every member has a default initializer, so a designated initializer may name any subset.
    std::vector<TrialKind> kinds{};
    std::optional<TrialState> state{};
    std::optional<trial::Outcome> outcome{};
    std::optional<bool> counted{};
    std::optional<std::int64_t> batch_id{};
    std::optional<std::int64_t> verification_id{};
    std::optional<std::string> candidate_key{};
};

struct VerificationRow {
    std::int64_t id = 0;
    std::string candidate_key;
    nlohmann::json candidate;
    std::int64_t batch_id = 0;
    VerificationState state = VerificationState::Running; // a change is checked on update_verification
    bool promoted = false;
    std::optional<double> speedup, lo, hi;
    VerificationDetail detail;
};

// A search candidate to run again: its trial said nothing of it (a node failure, a cancellation), so it is
// not counted and goes back to the front of the search. The queue is first in, first out.
struct RequeueEntry {
    std::int64_t id = 0;      // its place in the queue
    nlohmann::json candidate; // space::Candidate::to_json()
    std::string reason;       // the proposer's reason, with why it runs again
    int attempt = 0;          // the trial's attempt + 1
};

class CampaignStore {
  public:
    static constexpr int schema_version = 10;
    explicit CampaignStore(const std::string& path);

    Database& db() { return db_; }

    // The blackboard of settings about the campaign (its id, contract, scheduler, ...). The stage, the
    // re-queue (schema 6), the run's state (schema 7), the equivalence checks (schema 8), the doctor's
    // startup and the bank's seeds, pairs and ingestion (schema 9), the bank's file and hardware match
    // (schema 10) are not kept here: they have typed tables or columns.
    void set_meta(const std::string& key, const std::string& value);
    std::optional<std::string> meta(const std::string& key);

    CampaignRun campaign_run();
    void mark_started(double t);                            // the first time only
    void mark_ended(double t);                              // the first time only
    void set_paused(const std::optional<std::string>& why); // nullopt: no longer paused
    void set_cancelled(const std::string& why);             // the first reason stays
    void set_noise_accepted(const std::string& why);
    void set_submitted_job(const std::string& decision,
                           const std::optional<std::string>& output = std::nullopt);
    void set_slow_nodes(const std::vector<std::string>& nodes);
    void set_step_pace(double median, int runs);
    void set_startup(const trial::Startup& s);
    void set_bank_seeds(const std::vector<BankSeed>& seeds);
    void set_agent_bank_pairs(const AgentBankPairs& pairs);
    void set_bank_ingested(BankIngested what);
    void set_bank_path(const std::string& path);
    void set_bank_hardware(const nlohmann::json& match);

    // The campaign's equivalence checks (store/equivalence_check.hpp), in the order they were recorded.
    std::int64_t add_equivalence_check(const EquivalenceCheck& c); // returns its id
    void update_equivalence_check(const EquivalenceCheck& c);      // every field, by id
    std::vector<EquivalenceCheck> equivalence_checks();

    Stage stage();
    // Moves the campaign to `s` if it is behind it; never back (campaign_state.hpp). Returns whether it
    // moved.
    bool advance_stage(Stage s);

    void add_lock(const Lock& l);
    std::vector<Lock> locks();

    void put_patch(const PatchRow& p);
    std::vector<PatchRow> patches();

    std::int64_t add_batch(BatchKind kind, const std::string& manifest);
    void add_array(std::int64_t batch_id, const ArrayRow& a);
    std::vector<ArrayRow> arrays(std::int64_t batch_id); // in seq order
    // The array's job id, and its trials': submitted, job id JOB_INDEX.
    void set_array_submitted(std::int64_t batch_id, int seq, const std::string& job_id);
    // Once every array of the batch has its job id. A batch's state changes only here and in
    // set_batch_finished, each a transition of campaign_state.hpp; an illegal one throws.
    void set_batch_submitted(std::int64_t id);
    void set_batch_manifest(std::int64_t id, const std::string& manifest, const std::string& sha256);
    void set_batch_placement(std::int64_t id, const std::string& placement);
    void set_batch_finished(std::int64_t id);
    std::vector<BatchRow> batches(std::optional<BatchState> state = std::nullopt); // in id order
    BatchRow batch(std::int64_t id);

    void requeue(const RequeueEntry& e);   // appends; its id is given by the store
    std::vector<RequeueEntry> requeued();  // in queue order
    void dequeue(std::int64_t requeue_id); // taken into a batch, or dropped

    std::int64_t add_trial(const TrialRow& t);
    void update_trial(const TrialRow& t);                   // every mutable field, by id
    std::vector<TrialRow> trials(const TrialQuery& q = {}); // in id order
    std::vector<TrialRow> trials_of_batch(std::int64_t batch_id);

    void put_baseline(const Baseline& b); // the doctor's result
    std::optional<Baseline> baseline();   // the latest, once the doctor has finished

    std::int64_t add_verification(const VerificationRow& v);
    // Every mutable field, by id; its state through campaign_state.hpp's transition (an illegal one throws).
    void update_verification(const VerificationRow& v);
    std::vector<VerificationRow> verifications();

    void add_promotion(std::int64_t verification_id, const std::string& candidate_key, double speedup);
    std::vector<std::pair<std::int64_t, std::string>> promotions(); // verification id, candidate key

    std::int64_t add_agent_call(const AgentCallRow& c); // returns its id (the call's number)
    void update_agent_call(const AgentCallRow& c);
    std::vector<AgentCallRow> agent_calls(); // in call order

    // Appends to the campaign's event log (also shown by status).
    void log(const std::string& message);
    std::vector<std::pair<double, std::string>> events(int last = 20);

  private:
    void migrate();
    Database db_;
};

double now_seconds(); // wall-clock epoch seconds

} // namespace infrarsi::store
