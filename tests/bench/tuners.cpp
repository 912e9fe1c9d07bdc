#include "tuners.hpp"

#include "util/error.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <numeric>

namespace infrarsi::bench {

using nlohmann::json;

ModelTuner::ModelTuner(const Environment& env, int q, std::uint64_t seed, std::vector<int> hints)
    : env_(env), q_(q) {
    settings_.memory_limit_bytes = env.memory_limit_bytes();
    settings_.noise_variance = env.noise_variance();
    settings_.min_detectable_effect = 0.02;
    settings_.trial_steps = env.trial_steps();
    settings_.trial_overhead_s = env.startup_s();
    settings_.hints = std::move(hints);
    if (std::find(settings_.hints.begin(), settings_.hints.end(), env.baseline()) == settings_.hints.end())
        settings_.hints.push_back(env.baseline());
    settings_.seed = seed;
    settings_.edges.unknown_ordered = env.encoding().memory_unknown_ordered();
    settings_.edges.feature_names = env.encoding().names();
    // The baseline's one-knob neighbours open the initial design, as in a campaign
    // (search::baseline_neighbours): adjacent values of a power-of-two knob, every other value of a choice,
    // each patch switched; one move of each knob and patch before a second move of any.
    const auto& enc = env.encoding();
    const auto base = env.configuration(env.baseline());
    std::vector<std::vector<int>> groups;
    for (const auto& k : enc.knobs()) {
        const auto at = std::find(k.values.begin(), k.values.end(), base.knobs.at(k.name));
        if (at == k.values.end()) continue;
        const auto i = at - k.values.begin();
        groups.emplace_back();
        for (std::ptrdiff_t j = 0; j < static_cast<std::ptrdiff_t>(k.values.size()); ++j) {
            if (j == i || (k.kind == model::KnobSpec::Kind::power_of_two && std::abs(j - i) != 1)) continue;
            auto c = base;
            c.knobs[k.name] = k.values[static_cast<std::size_t>(j)];
            if (const int idx = env.find(c); idx >= 0) groups.back().push_back(idx);
        }
    }
    for (const auto& p : enc.patches()) {
        auto c = base;
        if (!c.patches.erase(p.name)) c.patches.insert(p.name);
        if (const int idx = env.find(c); idx >= 0) groups.push_back({idx});
    }
    for (std::size_t round = 0, added = 1; added > 0; ++round) {
        added = 0;
        for (const auto& g : groups)
            if (round < g.size()) settings_.initial_design.push_back(g[round]), ++added;
    }
}

std::vector<int> ModelTuner::ask() {
    std::vector<int> out;
    for (const auto& p : proposer_.propose(env_.candidates(), trials_, q_, settings_))
        out.push_back(p.candidate);
    return out;
}

RandomTuner::RandomTuner(const Environment& env, std::uint64_t seed) : order_(env.size()), rng_(seed) {
    std::iota(order_.begin(), order_.end(), 0);
}

std::vector<int> RandomTuner::ask() {
    if (next_ >= order_.size()) return {};
    std::uniform_int_distribution<size_t> pick(next_, order_.size() - 1);
    std::swap(order_[next_], order_[pick(rng_)]);
    return {order_[next_++]};
}

GreedyTuner::GreedyTuner(const Environment& env, std::uint64_t seed, double mde) : env_(env), mde_(mde) {
    const int k = static_cast<int>(env.encoding().knobs().size());
    const int p = static_cast<int>(env.encoding().patches().size());
    coordinates_.resize(k + p);
    std::iota(coordinates_.begin(), coordinates_.end(), 0);
    std::mt19937_64 rng(seed);
    std::shuffle(coordinates_.begin(), coordinates_.end(), rng);
    current_index_ = env.baseline();
    current_ = env.configuration(current_index_);
}

void GreedyTuner::plan_coordinate() {
    const auto& enc = env_.encoding();
    const int k = static_cast<int>(enc.knobs().size());
    int c = coordinates_[position_];
    std::vector<model::Configuration> alternatives;
    if (c < k) {
        const auto& knob = enc.knobs()[c];
        for (const auto& v : knob.values) {
            if (v == current_.knobs.at(knob.name)) continue;
            auto a = current_;
            a.knobs[knob.name] = v;
            alternatives.push_back(a);
        }
    } else {
        const auto& patch = enc.patches()[c - k].name;
        auto a = current_;
        if (a.patches.count(patch))
            a.patches.erase(patch);
        else
            a.patches.insert(patch);
        alternatives.push_back(a);
    }
    pending_.clear();
    for (const auto& a : alternatives) {
        int i = env_.find(a);
        if (i >= 0) pending_.push_back(i);
    }
}

std::vector<int> GreedyTuner::ask() {
    if (!seen_.count(current_index_)) return {current_index_};
    while (!done_) {
        if (!planned_) plan_coordinate(), planned_ = true;
        for (int i : pending_)
            if (!seen_.count(i)) return {i};
        // Every alternative of this coordinate is measured: move only for a clear win.
        int best = current_index_;
        for (int i : pending_)
            if (seen_.at(i) < seen_.at(best) - std::log1p(mde_)) best = i;
        if (best != current_index_) {
            current_index_ = best;
            current_ = env_.configuration(best);
            ++moves_in_pass_;
        }
        planned_ = false;
        if (++position_ >= coordinates_.size()) {
            done_ = moves_in_pass_ == 0;
            moves_in_pass_ = 0;
            position_ = 0;
        }
    }
    return {};
}

void GreedyTuner::tell(const model::TrialObservation& t) {
    seen_[t.candidate] = t.outcome == model::ObservationKind::ok ? std::log(t.step_time_s)
                                                                 : std::numeric_limits<double>::infinity();
}

TpeTuner::TpeTuner(const Environment& env, PipeChild& adapter, std::uint64_t seed, std::string sampler, int q)
    : env_(env), adapter_(adapter), sampler_(std::move(sampler)), q_(std::max(1, q)) {
    json space = json::object();
    for (const auto& k : env.encoding().knobs())
        space[k.name] = k.values;
    for (const auto& p : env.encoding().patches())
        space[p.name] = std::vector<std::string>{"off", "on"};
    auto base = env.configuration(env.baseline());
    json enqueue = json::object();
    for (const auto& [k, v] : base.knobs)
        enqueue[k] = v;
    for (const auto& p : env.encoding().patches())
        enqueue[p.name] = base.patches.count(p.name) ? "on" : "off";
    adapter_.send(json{
        {"cmd", "new_study"}, {"seed", seed}, {"sampler", sampler_}, {"space", space}, {"enqueue", enqueue}}
                      .dump());
    auto reply = json::parse(adapter_.receive());
    if (!reply.value("ok", false))
        throw Error("optuna adapter refused the study: " + reply.dump(), "TpeTuner");
}

std::vector<int> TpeTuner::ask() {
    std::vector<int> out;
    for (int attempt = 0; attempt < 2000 && static_cast<int>(out.size()) < q_; ++attempt) {
        adapter_.send(R"({"cmd":"ask"})");
        auto reply = json::parse(adapter_.receive());
        if (reply.value("exhausted", false)) break; // the sampler has tried all it will
        const long number = reply.at("number").get<long>();
        model::Configuration c;
        const auto& params = reply.at("params");
        for (const auto& k : env_.encoding().knobs())
            c.knobs[k.name] = params.at(k.name).get<std::string>();
        for (const auto& p : env_.encoding().patches())
            if (params.at(p.name).get<std::string>() == "on") c.patches.insert(p.name);
        int i = env_.find(c);
        if (i >= 0) {
            out.push_back(i);
            pending_.push_back(number);
            continue;
        }
        ++invalid_;
        adapter_.send(json{{"cmd", "tell"}, {"number", number}, {"state", "invalid"}}.dump());
        adapter_.receive();
    }
    return out;
}

void TpeTuner::tell(const model::TrialObservation& t) {
    if (pending_.empty()) throw Error("a result told for no pending trial", "TpeTuner::tell");
    json msg = {{"cmd", "tell"}, {"number", pending_.front()}};
    pending_.erase(pending_.begin());
    if (t.outcome == model::ObservationKind::ok)
        msg["state"] = "complete", msg["value"] = std::log(t.step_time_s);
    else if (t.outcome == model::ObservationKind::oom)
        msg["state"] = "infeasible";
    else
        msg["state"] = "fail";
    adapter_.send(msg.dump());
    adapter_.receive();
}

RunResult run(const Environment& env, Tuner& tuner, const RunLimits& limits, std::uint64_t seed) {
    RunResult r;
    const double threshold = 1.05 * env.best_feasible_time();
    std::mt19937_64 rng(seed * 7919 + 17);
    double best = std::numeric_limits<double>::infinity();
    int n = 0;
    double cost = 0;
    // A run stops once it has reached 5% and read its fixed-budget best, or at its limit.
    while (n < limits.search_limit && (n < limits.fixed_budget || r.to_5pct == 0)) {
        auto batch = tuner.ask();
        if (batch.empty()) break;
        for (int i : batch) {
            auto t = env.run(i, rng);
            tuner.tell(t);
            r.history.push_back(t);
            ++n;
            cost += t.cost_s;
            if (n <= limits.budget) {
                r.trials = n;
                r.cost_s = cost;
                if (t.outcome == model::ObservationKind::oom) ++r.ooms;
                if (t.outcome == model::ObservationKind::timeout) ++r.timeouts;
                if (t.outcome == model::ObservationKind::infeasible ||
                    t.outcome == model::ObservationKind::failed)
                    ++r.crashes;
                if (t.outcome != model::ObservationKind::ok) r.wasted_s += t.cost_s;
            }
            if (t.outcome == model::ObservationKind::ok) best = std::min(best, env.true_step_time(i));
            if (n == limits.fixed_budget) r.best_at_fixed = best;
            if (r.to_5pct == 0 && t.outcome == model::ObservationKind::ok &&
                env.true_step_time(i) <= threshold)
                r.to_5pct = n, r.cost_to_5pct_s = cost;
        }
    }
    if (n < limits.fixed_budget) r.best_at_fixed = best;
    r.invalid = tuner.invalid_asks();
    return r;
}

double quantile(std::vector<double> v, double q) {
    if (v.empty()) return NAN;
    std::sort(v.begin(), v.end());
    double pos = q * (v.size() - 1);
    size_t lo = static_cast<size_t>(std::floor(pos)), hi = static_cast<size_t>(std::ceil(pos));
    return v[lo] + (pos - lo) * (v[hi] - v[lo]);
}

TrialsToTarget trials_to_target(const std::vector<RunResult>& runs, int limit) {
    TrialsToTarget s;
    s.runs = static_cast<int>(runs.size());
    s.limit = limit;
    std::vector<double> t;
    int trials = 0, ooms = 0, crashes = 0, timeouts = 0;
    for (const auto& r : runs) {
        s.reached += r.to_5pct > 0;
        t.push_back(r.to_5pct > 0 ? r.to_5pct : limit + 1);
        trials += r.trials;
        ooms += r.ooms;
        crashes += r.crashes;
        timeouts += r.timeouts;
    }
    s.median = quantile(t, 0.5), s.q25 = quantile(t, 0.25), s.q75 = quantile(t, 0.75);
    s.oom_fraction = trials ? double(ooms) / trials : 0;
    s.crash_fraction = trials ? double(crashes) / trials : 0;
    s.timeout_fraction = trials ? double(timeouts) / trials : 0;
    return s;
}

std::string trials_text(double v, int limit) {
    return v > limit ? fmt::format(">{}", limit) : fmt::format("{:.0f}", v);
}

std::string trials_text(const TrialsToTarget& t) {
    return fmt::format("{} [{}-{}]", trials_text(t.median, t.limit), trials_text(t.q25, t.limit),
                       trials_text(t.q75, t.limit));
}

} // namespace infrarsi::bench
