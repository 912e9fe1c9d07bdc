#include "model/failure_edges.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <set>
#include <tuple>

namespace infrarsi::model {

namespace {

// Ran its steps within the memory limit (and, for the timeout edge, within the time limit).
bool fitted(const TrialObservation& t) {
    return t.outcome == ObservationKind::ok || t.outcome == ObservationKind::stopped;
}

bool same(const Eigen::VectorXd& a, const Eigen::VectorXd& b) {
    return a.size() == b.size() && ((a - b).array().abs() <= 1e-9).all();
}

// (unknown coordinate, from value, to value): a change known to save memory.
using Saving = std::tuple<int, double, double>;

struct OomEdges {
    const std::vector<Candidate>& candidates;
    const EdgeSettings& s;
    std::set<Saving> savings;
    std::vector<char> driver; // per unknown coordinate: learned to drive memory

    // y needs at least x's memory on every declared coordinate and differs otherwise only in changes not
    // known to save memory.
    bool on_edge(int y, int x) const {
        const auto& cy = candidates[y];
        const auto& cx = candidates[x];
        if (cy.memory_key.size() != cx.memory_key.size() ||
            cy.memory_unknown.size() != cx.memory_unknown.size())
            return false;
        if (cx.memory_key.size() + cx.memory_unknown.size() == 0) return false; // no claims
        if (((cy.memory_key - cx.memory_key).array() < -1e-9).any()) return false;
        if (cy.prior_peak_bytes < cx.prior_peak_bytes * (1 - s.prior_margin)) return false;
        for (Eigen::Index j = 0; j < cx.memory_unknown.size(); ++j) {
            const double a = cx.memory_unknown(j), b = cy.memory_unknown(j);
            if (driver[static_cast<std::size_t>(j)]) {
                if (b < a - 1e-9) return false;
            } else if (a != b && savings.count({static_cast<int>(j), a, b})) {
                return false;
            }
        }
        return true;
    }
};

std::string cause_text(const std::vector<std::pair<int, double>>& cause, const EdgeSettings& s) {
    std::string out;
    for (const auto& [j, v] : cause) {
        std::string one;
        const std::string name = j < static_cast<int>(s.feature_names.size())
                                     ? s.feature_names[static_cast<std::size_t>(j)]
                                     : fmt::format("feature {}", j);
        if (name.find('=') != std::string::npos) { // one-hot: the value it had is the one set
            if (v != 1.0) continue;
            one = name;
        } else if (!name.empty() && name[0] == '+') {
            one = (v == 1.0 ? "" : "without ") + name;
        } else {
            one = fmt::format("{}={:.3g}", name, v);
        }
        out += (out.empty() ? "" : ", ") + one;
    }
    return out.empty() ? "its values" : out;
}

} // namespace

FailureEdges failure_edges(const std::vector<Candidate>& candidates,
                           const std::vector<TrialObservation>& trials, const EdgeSettings& s) {
    const int n = static_cast<int>(candidates.size());
    FailureEdges out;
    out.oom.assign(candidates.size(), 0.0);
    out.timeout.assign(candidates.size(), 0.0);
    if (candidates.empty()) return out;
    std::vector<char> tried(candidates.size(), 0);
    for (const auto& t : trials)
        tried[static_cast<std::size_t>(t.candidate)] = 1;
    auto examples = [&](const std::vector<int>& cs) {
        std::string ex;
        for (std::size_t i = 0; i < cs.size() && i < 3; ++i)
            ex += (ex.empty() ? "" : "; ") + candidates[static_cast<std::size_t>(cs[i])].id;
        return ex + (cs.size() > 3 ? "; ..." : "");
    };

    // OOM edges: only where some knob's memory effect is unknown (else the hard rule says it all).
    const Eigen::Index u = candidates.front().memory_unknown.size();
    std::vector<int> ooms; // distinct OOMed candidates
    for (const auto& t : trials)
        if (t.outcome == ObservationKind::oom &&
            std::find(ooms.begin(), ooms.end(), t.candidate) == ooms.end())
            ooms.push_back(t.candidate);
    if (u > 0 && !ooms.empty()) {
        OomEdges e{candidates, s, {}, std::vector<char>(static_cast<std::size_t>(u), 0)};
        // Learned drivers: an ordered knob an OOM had higher than a trial that fitted although that trial
        // needed at least the OOM's memory on the declared knobs (which then do not explain the OOM).
        for (Eigen::Index j = 0; j < u; ++j) {
            if (j >= static_cast<Eigen::Index>(s.unknown_ordered.size()) ||
                !s.unknown_ordered[static_cast<std::size_t>(j)])
                continue;
            for (int x : ooms)
                for (const auto& z : trials) {
                    const auto& cz = candidates[z.candidate];
                    const auto& cx = candidates[x];
                    if (fitted(z) && cz.memory_unknown.size() == u &&
                        cz.memory_key.size() == cx.memory_key.size() &&
                        !((cz.memory_key - cx.memory_key).array() < -1e-9).any() &&
                        cz.memory_unknown(j) < cx.memory_unknown(j))
                        e.driver[static_cast<std::size_t>(j)] = 1;
                }
        }
        // Measured savings: successful trials with a peak, compared within equal declared coordinates.
        std::map<std::vector<double>, std::vector<const TrialObservation*>> by_key;
        for (const auto& t : trials)
            if (t.outcome == ObservationKind::ok && t.peak_bytes > 0) {
                const auto& k = candidates[t.candidate].memory_key;
                by_key[std::vector<double>(k.data(), k.data() + k.size())].push_back(&t);
            }
        for (const auto& [_, group] : by_key)
            for (const auto* p : group)
                for (const auto* r : group) {
                    if (!(r->peak_bytes < p->peak_bytes * (1 - s.saving_fraction))) continue;
                    const auto& a = candidates[p->candidate].memory_unknown;
                    const auto& b = candidates[r->candidate].memory_unknown;
                    if (a.size() != u || b.size() != u) continue;
                    for (Eigen::Index j = 0; j < u; ++j)
                        if (a(j) != b(j)) e.savings.insert({static_cast<int>(j), a(j), b(j)});
                }
        // Contradictions: a trial that fitted on an OOM's edge.
        std::vector<char> dropped(ooms.size(), 0);
        std::set<Saving> learned;
        for (std::size_t i = 0; i < ooms.size(); ++i) {
            const int x = ooms[i];
            for (const auto& z : trials) {
                if (!fitted(z) || !e.on_edge(z.candidate, x)) continue;
                const auto& a = candidates[x].memory_unknown;
                const auto& b = candidates[z.candidate].memory_unknown;
                bool changed = false;
                for (Eigen::Index j = 0; j < u; ++j)
                    if (!e.driver[static_cast<std::size_t>(j)] && a(j) != b(j))
                        learned.insert({static_cast<int>(j), a(j), b(j)}), changed = true;
                if (!changed) dropped[i] = 1; // fitted where it OOMed by every declared measure: unreliable
            }
        }
        e.savings.insert(learned.begin(), learned.end());
        for (std::size_t i = 0; i < ooms.size(); ++i) {
            if (dropped[i]) continue;
            const int x = ooms[i];
            std::vector<int> reached;
            for (int c = 0; c < n; ++c) {
                if (!e.on_edge(c, x)) continue;
                out.oom[static_cast<std::size_t>(c)] = s.near_certain;
                // Those the hard rule leaves open: a knob of unknown effect differs.
                if (!tried[static_cast<std::size_t>(c)] &&
                    !same(candidates[c].memory_unknown, candidates[x].memory_unknown))
                    reached.push_back(c);
            }
            if (!reached.empty())
                out.notes.push_back(fmt::format(
                    "OOM edge: {} ran out of memory; {} untried candidate{} that need at least its memory on "
                    "the declared knobs and differ only in knobs or patches no trial showed to save memory "
                    "are avoided at P(OOM)={:.2f} (e.g. {})",
                    candidates[x].id, reached.size(), reached.size() == 1 ? "" : "s", s.near_certain,
                    examples(reached)));
        }
    }

    // Timeout edges: the values a timeout had that no trial that finished had.
    std::vector<int> done;
    for (const auto& t : trials) {
        // No step measured, or only a lower bound: what it had, not how slow its steps were, is known.
        const bool no_step = t.step_time_censored || !(t.step_time_s > 0);
        if (t.outcome != ObservationKind::timeout || !no_step ||
            std::find(done.begin(), done.end(), t.candidate) != done.end())
            continue;
        done.push_back(t.candidate);
        const auto& x = candidates[t.candidate].features;
        std::vector<std::pair<int, double>> cause;
        for (Eigen::Index j = 0; j < x.size(); ++j) {
            bool seen = false;
            for (const auto& z : trials)
                if (fitted(z) && candidates[z.candidate].features(j) == x(j)) {
                    seen = true;
                    break;
                }
            if (!seen) cause.push_back({static_cast<int>(j), x(j)});
        }
        if (cause.empty()) continue; // every value it had finished elsewhere: the combination is slow
        std::vector<int> reached;
        for (int c = 0; c < n; ++c) {
            const auto& f = candidates[c].features;
            if (!std::all_of(cause.begin(), cause.end(),
                             [&](const auto& jv) { return f(jv.first) == jv.second; }))
                continue;
            out.timeout[static_cast<std::size_t>(c)] = s.near_certain;
            if (!tried[static_cast<std::size_t>(c)]) reached.push_back(c);
        }
        if (!reached.empty())
            out.notes.push_back(fmt::format(
                "timeout edge: {} reached the time limit with no step measured below it; blamed on {}, which "
                "no trial that finished had: {} untried candidate{} with {} avoided at P(timeout)={:.2f} "
                "(e.g. {})",
                candidates[t.candidate].id, cause_text(cause, s), reached.size(),
                reached.size() == 1 ? "" : "s", cause.size() == 1 ? "it" : "them all", s.near_certain,
                examples(reached)));
    }
    return out;
}

} // namespace infrarsi::model
