#include "search/proposer.hpp"

#include "search/model_proposer.hpp"
#include "util/error.hpp"

#include <algorithm>

namespace infrarsi::search {

const char* to_string(TrialOutcome o) {
    switch (o) {
    case TrialOutcome::Ok:
        return "ok";
    case TrialOutcome::OutOfMemory:
        return "oom";
    case TrialOutcome::Timeout:
        return "timeout";
    case TrialOutcome::NodeFailure:
        return "node_failure";
    case TrialOutcome::Crash:
        return "crash";
    case TrialOutcome::BuildFailure:
        return "build_failure";
    case TrialOutcome::ContractViolation:
        return "contract_violation";
    case TrialOutcome::Cancelled:
        return "cancelled";
    }
    return "?";
}

TrialOutcome parse_outcome(const std::string& s) {
    for (auto o : {TrialOutcome::Ok, TrialOutcome::OutOfMemory, TrialOutcome::Timeout,
                   TrialOutcome::NodeFailure, TrialOutcome::Crash, TrialOutcome::BuildFailure,
                   TrialOutcome::ContractViolation, TrialOutcome::Cancelled})
        if (s == to_string(o)) return o;
    throw Error("unknown trial outcome '" + s + "'", "outcome", "ok, oom, timeout, node_failure, crash, ...");
}

BuildFailures::BuildFailures(const std::vector<PatchFacts>& patches,
                             const std::vector<Observation>& history) {
    const std::string tag = "conflicts_with=";
    for (const auto& p : patches)
        for (const auto& t : p.tags)
            if (t.rfind(tag, 0) == 0) {
                std::vector<std::string> pair = {p.id, t.substr(tag.size())};
                std::sort(pair.begin(), pair.end());
                failed_.push_back(pair);
            }
    for (const auto& o : history)
        if (o.outcome == TrialOutcome::BuildFailure ||
            (o.outcome == TrialOutcome::ContractViolation && !o.candidate.patches.empty()))
            failed_.push_back(o.candidate.patches);
}

bool BuildFailures::builds(const space::Candidate& c) const {
    for (const auto& f : failed_)
        if (std::includes(c.patches.begin(), c.patches.end(), f.begin(), f.end())) return false;
    return true;
}

std::unique_ptr<Proposer> make_proposer(const std::string& name) {
    if (name.empty() || name == "model") return std::make_unique<ModelProposer>();
    if (name == "simple") return std::make_unique<SimpleProposer>();
    throw Error("unknown proposer '" + name + "'", "--proposer", "model or simple");
}

} // namespace infrarsi::search
