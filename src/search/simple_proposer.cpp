#include "search/proposer.hpp"

#include "search/model_proposer.hpp"
#include "util/error.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <limits>
#include <set>

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

std::vector<Proposal> SimpleProposer::propose(const ProposalContext& ctx) {
    if (!ctx.space) throw Error("proposer called without a space", "SimpleProposer", "a space");
    const auto& space = *ctx.space;
    std::set<std::string> tried;
    std::vector<Eigen::VectorXd> taken;
    for (const auto& o : ctx.history) {
        tried.insert(o.candidate.key());
        taken.push_back(space.encode(o.candidate));
    }
    // A patch set that did not build fails with any knob setting and in any larger set: skip its supersets.
    std::vector<std::vector<std::string>> broken;
    for (const auto& o : ctx.history)
        if (o.outcome == TrialOutcome::BuildFailure) broken.push_back(o.candidate.patches);
    auto builds = [&](const space::Candidate& c) {
        for (const auto& b : broken)
            if (std::includes(c.patches.begin(), c.patches.end(), b.begin(), b.end())) return false;
        return true;
    };
    std::vector<Proposal> out;
    auto take = [&](const space::Candidate& c, std::string reason) {
        if (static_cast<int>(out.size()) >= ctx.q || tried.count(c.key()) || !builds(c)) return;
        tried.insert(c.key());
        taken.push_back(space.encode(c));
        out.push_back({c, std::move(reason)});
    };

    // Neighbours of the best successful candidate: local improvement once something works.
    const Observation* best = nullptr;
    for (const auto& o : ctx.history)
        if (o.outcome == TrialOutcome::Ok && o.step_time_s && (!best || *o.step_time_s < *best->step_time_s))
            best = &o;
    if (best) {
        auto n = space.neighbours(best->candidate);
        // Deterministic order: nearest first in encoded space, ties by key.
        auto origin = space.encode(best->candidate);
        std::sort(n.begin(), n.end(), [&](const auto& a, const auto& b) {
            double da = (space.encode(a) - origin).squaredNorm(),
                   db = (space.encode(b) - origin).squaredNorm();
            return da != db ? da < db : a.key() < b.key();
        });
        const int local = std::max(1, ctx.q / 2 + ctx.q % 2);
        for (const auto& c : n) {
            if (static_cast<int>(out.size()) >= local) break;
            take(c, fmt::format("neighbour of the best so far ({}, {:.4f} s/step)",
                                best->candidate.describe(), *best->step_time_s));
        }
    }

    // Space-filling: the candidate farthest from everything tried or chosen (greedy maximin).
    auto pool = space.enumerate(20000, ctx.seed);
    std::vector<double> dist(pool.size(), std::numeric_limits<double>::infinity());
    for (std::size_t i = 0; i < pool.size(); ++i) {
        auto f = space.encode(pool[i]);
        for (const auto& t : taken)
            dist[i] = std::min(dist[i], (f - t).squaredNorm());
    }
    while (static_cast<int>(out.size()) < ctx.q) {
        std::size_t arg = pool.size();
        for (std::size_t i = 0; i < pool.size(); ++i)
            if (!tried.count(pool[i].key()) && builds(pool[i]) && (arg == pool.size() || dist[i] > dist[arg]))
                arg = i;
        if (arg == pool.size()) break; // exhausted
        take(pool[arg], best ? "space-filling (far from every trial so far)" : "space-filling start");
        auto f = taken.back();
        for (std::size_t i = 0; i < pool.size(); ++i)
            dist[i] = std::min(dist[i], (space.encode(pool[i]) - f).squaredNorm());
    }
    return out;
}

std::unique_ptr<Proposer> make_proposer(const std::string& name) {
    if (name.empty() || name == "model") return std::make_unique<ModelProposer>();
    if (name == "simple") return std::make_unique<SimpleProposer>();
    throw Error("unknown proposer '" + name + "'", "--proposer", "model or simple");
}

} // namespace infrarsi::search
