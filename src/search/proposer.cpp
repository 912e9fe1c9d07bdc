#include "search/proposer.hpp"

#include "search/model_proposer.hpp"
#include "util/error.hpp"

#include <algorithm>
#include <set>

namespace infrarsi::search {

std::optional<PatchClaim> tag_claim(const std::vector<std::string>& tags) {
    auto has = [&](const char* t) { return std::find(tags.begin(), tags.end(), t) != tags.end(); };
    if (!has("speedup") || has("math_changing") || has("expected_build_failure")) return std::nullopt;
    PatchClaim c;
    c.speedup = kTagClaimedSpeedup;
    c.confidence = 0;
    return c;
}

BuildFailures::BuildFailures(const std::vector<PatchFacts>& patches, const std::vector<Observation>& history,
                             const std::vector<std::vector<std::string>>& excluded) {
    for (auto set : excluded) {
        std::sort(set.begin(), set.end());
        failed_.push_back(std::move(set));
    }
    const std::string tag = "conflicts_with=";
    for (const auto& p : patches)
        for (const auto& t : p.tags)
            if (t.rfind(tag, 0) == 0) {
                std::vector<std::string> pair = {p.id, t.substr(tag.size())};
                std::sort(pair.begin(), pair.end());
                failed_.push_back(pair);
            }
    for (const auto& o : history)
        if (o.outcome == trial::Outcome::BuildFailure ||
            (o.outcome == trial::Outcome::ContractViolation && !o.candidate.patches.empty()))
            failed_.push_back(o.candidate.patches);
    // Sandboxes are built before submission (campaign/batch_runner.cpp): every trial that was not refused there
    // built its patch set.
    std::set<std::string> built;
    for (const auto& o : history) {
        const bool unbuilt = o.outcome == trial::Outcome::BuildFailure ||
                             (o.outcome == trial::Outcome::ContractViolation &&
                              (o.violation == trial::Violation::OutOfScope ||
                               o.violation == trial::Violation::ProtectedChanged));
        if (!unbuilt) built.insert(o.candidate.patches.begin(), o.candidate.patches.end());
    }
    for (const auto& o : history) {
        if (o.outcome != trial::Outcome::BuildFailure || o.candidate.patches.size() < 2) continue;
        std::vector<std::string> unknown;
        for (const auto& p : o.candidate.patches)
            if (!built.contains(p)) unknown.push_back(p);
        if (unknown.size() == 1) suspects_.push_back(unknown.front());
    }
}

bool BuildFailures::builds(const space::Candidate& c) const {
    for (const auto& f : failed_)
        if (std::includes(c.patches.begin(), c.patches.end(), f.begin(), f.end())) return false;
    if (c.patches.size() > 1)
        for (const auto& s : suspects_)
            if (std::find(c.patches.begin(), c.patches.end(), s) != c.patches.end()) return false;
    return true;
}

std::unique_ptr<Proposer> make_proposer(const std::string& name) {
    if (name.empty() || name == "model") return std::make_unique<ModelProposer>();
    if (name == "simple") return std::make_unique<SimpleProposer>();
    throw Error("unknown proposer '" + name + "'", "--proposer", "model or simple");
}

} // namespace infrarsi::search
