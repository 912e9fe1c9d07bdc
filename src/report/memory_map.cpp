#include "report/memory_map.hpp"

#include "model/censored_memory_model.hpp"
#include "space/memory_role.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

namespace infrarsi::report {

using nlohmann::json;

namespace {

// The feasible candidate with `fixed` knob values that differs least from the baseline (no patches), or
// nullopt when none is feasible.
std::optional<space::Candidate> nearest(const std::vector<space::Candidate>& pool,
                                        const space::Candidate& base, const space::Config& fixed) {
    std::optional<space::Candidate> best;
    int best_d = std::numeric_limits<int>::max();
    for (const auto& c : pool) {
        bool match = true;
        for (const auto& [k, v] : fixed)
            if (c.knobs.at(k) != v) match = false;
        if (!match) continue;
        int d = static_cast<int>(c.patches.size()) * 100;
        for (const auto& [k, v] : c.knobs)
            if (base.knobs.count(k) && base.knobs.at(k) != v) ++d;
        if (d < best_d) best = c, best_d = d;
    }
    return best;
}

// The knobs a map may be drawn over (2 to max_values values; not gradient accumulation, which holds no
// memory of its own), the one that moves the prediction most first: each knob swept alone from the baseline
// (its nearest feasible candidates), by the spread of the predicted log peak.
std::vector<const space::Knob*> knobs_by_effect(const space::Space& space,
                                                const std::vector<space::Candidate>& pool,
                                                const space::Candidate& base,
                                                const std::function<double(const space::Candidate&)>& predict,
                                                std::size_t max_values) {
    std::vector<std::pair<double, const space::Knob*>> effect;
    for (const auto& knob : space.knobs) {
        if (space::memory_role(knob) == space::MemoryRole::Accumulation || knob.size() < 2 ||
            knob.size() > max_values)
            continue;
        double lo = std::numeric_limits<double>::infinity(), hi = -lo;
        for (const auto& v : knob.domain())
            if (auto cand = nearest(pool, base, {{knob.name, v}})) {
                const double p = predict(*cand);
                lo = std::min(lo, p), hi = std::max(hi, p);
            }
        if (hi >= lo) effect.emplace_back(hi - lo, &knob);
    }
    std::stable_sort(effect.begin(), effect.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<const space::Knob*> out;
    for (const auto& [spread, knob] : effect)
        out.push_back(knob);
    return out;
}

// A knob's values as the map's axis names them; none for no knob.
json value_names(const space::Knob* k) {
    json out = json::array();
    if (k)
        for (const auto& v : k->domain())
            out.push_back(space::to_string(v));
    return out;
}

// The map's two axes: knob A, and knob B or none.
struct Axes {
    const space::Knob* a;
    const space::Knob* b;
};

// One cell per pair of values: the feasible candidate nearest the baseline there, and its P(OOM).
void add_cells(json& j, const std::vector<space::Candidate>& pool, const space::Candidate& base,
               const Axes& x, const std::function<double(const space::Candidate&)>& p_oom) {
    const auto av = x.a->domain();
    const auto bv = x.b ? x.b->domain() : std::vector<space::Value>{};
    for (std::size_t i = 0; i < av.size(); ++i)
        for (std::size_t jb = 0; jb < std::max<std::size_t>(bv.size(), 1); ++jb) {
            space::Config fixed{{x.a->name, av[i]}};
            if (x.b) fixed[x.b->name] = bv[jb];
            auto cand = nearest(pool, base, fixed);
            if (!cand) continue;
            j["cells"].push_back(
                {{"a", i}, {"b", jb}, {"p_oom", p_oom(*cand)}, {"candidate", cand->describe()}});
        }
}

// The trials at their values of the map's knobs.
void add_trials(json& j, const std::vector<std::pair<store::TrialRow, space::Candidate>>& placed,
                const Axes& x) {
    const auto av = x.a->domain();
    const auto bv = x.b ? x.b->domain() : std::vector<space::Value>{};
    auto index_of = [](const std::vector<space::Value>& vs, const space::Value& v) -> json {
        auto it = std::find(vs.begin(), vs.end(), v);
        return it == vs.end() ? json() : json(it - vs.begin());
    };
    for (const auto& [t, cand] : placed) {
        auto ai = cand.knobs.count(x.a->name) ? index_of(av, cand.knobs.at(x.a->name)) : json();
        auto bi = x.b && cand.knobs.count(x.b->name) ? index_of(bv, cand.knobs.at(x.b->name)) : json(0);
        if (ai.is_null() || bi.is_null()) continue;
        j["trials"].push_back({{"id", t.id}, {"a", ai}, {"b", bi}, {"outcome", store::outcome_name(t)}});
    }
}

} // namespace

namespace {
json memory_map(campaign::Campaign& c, std::size_t max_values, bool try_analytic, bool& analytic_held);
} // namespace

json memory_map(campaign::Campaign& c, std::size_t max_values) {
    // The analytic prior for every candidate drawn, or a constant for all: when one candidate has no
    // estimate, the whole map is drawn again with the constant, as the search would have fitted it.
    bool held = true;
    auto j = memory_map(c, max_values, true, held);
    return held ? j : memory_map(c, max_values, false, held);
}

namespace {
json memory_map(campaign::Campaign& c, std::size_t max_values, bool try_analytic, bool& analytic_held) {
    const auto& k = c.contract();
    const auto& space = k.space;
    const double limit = static_cast<double>(contract::modeled_memory_limit_bytes(k.resources));
    if (!(limit > 0) || space.knobs.empty()) return nullptr;
    const auto base = space.baseline();
    // Candidates without patches: the map is about knobs.
    std::vector<space::Candidate> pool;
    for (auto cand : space.enumerate(20000, 1))
        if (cand.patches.empty()) pool.push_back(std::move(cand));
    if (pool.empty()) return nullptr;

    // The prior as the search takes it (search/model_proposer.hpp): the analytic estimate for every
    // candidate, or half the limit for all when any has none.
    std::map<std::string, double> prior_cache;
    bool analytic = try_analytic;
    auto prior = [&](const space::Candidate& cand) {
        auto it = prior_cache.find(cand.key());
        if (it != prior_cache.end()) return it->second;
        std::optional<double> e;
        if (analytic) e = c.memory_estimate(cand);
        if (!e || !(*e > 0)) analytic = false;
        return prior_cache[cand.key()] = e && *e > 0 ? *e : 0.5 * limit;
    };

    auto trials = c.store().trials({.kinds = {store::TrialKind::Search, store::TrialKind::Doctor},
                                    .state = store::TrialState::Finished});
    std::vector<model::MemoryPoint> points;
    std::map<std::string, int> by_kind; // the trials fitted on, by kind
    std::vector<std::pair<store::TrialRow, space::Candidate>> placed;
    for (const auto& t : trials) {
        auto cand = space::Candidate::from_json(t.candidate);
        const auto before = points.size();
        if (t.outcome == trial::Outcome::OutOfMemory)
            points.push_back({space.encode(cand), prior(cand), true, limit});
        else if ((t.outcome == trial::Outcome::Ok || t.outcome == trial::Outcome::StoppedSlow) &&
                 t.peak_memory_bytes && *t.peak_memory_bytes > 0) // a trial stopped early: measured too
            points.push_back({space.encode(cand), prior(cand), false, *t.peak_memory_bytes});
        if (points.size() > before) ++by_kind[store::to_string(t.kind)];
        placed.emplace_back(t, std::move(cand));
    }
    if (!analytic) { // one constant for all, as the proposer does
        for (auto& p : points)
            p.prior_peak_bytes = 0.5 * limit;
        for (auto& [key, v] : prior_cache)
            v = 0.5 * limit;
    }
    model::CensoredMemoryModel m;
    m.fit(points, static_cast<int>(space.encode(base).size()));
    auto predict = [&](const space::Candidate& cand) {
        return m.predict(space.encode(cand), analytic ? prior(cand) : 0.5 * limit).mean_log;
    };

    const auto effect = knobs_by_effect(space, pool, base, predict, max_values);
    if (effect.empty()) return nullptr;
    const space::Knob* A = effect[0];
    const space::Knob* B = effect.size() > 1 ? effect[1] : nullptr;
    json j = {{"knobs", B ? json::array({A->name, B->name}) : json::array({A->name})},
              {"limit_bytes", limit},
              {"fitted_on", points.size()},
              {"fitted_by_kind", by_kind},
              {"cells", json::array()},
              {"trials", json::array()}};
    j["a_values"] = value_names(A);
    j["b_values"] = value_names(B);
    add_cells(j, pool, base, {A, B}, [&](const space::Candidate& cand) {
        return m.probability_over(space.encode(cand), prior(cand), limit);
    });
    add_trials(j, placed, {A, B});
    j["prior"] = analytic ? "analytic" : "constant";
    analytic_held = analytic == try_analytic;
    return j;
}
} // namespace

} // namespace infrarsi::report
