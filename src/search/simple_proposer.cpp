#include "search/proposer.hpp"

#include "util/error.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <limits>
#include <set>

namespace infrarsi::search {

std::vector<Proposal> SimpleProposer::propose(const ProposalContext& ctx) {
    if (!ctx.space) throw Error("proposer called without a space", "SimpleProposer", "a space");
    const auto& space = *ctx.space;
    std::set<std::string> tried;
    std::vector<Eigen::VectorXd> taken;
    for (const auto& o : ctx.history) {
        tried.insert(o.candidate.key());
        taken.push_back(space.encode(o.candidate));
    }
    const BuildFailures failed_builds(ctx.patches, ctx.history, ctx.excluded_patch_sets);
    auto builds = [&](const space::Candidate& c) { return failed_builds.builds(c); };
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
        if (o.outcome == trial::Outcome::Ok && o.step_time_s &&
            (!best || *o.step_time_s < *best->step_time_s))
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

} // namespace infrarsi::search
