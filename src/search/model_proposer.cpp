#include "search/model_proposer.hpp"

#include "model/claim_prior.hpp"
#include "space/memory_role.hpp"
#include "util/error.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

namespace infrarsi::search {

namespace {

using space::MemoryRole;

double numeric(const space::Knob& k, const space::Value& v) {
    if (const auto* i = std::get_if<long long>(&v)) return static_cast<double>(*i);
    if (const auto* b = std::get_if<bool>(&v)) return *b ? 1 : 0;
    const auto& s = std::get<std::string>(v);
    auto it = std::find(k.choices.begin(), k.choices.end(), s);
    return static_cast<double>(it - k.choices.begin());
}

struct MemoryCoordinates {
    Eigen::VectorXd key, unknown; // model::Candidate::memory_key and memory_unknown
};

// The candidate's memory key and the values of the knobs and patches of unknown memory effect (every knob of
// role Other, every patch tagged neither memory_saver nor memory_hungry), or empty vectors when it does not
// fit the space (no dominance claims).
MemoryCoordinates memory_coordinates(const space::Space& space,
                                     const std::map<std::string, int>& patch_effect,
                                     const space::Candidate& c) {
    std::vector<double> key, unknown;
    for (const auto& k : space.knobs) {
        auto it = c.knobs.find(k.name);
        if (it == c.knobs.end()) return {};
        switch (space::memory_role(k)) {
        case MemoryRole::Accumulation:
            break;
        case MemoryRole::MicroBatch:
            key.push_back(numeric(k, it->second));
            break;
        case MemoryRole::Recompute:
            key.push_back(-space::recompute_strength(it->second));
            break;
        case MemoryRole::Other:
            unknown.push_back(numeric(k, it->second));
            break;
        }
    }
    for (const auto& p : space.patches) {
        const double on = std::binary_search(c.patches.begin(), c.patches.end(), p) ? 1 : 0;
        const int effect = patch_effect.count(p) ? patch_effect.at(p) : 0;
        if (effect > 0)
            key.push_back(on);
        else if (effect < 0)
            key.push_back(-on);
        else
            unknown.push_back(on);
    }
    auto vec = [](std::vector<double>& v) {
        return Eigen::VectorXd(Eigen::Map<Eigen::VectorXd>(v.data(), static_cast<Eigen::Index>(v.size())));
    };
    return {vec(key), vec(unknown)};
}

// Per unknown coordinate (same order as memory_coordinates): whether its values are ordered.
std::vector<char> unknown_ordered(const space::Space& space, const std::map<std::string, int>& patch_effect) {
    std::vector<char> out;
    for (const auto& k : space.knobs)
        if (space::memory_role(k) == MemoryRole::Other)
            out.push_back(k.kind == space::KnobKind::Integer || k.kind == space::KnobKind::Pow2);
    for (const auto& p : space.patches)
        if (!patch_effect.count(p) || patch_effect.at(p) == 0) out.push_back(0);
    return out;
}

} // namespace

bool ClaimedChange::in(const space::Candidate& c) const {
    if (!patch.empty()) return std::binary_search(c.patches.begin(), c.patches.end(), patch);
    auto it = c.knobs.find(knob);
    return it != c.knobs.end() && space::to_string(it->second) == value;
}

std::string ClaimedChanges::describe() const {
    std::string out = "claims as priors (speed-up as used, after the discount; memory factor):";
    for (std::size_t j = 0; j < changes.size(); ++j)
        out += fmt::format(
            "{} {} {:.2f}x, memory {:.2f}x, sd {:.2f}", j == 0 ? "" : ";",
            changes[j].patch.empty() ? changes[j].knob + "=" + changes[j].value : "+" + changes[j].patch,
            std::exp(-model::claimed_log_step_effect(claims[j])), model::claimed_memory_factor(claims[j]),
            model::claim_prior_sd(claims[j].confidence, claims[j].calibration_error));
    return out;
}

ClaimedChanges claimed_changes(const space::Space& space, const std::vector<PatchFacts>& patches,
                               const std::vector<KnobPrior>& knob_priors) {
    ClaimedChanges out;
    auto seen = [&](const ClaimedChange& c) {
        return std::any_of(out.changes.begin(), out.changes.end(), [&](const ClaimedChange& o) {
            return o.patch == c.patch && o.knob == c.knob && o.value == c.value;
        });
    };
    for (const auto& p : patches) {
        if (!p.claim || !std::count(space.patches.begin(), space.patches.end(), p.id)) continue;
        ClaimedChange c{p.id, {}, {}};
        if (seen(c)) continue;
        out.changes.push_back(std::move(c));
        const auto& k = *p.claim;
        out.claims.push_back(
            {k.speedup, k.memory_factor, k.confidence, k.discount, k.memory_discount, k.calibration_error});
    }
    const auto base = space.baseline();
    for (const auto& k : knob_priors) {
        auto it = base.knobs.find(k.knob);
        // A knob outside the space, or the baseline's own value (no effect against itself): nothing to use.
        if (it == base.knobs.end() || space::to_string(it->second) == k.value) continue;
        ClaimedChange c{{}, k.knob, k.value};
        if (seen(c)) continue;
        out.changes.push_back(std::move(c));
        out.claims.push_back(
            {k.speedup, k.memory_factor, k.confidence, k.discount, k.memory_discount, k.calibration_error});
    }
    return out;
}

model::TrialObservation to_model_observation(const Observation& o, double timeout_bound_s) {
    model::TrialObservation t;
    const double measured = o.step_time_s && *o.step_time_s > 0 ? *o.step_time_s : 0.0;
    t.cost_s = o.cost_node_s;
    t.outcome = model::ObservationKind::failed; // queued and not yet measured, or nothing to learn: never
                                                // proposed again
    switch (o.outcome) {
    case trial::Outcome::Ok:
        if (measured > 0) {
            t.outcome = model::ObservationKind::ok;
            t.step_time_s = measured;
            t.peak_bytes = o.peak_memory_bytes.value_or(0);
        }
        break;
    case trial::Outcome::OutOfMemory:
        t.outcome = model::ObservationKind::oom;
        break;
    case trial::Outcome::Timeout:
        t.outcome = model::ObservationKind::timeout;
        t.step_time_s = std::max(measured, timeout_bound_s);
        t.step_time_censored = timeout_bound_s > measured;
        break;
    case trial::Outcome::StoppedSlow:
        if (measured > 0) {
            t.outcome = model::ObservationKind::stopped;
            t.step_time_s = measured;
            t.peak_bytes = o.peak_memory_bytes.value_or(0); // its first steps ran: its peak was measured
        }
        break;
    case trial::Outcome::Crash:
    case trial::Outcome::ContractViolation:
        if (o.infrastructure) break;
        t.outcome = model::ObservationKind::infeasible;
        // Step times a Timing or Settings violation printed are not the candidate's.
        if (o.violation != trial::Violation::Timing && o.violation != trial::Violation::Settings)
            t.step_time_s = measured;
        break;
    case trial::Outcome::BuildFailure:
    case trial::Outcome::NodeFailure:
    case trial::Outcome::Cancelled:
        break;
    }
    return t;
}

std::vector<space::Candidate> baseline_neighbours(const space::Space& space) {
    // Grouped by the first knob a neighbour moves (or its patch), then interleaved: one move of each knob
    // and each patch before a second move of any, so that a first batch spans different knobs.
    const auto base = space.baseline();
    std::vector<std::vector<space::Candidate>> groups;
    std::map<std::string, std::size_t> group_of;
    for (auto& m : space.moves(base)) {
        auto [it, fresh] = group_of.emplace(m.what, groups.size());
        if (fresh) groups.emplace_back();
        groups[it->second].push_back(std::move(m.to));
    }
    // Within a group, the moves that keep the baseline's micro-batch first: two ranks at a fixed global
    // batch halve the accumulation, as a person would, before they halve the micro-batch (which changes the
    // kernels' shapes and the memory, and is a move of its own in the micro-batch's group). The first round
    // takes each group's first move, so this is the one the opening batch measures.
    auto micro_batch_moved = [&](const space::Candidate& c, const std::string& moved) {
        int n = 0;
        for (const auto& k : space.knobs)
            if (k.name != moved && space::memory_role(k) == MemoryRole::MicroBatch && c.knobs.count(k.name) &&
                base.knobs.count(k.name) && c.knobs.at(k.name) != base.knobs.at(k.name))
                ++n;
        return n;
    };
    for (const auto& [what, g] : group_of)
        std::stable_sort(groups[g].begin(), groups[g].end(), [&](const auto& a, const auto& b) {
            return micro_batch_moved(a, what) < micro_batch_moved(b, what);
        });
    std::vector<space::Candidate> out;
    for (std::size_t round = 0, added = 1; added > 0; ++round) {
        added = 0;
        for (auto& g : groups)
            if (round < g.size()) out.push_back(std::move(g[round])), ++added;
    }
    return out;
}

std::vector<Proposal> ModelProposer::propose(const ProposalContext& ctx) {
    if (!ctx.space) throw Error("proposer called without a space", "ModelProposer", "a space");
    notes_.clear();
    stop_reason_.clear();
    if (ctx.q < 1) return {};
    if (!(ctx.memory_limit_bytes > 0)) {
        auto out = SimpleProposer().propose(ctx);
        for (auto& p : out)
            p.reason = "no memory limit, model not used: " + p.reason;
        return out;
    }
    const auto& space = *ctx.space;

    // Patch memory effects from their tags: +1 memory_hungry, -1 memory_saver, 0 unknown (must match).
    std::map<std::string, int> patch_effect;
    std::vector<std::string> savers;
    for (const auto& p : ctx.patches) {
        const bool hungry = std::count(p.tags.begin(), p.tags.end(), "memory_hungry") > 0;
        const bool saver = std::count(p.tags.begin(), p.tags.end(), "memory_saver") > 0;
        patch_effect[p.id] = hungry == saver ? 0 : hungry ? 1 : -1;
        if (saver && !hungry && std::count(space.patches.begin(), space.patches.end(), p.id))
            savers.push_back(p.id);
    }

    const BuildFailures failed_builds(ctx.patches, ctx.history, ctx.excluded_patch_sets);
    auto builds = [&](const space::Candidate& c) { return failed_builds.builds(c); };

    // The candidate list: every history candidate (so observations map to indices), the seeds, the space.
    std::vector<space::Candidate> list;
    std::unordered_map<std::string, int> index;
    auto add = [&](const space::Candidate& c) {
        auto [it, fresh] = index.emplace(c.key(), static_cast<int>(list.size()));
        if (fresh) list.push_back(c);
        return it->second;
    };
    std::vector<model::TrialObservation> trials;
    const double timeout_bound =
        ctx.time_limit_s > 0 && ctx.trial_steps > 0
            ? std::max(0.0, ctx.time_limit_s - std::max(0.0, ctx.trial_overhead_s)) / ctx.trial_steps
            : 0.0;
    for (const auto& o : ctx.history) {
        model::TrialObservation t = to_model_observation(o, timeout_bound);
        t.candidate = add(o.candidate);
        trials.push_back(t);
    }
    model::ProposerSettings s;
    for (const auto& c : ctx.seeds) {
        if (index.count(c.key())) continue; // already tried: the model skips it anyway
        try {
            space.check(c);
        } catch (const Error&) {
            continue;
        }
        if (space.feasible(c) && builds(c)) s.hints.push_back(add(c));
    }
    for (const auto& c : baseline_neighbours(space))
        if (builds(c)) s.initial_design.push_back(add(c));
    for (const auto& c : space.enumerate(pool_limit_, ctx.seed))
        if (builds(c)) add(c);
    std::vector<char> known(list.size(), 0);
    for (const auto& t : trials)
        known[static_cast<std::size_t>(t.candidate)] = 1;
    if (std::all_of(known.begin(), known.end(), [](char k) { return k; })) return {}; // space exhausted

    // Analytic memory prior for every candidate, or one constant for all when any is missing (a mix of
    // analytic and constant priors would read as a systematic error of the estimate).
    std::vector<double> prior(list.size(), 0.5 * ctx.memory_limit_bytes);
    bool analytic = static_cast<bool>(ctx.memory_estimate);
    for (std::size_t i = 0; analytic && i < list.size(); ++i) {
        auto e = ctx.memory_estimate(list[i]);
        if (e && *e > 0)
            prior[i] = *e;
        else
            analytic = false;
    }
    if (!analytic) std::fill(prior.begin(), prior.end(), 0.5 * ctx.memory_limit_bytes);

    // Claims as priors (model/claim_prior.hpp): one basis function of the runtime model per claimed change,
    // and the claimed memory factor on the memory prior of every candidate with the change.
    const ClaimedChanges claimed = claimed_changes(space, ctx.patches, ctx.knob_priors);
    std::vector<Eigen::VectorXd> basis(list.size());
    if (!claimed.changes.empty())
        for (std::size_t i = 0; i < list.size(); ++i) {
            basis[i] = Eigen::VectorXd::Zero(static_cast<Eigen::Index>(claimed.changes.size()));
            for (std::size_t j = 0; j < claimed.changes.size(); ++j)
                if (claimed.changes[j].in(list[i])) {
                    basis[i](static_cast<Eigen::Index>(j)) = 1;
                    prior[i] *= model::claimed_memory_factor(claimed.claims[j]);
                }
        }

    std::vector<model::Candidate> candidates(list.size());
    for (std::size_t i = 0; i < list.size(); ++i) {
        const auto& c = list[i];
        auto& m = candidates[i];
        m.id = c.describe();
        m.features = space.encode(c);
        m.prior_peak_bytes = prior[i];
        auto mc = memory_coordinates(space, patch_effect, c);
        m.memory_key = std::move(mc.key);
        m.memory_unknown = std::move(mc.unknown);
        m.prior_basis = std::move(basis[i]);
    }
    // Savers: recompute one step stronger, or one memory_saver patch added (when that candidate is listed).
    for (std::size_t i = 0; i < list.size(); ++i) {
        const auto& c = list[i];
        for (const auto& k : space.knobs) {
            auto it = c.knobs.find(k.name);
            if (space::memory_role(k) != MemoryRole::Recompute || it == c.knobs.end()) continue;
            std::optional<space::Value> next;
            if (k.kind == space::KnobKind::Bool) {
                if (!std::get<bool>(it->second)) next = true;
            } else {
                const int rank = space::recompute_strength(it->second);
                for (const auto& v : k.choices) {
                    const int r = space::recompute_strength(space::Value(v));
                    if (r > rank && (!next || r < space::recompute_strength(*next))) next = space::Value(v);
                }
            }
            if (!next) continue;
            auto saved = c;
            saved.knobs[k.name] = *next;
            if (auto j = index.find(saved.key()); j != index.end())
                candidates[i].savers.push_back({j->second, k.name + "=" + space::to_string(*next)});
        }
        for (const auto& p : savers) {
            if (std::binary_search(c.patches.begin(), c.patches.end(), p)) continue;
            auto saved = c;
            saved.patches.insert(std::upper_bound(saved.patches.begin(), saved.patches.end(), p), p);
            if (auto j = index.find(saved.key()); j != index.end())
                candidates[i].savers.push_back({j->second, "+" + p});
        }
    }

    s.memory_limit_bytes = ctx.memory_limit_bytes;
    if (ctx.noise_floor > 0) {
        s.min_detectable_effect =
            ctx.min_gain > 0 ? std::min(ctx.min_gain, ctx.noise_floor) : ctx.noise_floor;
        // MDE ~ (z_0.975 + z_0.8) sd for one trial against another: sd of log step time ~ MDE / 2.8.
        s.noise_variance = std::max(1e-6, std::pow(ctx.noise_floor / 2.8, 2));
    }
    s.seed = ctx.seed;
    if (!claimed.changes.empty()) s.runtime_prior = model::runtime_claim_prior(claimed.claims);
    s.edges.unknown_ordered = unknown_ordered(space, patch_effect);
    s.edges.feature_names = space.feature_names();
    s.time_limit_s = ctx.time_limit_s;
    if (ctx.trial_steps > 0) s.trial_steps = ctx.trial_steps;
    if (ctx.trial_overhead_s > 0) s.trial_overhead_s = ctx.trial_overhead_s;

    std::vector<Proposal> out;
    auto proposals = model_.propose(candidates, trials, ctx.q, s);
    notes_ = model_.notes();
    if (!claimed.changes.empty()) notes_.push_back(claimed.describe());
    stop_reason_ = model_.stop_reason();
    for (auto& p : proposals) {
        auto reason = std::move(p.reason);
        if (!analytic) reason += "; memory prior: constant (no analytic estimate), learned from OOMs";
        out.push_back({list[static_cast<std::size_t>(p.candidate)], std::move(reason)});
    }
    return out;
}

} // namespace infrarsi::search
