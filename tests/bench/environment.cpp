#include "environment.hpp"

#include "util/error.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

namespace infrarsi::bench {

using nlohmann::json;

int Environment::find(const model::Configuration& c) const {
    auto it = by_id_.find(encoding().describe(c));
    return it == by_id_.end() ? -1 : it->second;
}

void Environment::index_configurations() {
    by_id_.clear();
    for (int i = 0; i < size(); ++i)
        by_id_[candidates()[i].id] = i;
}

double Environment::best_feasible_time() const {
    double best = std::numeric_limits<double>::infinity();
    for (int i = 0; i < size(); ++i)
        if (feasible(i)) best = std::min(best, true_step_time(i));
    return best;
}

SimulatorEnvironment::SimulatorEnvironment(model::SimulatorSpec spec) : sim_(std::move(spec)) {
    index_configurations();
}

namespace {

model::MemoryEffect parse_effect(const std::string& s, const std::string& where) {
    if (s == "none") return model::MemoryEffect::none;
    if (s == "increasing") return model::MemoryEffect::increasing;
    if (s == "decreasing") return model::MemoryEffect::decreasing;
    if (s == "unordered") return model::MemoryEffect::unordered;
    if (s == "unknown") return model::MemoryEffect::unknown;
    throw Error("memory effect '" + s + "'", where, "none, increasing, decreasing, unordered or unknown");
}

std::string effect_name(model::MemoryEffect e) {
    switch (e) {
    case model::MemoryEffect::none:
        return "none";
    case model::MemoryEffect::increasing:
        return "increasing";
    case model::MemoryEffect::decreasing:
        return "decreasing";
    case model::MemoryEffect::unordered:
        return "unordered";
    case model::MemoryEffect::unknown:
        return "unknown";
    }
    return "none";
}

model::Configuration parse_config(const json& j) {
    model::Configuration c;
    for (const auto& [k, v] : j.at("knobs").items())
        c.knobs[k] = v.is_string() ? v.get<std::string>() : v.dump();
    for (const auto& p : j.value("patches", json::array()))
        c.patches.insert(p.get<std::string>());
    return c;
}

} // namespace

RecordedTableEnvironment::RecordedTableEnvironment(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw Error("cannot open table", path);
    std::string line;
    int lineno = 0;
    json header;
    std::vector<double> priors;
    while (std::getline(in, line)) {
        ++lineno;
        if (line.empty()) continue;
        const std::string where = path + ":" + std::to_string(lineno);
        json j;
        try {
            j = json::parse(line);
        } catch (const json::exception& e) {
            throw Error(std::string("not JSON: ") + e.what(), where, "one JSON object per line");
        }
        try {
            if (header.is_null()) {
                if (j.value("format", "") != "infrarsi-bench-table/1")
                    throw Error("missing or unknown format", where, "\"format\": \"infrarsi-bench-table/1\"");
                header = j;
                name_ = j.at("table").get<std::string>();
                limit_ = j.at("memory_limit_bytes").get<double>();
                noise_variance_ = j.at("noise_variance").get<double>();
                steps_ = j.at("trial_steps").get<double>();
                startup_ = j.at("startup_s").get<double>();
                std::vector<model::KnobSpec> knobs;
                for (const auto& k : j.at("knobs")) {
                    model::KnobSpec s;
                    s.name = k.at("name").get<std::string>();
                    std::string kind = k.at("kind").get<std::string>();
                    if (kind != "power_of_two" && kind != "choice")
                        throw Error("knob kind '" + kind + "'", where, "power_of_two or choice");
                    s.kind = kind == "power_of_two" ? model::KnobSpec::Kind::power_of_two
                                                    : model::KnobSpec::Kind::choice;
                    for (const auto& v : k.at("values"))
                        s.values.push_back(v.is_string() ? v.get<std::string>() : v.dump());
                    s.memory = parse_effect(k.value("memory", "none"), where);
                    s.memory_saver = k.value("saver", false);
                    knobs.push_back(s);
                }
                std::vector<model::PatchSpec> patches;
                for (const auto& p : j.value("patches", json::array()))
                    patches.push_back({p.at("name").get<std::string>(),
                                       parse_effect(p.value("memory", "none"), where),
                                       p.value("saver", false)});
                encoding_ = std::make_unique<model::FeatureEncoding>(knobs, patches);
                continue;
            }
            configs_.push_back(parse_config(j));
            // A table of a job without a memory estimate has no priors at all; a partial set is an error.
            const bool has_prior = j.contains("prior_peak_bytes");
            if (configs_.size() == 1) analytic_prior_ = has_prior;
            if (has_prior != analytic_prior_)
                throw Error("prior_peak_bytes on some configurations only", where,
                            "on every configuration, or on none (no memory estimate)");
            priors.push_back(has_prior ? j.at("prior_peak_bytes").get<double>() : 0.5 * limit_);
            std::vector<model::TrialObservation> reps;
            for (const auto& r : j.at("repeats")) {
                model::TrialObservation t;
                t.candidate = static_cast<int>(configs_.size()) - 1;
                std::string outcome = r.at("outcome").get<std::string>();
                if (outcome == "ok") {
                    t.outcome = model::ObservationKind::ok;
                    t.step_time_s = r.at("step_time_s").get<double>();
                    t.peak_bytes = r.value("peak_bytes", 0.0);
                } else if (outcome == "oom") {
                    t.outcome = model::ObservationKind::oom;
                } else if (outcome == "failed") {
                    // The job's own failure (a crash, a broken contract), as a campaign records it.
                    t.outcome = model::ObservationKind::infeasible;
                } else if (outcome == "timeout") {
                    // Killed at the time limit; the steps it timed are a lower bound of its step time.
                    t.outcome = model::ObservationKind::timeout;
                    t.step_time_s = r.value("step_time_s", 0.0);
                    t.step_time_censored = t.step_time_s > 0;
                } else {
                    throw Error("outcome '" + outcome + "'", where, "ok, oom, timeout or failed");
                }
                t.cost_s = r.at("cost_s").get<double>();
                reps.push_back(t);
            }
            if (reps.empty()) throw Error("configuration without repeats", where, "at least one repeat");
            repeats_.push_back(std::move(reps));
        } catch (const json::exception& e) {
            throw Error(std::string("bad table line: ") + e.what(), where);
        }
    }
    if (header.is_null() || configs_.empty())
        throw Error("empty table", path, "a header line and configurations");
    candidates_ = model::build_candidates(*encoding_, configs_, priors);
    index_configurations();
    for (const auto& reps : repeats_) {
        std::vector<double> times;
        for (const auto& r : reps)
            if (r.outcome == model::ObservationKind::ok) times.push_back(r.step_time_s);
        // Feasible when most repeats ran; its time is the median of the successful ones.
        feasible_.push_back(times.size() * 2 > reps.size());
        std::sort(times.begin(), times.end());
        true_time_.push_back(times.empty() ? std::numeric_limits<double>::infinity()
                                           : times[times.size() / 2]);
    }
    baseline_ = find(parse_config(header.at("baseline")));
    if (baseline_ < 0) throw Error("baseline is not among the configurations", path);
}

model::TrialObservation RecordedTableEnvironment::run(int i, std::mt19937_64& rng) const {
    const auto& reps = repeats_.at(i);
    std::uniform_int_distribution<size_t> pick(0, reps.size() - 1);
    model::TrialObservation t = reps[pick(rng)];
    t.candidate = i;
    return t;
}

std::string prior_variant_name(PriorVariant v) {
    switch (v) {
    case PriorVariant::given:
        return "given";
    case PriorVariant::none:
        return "none";
    case PriorVariant::half:
        return "half";
    case PriorVariant::twice:
        return "double";
    }
    return "given";
}

PriorVariantEnvironment::PriorVariantEnvironment(const Environment& env, PriorVariant variant)
    : env_(env), variant_(variant), candidates_(env.candidates()) {
    for (auto& c : candidates_)
        switch (variant) {
        case PriorVariant::given:
            break;
        case PriorVariant::none:
            c.prior_peak_bytes = 0.5 * env.memory_limit_bytes();
            break;
        case PriorVariant::half:
            c.prior_peak_bytes *= 0.5;
            break;
        case PriorVariant::twice:
            c.prior_peak_bytes *= 2;
            break;
        }
    index_configurations();
}

void write_table(const Environment& env, const std::string& path, int repeats, std::uint64_t seed) {
    std::ofstream out(path);
    if (!out) throw Error("cannot write table", path);
    const auto& enc = env.encoding();
    json header = {{"format", "infrarsi-bench-table/1"},
                   {"table", env.name()},
                   {"memory_limit_bytes", env.memory_limit_bytes()},
                   {"noise_variance", env.noise_variance()},
                   {"trial_steps", env.trial_steps()},
                   {"startup_s", env.startup_s()},
                   {"knobs", json::array()},
                   {"patches", json::array()}};
    for (const auto& k : enc.knobs())
        header["knobs"].push_back(
            {{"name", k.name},
             {"kind", k.kind == model::KnobSpec::Kind::power_of_two ? "power_of_two" : "choice"},
             {"values", k.values},
             {"memory", effect_name(k.memory)},
             {"saver", k.memory_saver}});
    for (const auto& p : enc.patches())
        header["patches"].push_back(
            {{"name", p.name}, {"memory", effect_name(p.memory)}, {"saver", p.memory_saver}});
    auto config_json = [](const model::Configuration& c) {
        return json{{"knobs", c.knobs},
                    {"patches", std::vector<std::string>(c.patches.begin(), c.patches.end())}};
    };
    header["baseline"] = config_json(env.configuration(env.baseline()));
    out << header.dump() << "\n";
    std::mt19937_64 rng(seed);
    for (int i = 0; i < env.size(); ++i) {
        json row = config_json(env.configuration(i));
        if (env.analytic_prior()) row["prior_peak_bytes"] = env.candidates()[i].prior_peak_bytes;
        row["features"] =
            std::vector<double>(env.candidates()[i].features.data(),
                                env.candidates()[i].features.data() + env.candidates()[i].features.size());
        json reps = json::array();
        for (int r = 0; r < repeats; ++r) {
            auto t = env.run(i, rng);
            json rj = {{"outcome", t.outcome == model::ObservationKind::ok        ? "ok"
                                   : t.outcome == model::ObservationKind::oom     ? "oom"
                                   : t.outcome == model::ObservationKind::timeout ? "timeout"
                                                                                  : "failed"},
                       {"cost_s", t.cost_s}};
            if (t.outcome == model::ObservationKind::ok)
                rj["step_time_s"] = t.step_time_s, rj["peak_bytes"] = t.peak_bytes;
            reps.push_back(rj);
        }
        row["repeats"] = reps;
        out << row.dump() << "\n";
    }
}

} // namespace infrarsi::bench
