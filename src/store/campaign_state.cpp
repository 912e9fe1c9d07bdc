#include "store/campaign_state.hpp"

#include "util/error.hpp"

#include <array>
#include <utility>

namespace infrarsi::store {

namespace {
// The transitions, one table per machine (campaign_state.hpp draws them).
constexpr std::array<std::pair<BatchState, BatchState>, 3> batch_moves{{
    {BatchState::Planned, BatchState::Submitted},
    {BatchState::Planned, BatchState::Finished},
    {BatchState::Submitted, BatchState::Finished},
}};
constexpr std::array<std::pair<VerificationState, VerificationState>, 5> verification_moves{{
    {VerificationState::Running, VerificationState::Recheck},
    {VerificationState::Running, VerificationState::Done},
    {VerificationState::Recheck, VerificationState::Done},
    // A verification may also stay where it is (another block; a record that grows).
    {VerificationState::Running, VerificationState::Running},
    {VerificationState::Recheck, VerificationState::Recheck},
}};

template <class Names, class Moves> std::string moves_text(const Names& names, const Moves& moves) {
    std::string s;
    for (const auto& [from, to] : moves)
        s.append(s.empty() ? "" : ", ").append(names.name(from)).append(" -> ").append(names.name(to));
    return s;
}

template <class E, std::size_t N>
E parse(const util::EnumNames<E, N>& names, const char* what, const std::string& name,
        const std::string& where) {
    if (const auto v = names.parse(name)) return *v;
    throw Error(std::string("unknown ") + what + " '" + name + "'", where, names.list());
}
} // namespace

Stage parse_stage(const std::string& name, const std::string& where) {
    return parse(stage_names, "campaign stage", name, where);
}
BatchState parse_batch_state(const std::string& name, const std::string& where) {
    return parse(batch_state_names, "batch state", name, where);
}
VerificationState parse_verification_state(const std::string& name, const std::string& where) {
    return parse(verification_state_names, "verification state", name, where);
}

bool allowed(Stage from, Stage to) {
    return to > from;
}

bool allowed(BatchState from, BatchState to) {
    for (const auto& [f, t] : batch_moves)
        if (f == from && t == to) return true;
    return false;
}

bool allowed(VerificationState from, VerificationState to) {
    if (from == to) return true; // final states too: a decided record may grow (its ablation)
    for (const auto& [f, t] : verification_moves)
        if (f == from && t == to) return true;
    return false;
}

bool allowed_start(VerificationState s) {
    return s != VerificationState::Recheck;
}

std::optional<Stage> advance(Stage from, Stage to) {
    if (!allowed(from, to)) return std::nullopt;
    return to;
}

BatchState transition(std::int64_t batch_id, BatchState from, BatchState to) {
    if (allowed(from, to)) return to;
    throw Error("batch " + std::to_string(batch_id) + " is " + to_string(from) + ": it cannot become " +
                    to_string(to),
                "campaign store", "one of " + moves_text(batch_state_names, batch_moves));
}

VerificationState transition(std::int64_t verification_id, VerificationState from, VerificationState to) {
    if (allowed(from, to)) return to;
    throw Error("verification " + std::to_string(verification_id) + " is " + to_string(from) +
                    ": it cannot become " + to_string(to),
                "campaign store",
                "one of " + moves_text(verification_state_names, verification_moves) + ", or no change");
}

VerificationState start(VerificationState s) {
    if (allowed_start(s)) return s;
    throw Error("a verification cannot start " + to_string(s), "campaign store", "running, done or skipped");
}

} // namespace infrarsi::store
