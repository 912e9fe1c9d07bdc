#pragma once
// The one place where campaign state changes, as flux-core's job manager has one
// (src/modules/job-manager/event.c: event_job_update applies an event to a job's state; the rest asks). The
// campaign's stage, each batch's state and each verification's state: their names and the transitions each
// allows, written down once. The store applies every change through `transition` / `advance` here and refuses
// any other with an Error that says what, where and which moves are allowed; the rest of the campaign asks
// for a state and asks the store to change it, never writes one by name.
//
//   stage         initialized -> doctor -> search -> verification -> done
//                 forward only; a step may be skipped (a campaign whose doctor found no baseline); asking for
//                 a stage already reached changes nothing (every run resumes by asking again)
//   batch         planned -> submitted -> finished
//                 planned -> finished: nothing of it could run (every sandbox failed to build)
//   verification  starts running, or decided at once: done (its patch set not equivalent), skipped (no
//                 budget left for it)
//                 running -> running (another block) | recheck (promoted once, to reproduce) | done
//                 recheck -> recheck | done
//                 done, skipped: final (their record may still grow: the ablation of a promoted bundle)
#include "util/enum_names.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace infrarsi::store {

// Where a campaign is, in order; it only moves forward. initialized: locked, nothing run; doctor: measuring
// the baseline; search: the baseline is stored, trials are proposed; verification: the search is over, A/B
// pairs run; done: verification is over (or skipped), the report is final.
enum class Stage { Initialized, Doctor, Search, Verification, Done };
inline constexpr util::EnumNames<Stage, 5> stage_names{{{{Stage::Initialized, "initialized"},
                                                         {Stage::Doctor, "doctor"},
                                                         {Stage::Search, "search"},
                                                         {Stage::Verification, "verification"},
                                                         {Stage::Done, "done"}}}};
inline std::string to_string(Stage s) {
    return std::string(stage_names.name(s));
}

// planned: in the store, not yet in the scheduler; submitted: its arrays' job ids recorded; finished: every
// trial of it recorded (or cancelled).
enum class BatchState { Planned, Submitted, Finished };
inline constexpr util::EnumNames<BatchState, 3> batch_state_names{{{{BatchState::Planned, "planned"},
                                                                    {BatchState::Submitted, "submitted"},
                                                                    {BatchState::Finished, "finished"}}}};
inline std::string to_string(BatchState s) {
    return std::string(batch_state_names.name(s));
}

// running: the first stage's blocks of A/B pairs; recheck: promoted once, reproduced in a fresh allocation
// before it is final; done: decided (promoted or not); skipped: never run (no budget left for it).
enum class VerificationState { Running, Recheck, Done, Skipped };
inline constexpr util::EnumNames<VerificationState, 4> verification_state_names{
    {{{VerificationState::Running, "running"},
      {VerificationState::Recheck, "recheck"},
      {VerificationState::Done, "done"},
      {VerificationState::Skipped, "skipped"}}}};
inline std::string to_string(VerificationState s) {
    return std::string(verification_state_names.name(s));
}

// Names read back from the store; an unknown one is refused naming the known ones. `where`: the database.
Stage parse_stage(const std::string& name, const std::string& where);
BatchState parse_batch_state(const std::string& name, const std::string& where);
VerificationState parse_verification_state(const std::string& name, const std::string& where);

// Whether the state may move from `from` to `to`. A state that stays where it is (a verification whose record
// grows) is no move and is allowed; a batch's is not (each of its changes is done once).
bool allowed(Stage from, Stage to);
bool allowed(BatchState from, BatchState to);
bool allowed(VerificationState from, VerificationState to);
// The states a verification may be recorded in when it is added.
bool allowed_start(VerificationState s);

// The stage after asking to move to `to`: `to` if it is ahead, nothing if the campaign is there or past it.
std::optional<Stage> advance(Stage from, Stage to);
// The state after the change, or an Error naming the batch (or verification), the refused move and the
// allowed ones.
BatchState transition(std::int64_t batch_id, BatchState from, BatchState to);
VerificationState transition(std::int64_t verification_id, VerificationState from, VerificationState to);
VerificationState start(VerificationState s); // a new verification's state, or an Error

} // namespace infrarsi::store
