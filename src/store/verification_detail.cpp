#include "store/verification_detail.hpp"

#include "store/record_json.hpp"
#include "util/error.hpp"

#include <cmath>
#include <limits>

namespace infrarsi::store {

using nlohmann::json;

namespace {

// A number, or `otherwise` where JSON holds null (a NaN or an infinity is written as null).
double number(const json& v, double otherwise = std::numeric_limits<double>::quiet_NaN()) {
    return v.is_number() ? v.get<double>() : otherwise;
}

double number_at(const json& j, const char* key,
                 double otherwise = std::numeric_limits<double>::quiet_NaN()) {
    const auto it = j.find(key);
    return it != j.end() ? number(*it, otherwise) : otherwise;
}

// Present where the key is; NaN where it holds null.
std::optional<double> opt_number(const json& j, const char* key) {
    const auto it = j.find(key);
    return it != j.end() && (it->is_number() || it->is_null()) ? std::optional<double>(number(*it))
                                                               : std::nullopt;
}

template <typename T> std::optional<T> opt(const json& j, const char* key) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return std::nullopt;
    return it->get<T>();
}

// A number as the store writes it: JSON has no NaN or infinity, so those are null (read back as the field's
// "not known").
json num(double x) {
    return std::isfinite(x) ? json(x) : json(nullptr);
}

using internal::put;
using internal::to_json_array;

void put(json& j, const char* key, const std::optional<double>& v) {
    if (v) j[key] = num(*v);
}

std::vector<std::string> strings(const json& j, const char* key) {
    const auto it = j.find(key);
    return it != j.end() && it->is_array() ? it->get<std::vector<std::string>>() : std::vector<std::string>{};
}

const json& array_at(const json& j, const char* key) {
    static const json empty = json::array();
    const auto it = j.find(key);
    return it != j.end() && it->is_array() ? *it : empty;
}

PlannedPair planned_pair(const json& j) {
    return {j.value("pair", 0), j.value("order", ""), strings(j, "nodes"), opt<int>(j, "block"),
            opt<long long>(j, "seed")};
}

MeasuredPair measured_pair(const json& j) {
    MeasuredPair p;
    p.pair = opt<int>(j, "pair");
    p.order = opt<std::string>(j, "order");
    p.baseline_trial = opt<std::int64_t>(j, "baseline_trial");
    p.candidate_trial = opt<std::int64_t>(j, "candidate_trial");
    p.baseline_step_s = number_at(j, "baseline_step_s", 0);
    p.candidate_step_s = number_at(j, "candidate_step_s", 0);
    p.baseline_node = opt<std::string>(j, "baseline_node");
    p.candidate_node = opt<std::string>(j, "candidate_node");
    p.same_node = opt<bool>(j, "same_node");
    p.log_ratio = opt_number(j, "log_ratio");
    if (j.contains("nodes")) p.nodes = strings(j, "nodes");
    p.block = opt<int>(j, "block");
    p.seed = opt<long long>(j, "seed");
    return p;
}

std::vector<MeasuredPair> measured_pairs(const json& a) {
    std::vector<MeasuredPair> out;
    if (a.is_array())
        for (const auto& p : a)
            out.push_back(measured_pair(p));
    return out;
}

Look look(const json& j) {
    return {j.value("stage", ""),
            j.value("pairs", 0),
            j.value("counted", 0),
            j.value("set_aside", 0),
            number_at(j, "estimate"),
            number_at(j, "lo", -std::numeric_limits<double>::infinity()),
            number_at(j, "hi", std::numeric_limits<double>::infinity()),
            j.value("next", "")};
}

void put_stage(json& j, const VerificationStage& s) {
    if (!s.blocks.empty()) j["blocks"] = s.blocks;
    put(j, "order_seed", s.order_seed);
    if (!s.order_seeds.empty()) j["order_seeds"] = s.order_seeds;
    if (!s.plan.empty()) j["plan"] = to_json_array(s.plan);
    put(j, "next", s.next);
    if (s.spot_check) j["spot_check"] = to_json(*s.spot_check);
}

void read_stage(const json& j, VerificationStage& s) {
    for (const auto& b : array_at(j, "blocks"))
        s.blocks.push_back(b.get<std::int64_t>());
    s.order_seed = opt<std::uint64_t>(j, "order_seed");
    for (const auto& x : array_at(j, "order_seeds"))
        s.order_seeds.push_back(x.get<std::uint64_t>());
    for (const auto& p : array_at(j, "plan"))
        s.plan.push_back(planned_pair(p));
    s.next = opt<std::string>(j, "next");
    if (j.contains("spot_check") && j["spot_check"].is_object())
        s.spot_check = spot_check_from_json(j["spot_check"]);
}

Recheck recheck(const json& j) {
    Recheck r;
    read_stage(j, r);
    r.skipped = j.value("skipped", false);
    r.batch = opt<std::int64_t>(j, "batch");
    if (j.contains("pairs")) r.pairs = measured_pairs(j["pairs"]);
    r.speedup = opt_number(j, "speedup");
    if (j.contains("ci") && j["ci"].is_array() && j["ci"].size() == 2)
        r.ci = std::pair{number(j["ci"][0]), number(j["ci"][1])};
    if (j.contains("all_pairs") && j["all_pairs"].is_object()) {
        const auto& a = j["all_pairs"];
        const auto& ci = array_at(a, "ci");
        r.all_pairs = Recheck::AllPairs{number_at(a, "speedup", 0), ci.size() == 2 ? number(ci[0]) : 0,
                                        ci.size() == 2 ? number(ci[1]) : 0, a.value("pairs", 0)};
    }
    if (j.contains("reasons")) r.reasons = strings(j, "reasons");
    if (j.contains("evidence")) r.evidence = strings(j, "evidence");
    r.nodes = opt<int>(j, "nodes");
    return r;
}

MfuRecord mfu(const json& j) {
    MfuRecord m;
    m.peak_flops = number_at(j, "peak_flops", 0);
    m.peak_flops_source = j.value("peak_flops_source", "");
    m.peak_flops_by_job = j.value("peak_flops_by_job", false);
    m.model_flops_per_step = number_at(j, "model_flops_per_step", 0);
    m.baseline_step_s = number_at(j, "baseline_step_s", 0);
    m.candidate_step_s = number_at(j, "candidate_step_s", 0);
    m.baseline = opt<double>(j, "baseline");
    m.candidate = opt<double>(j, "candidate");
    m.unknown = opt<std::string>(j, "unknown");
    return m;
}

json to_json(const AblationChange& c) {
    json j = {{"kind", c.kind}, {"name", c.name}};
    put(j, "value", c.value);
    put(j, "baseline", c.baseline);
    put(j, "names", c.names);
    return j;
}

AblationChange ablation_change(const json& j) {
    AblationChange c{j.value("kind", ""), j.value("name", ""), opt<std::string>(j, "value"),
                     opt<std::string>(j, "baseline"), std::nullopt};
    if (j.contains("names")) c.names = strings(j, "names");
    return c;
}

AblationComponent ablation_component(const json& j) {
    AblationComponent c;
    c.change = ablation_change(j.value("change", json::object()));
    c.name = j.value("name", "");
    c.without = opt<std::string>(j, "without");
    c.state = j.value("state", "");
    c.effect = opt_number(j, "effect");
    c.lo = opt_number(j, "lo");
    c.hi = opt_number(j, "hi");
    c.carries = opt<bool>(j, "carries");
    c.measured_by = opt<std::string>(j, "measured_by");
    c.why = opt<std::string>(j, "why");
    if (j.contains("pairs")) {
        c.pairs.emplace();
        for (const auto& p : array_at(j, "pairs"))
            c.pairs->push_back({p.value("bundle_trial", std::int64_t{0}),
                                p.value("without_trial", std::int64_t{0}), number_at(p, "bundle_step_s", 0),
                                number_at(p, "without_step_s", 0)});
    }
    return c;
}

Ablation ablation(const json& j) {
    Ablation a;
    a.state = j.value("state", "");
    a.note = opt<std::string>(j, "note");
    for (const auto& c : array_at(j, "components"))
        a.components.push_back(ablation_component(c));
    for (const auto& s : array_at(j, "skipped"))
        a.skipped.push_back(
            {ablation_change(s.value("change", json::object())), s.value("name", ""), s.value("why", "")});
    a.rounds = opt<int>(j, "rounds");
    a.bundle = opt<std::string>(j, "bundle");
    a.batch_id = opt<std::int64_t>(j, "batch_id");
    return a;
}

} // namespace

json to_json(const PlannedPair& p) {
    json j = {{"pair", p.pair}, {"order", p.order}, {"nodes", p.nodes}};
    put(j, "block", p.block);
    put(j, "seed", p.seed);
    return j;
}

json to_json(const MeasuredPair& p) {
    json j = {{"baseline_step_s", num(p.baseline_step_s)}, {"candidate_step_s", num(p.candidate_step_s)}};
    put(j, "baseline_trial", p.baseline_trial);
    put(j, "candidate_trial", p.candidate_trial);
    put(j, "pair", p.pair);
    put(j, "order", p.order);
    put(j, "baseline_node", p.baseline_node);
    put(j, "candidate_node", p.candidate_node);
    put(j, "same_node", p.same_node);
    put(j, "log_ratio", p.log_ratio);
    put(j, "nodes", p.nodes);
    put(j, "block", p.block);
    put(j, "seed", p.seed);
    return j;
}

json to_json(const Look& l) {
    return {{"stage", l.stage},
            {"pairs", l.pairs},
            {"counted", l.counted},
            {"set_aside", l.set_aside},
            {"estimate", num(l.estimate)},
            {"lo", num(l.lo)},
            {"hi", num(l.hi)},
            {"next", l.next}};
}

json to_json(const std::vector<MeasuredPair>& pairs) {
    return to_json_array(pairs);
}

json to_json(const std::vector<Look>& looks) {
    return to_json_array(looks);
}

json to_json(const Recheck& r) {
    json j = json::object();
    put_stage(j, r);
    if (r.skipped) j["skipped"] = true;
    put(j, "batch", r.batch);
    if (r.pairs) j["pairs"] = to_json(*r.pairs);
    put(j, "speedup", r.speedup);
    if (r.ci) j["ci"] = json::array({num(r.ci->first), num(r.ci->second)});
    if (r.all_pairs)
        j["all_pairs"] = {{"speedup", num(r.all_pairs->speedup)},
                          {"ci", json::array({num(r.all_pairs->lo), num(r.all_pairs->hi)})},
                          {"pairs", r.all_pairs->pairs}};
    put(j, "reasons", r.reasons);
    put(j, "evidence", r.evidence);
    put(j, "nodes", r.nodes);
    return j;
}

json to_json(const MfuRecord& m) {
    json j = {{"peak_flops", num(m.peak_flops)},
              {"peak_flops_source", m.peak_flops_source},
              {"peak_flops_by_job", m.peak_flops_by_job},
              {"model_flops_per_step", num(m.model_flops_per_step)},
              {"baseline_step_s", num(m.baseline_step_s)},
              {"candidate_step_s", num(m.candidate_step_s)},
              {"baseline", m.baseline ? num(*m.baseline) : json(nullptr)},
              {"candidate", m.candidate ? num(*m.candidate) : json(nullptr)}};
    put(j, "unknown", m.unknown);
    return j;
}

json to_json(const AblationComponent& c) {
    json j = {{"change", to_json(c.change)}, {"name", c.name}, {"state", c.state}};
    put(j, "without", c.without);
    put(j, "effect", c.effect);
    put(j, "lo", c.lo);
    put(j, "hi", c.hi);
    put(j, "carries", c.carries);
    put(j, "measured_by", c.measured_by);
    put(j, "why", c.why);
    if (c.pairs)
        j["pairs"] = to_json_array(*c.pairs, [](const AblationPair& p) -> json {
            return {{"bundle_trial", p.bundle_trial},
                    {"without_trial", p.without_trial},
                    {"bundle_step_s", num(p.bundle_step_s)},
                    {"without_step_s", num(p.without_step_s)}};
        });
    return j;
}

json to_json(const Ablation& a) {
    json j = {{"state", a.state},
              {"components", to_json_array(a.components)},
              {"skipped", to_json_array(a.skipped, [](const AblationSkip& s) -> json {
                   return {{"change", to_json(s.change)}, {"name", s.name}, {"why", s.why}};
               })}};
    put(j, "note", a.note);
    put(j, "rounds", a.rounds);
    put(j, "bundle", a.bundle);
    put(j, "batch_id", a.batch_id);
    return j;
}

json to_json(const VerificationDetail& d) {
    json j = {{"version", kVerificationDetailVersion}};
    put(j, "search_trial", d.search_trial);
    if (d.equivalence) j["equivalence"] = to_json(*d.equivalence);
    if (d.not_equivalent) j["not_equivalent"] = true;
    if (!d.reasons.empty()) j["reasons"] = d.reasons;
    if (!d.evidence.empty()) j["evidence"] = d.evidence;
    put(j, "wall_left_s", d.wall_left_s);
    put(j, "trial_s", d.trial_s);
    put(j, "max_pairs", d.max_pairs);
    put(j, "alpha", d.alpha);
    put(j, "min_speedup", d.min_speedup);
    put_stage(j, d.first);
    if (d.recheck) j["recheck"] = to_json(*d.recheck);
    if (!d.sequence.empty()) j["sequence"] = to_json(d.sequence);
    if (d.mfu) j["mfu"] = to_json(*d.mfu);
    if (!d.pairs.empty()) j["pairs"] = to_json(d.pairs);
    put(j, "pairs_counted", d.pairs_counted);
    put(j, "order_effect", d.order_effect);
    put(j, "mde", d.mde);
    put(j, "reproduced", d.reproduced);
    if (d.ablation) j["ablation"] = to_json(*d.ablation);
    return j;
}

VerificationDetail verification_detail_from_json(const json& j) {
    VerificationDetail d;
    if (!j.is_object()) return d;
    if (const int v = j.value("version", 1); v > kVerificationDetailVersion)
        throw Error("a verification's detail of version " + std::to_string(v) +
                        ", newer than this build understands",
                    "campaign.db",
                    "version <= " + std::to_string(kVerificationDetailVersion) + " (upgrade infrarsi)");
    d.search_trial = opt<std::int64_t>(j, "search_trial");
    if (j.contains("equivalence") && j["equivalence"].is_object())
        d.equivalence = equivalence_check_from_json(j["equivalence"]);
    d.not_equivalent = j.value("not_equivalent", false);
    d.reasons = strings(j, "reasons");
    d.evidence = strings(j, "evidence");
    d.wall_left_s = opt_number(j, "wall_left_s");
    d.trial_s = opt_number(j, "trial_s");
    d.max_pairs = opt<int>(j, "max_pairs");
    d.alpha = opt_number(j, "alpha");
    d.min_speedup = opt_number(j, "min_speedup");
    read_stage(j, d.first);
    if (j.contains("recheck") && j["recheck"].is_object()) d.recheck = recheck(j["recheck"]);
    for (const auto& l : array_at(j, "sequence"))
        d.sequence.push_back(look(l));
    if (j.contains("mfu") && j["mfu"].is_object()) d.mfu = mfu(j["mfu"]);
    d.pairs = measured_pairs(j.value("pairs", json::array()));
    d.pairs_counted = opt<int>(j, "pairs_counted");
    d.order_effect = opt_number(j, "order_effect");
    d.mde = opt_number(j, "mde");
    d.reproduced = opt<bool>(j, "reproduced");
    if (j.contains("ablation") && j["ablation"].is_object()) d.ablation = ablation(j["ablation"]);
    return d;
}

} // namespace infrarsi::store
