#include "campaign/experience.hpp"

#include "util/json_field.hpp"

#include "measure/statistics.hpp"
#include "node/allocation_record.hpp"
#include "node/topology.hpp"
#include "space/capacity.hpp"
#include "util/error.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fmt/core.h>
#include <map>
#include <set>
#include <unistd.h>

namespace infrarsi::campaign {
namespace {

std::string baseline_tree_hash(const CampaignView& c) {
    for (const auto& l : c.store->locks())
        if (l.kind == "tree") return l.hash.substr(0, 16);
    return "unknown";
}

double memory_limit(const CampaignView& c) {
    return static_cast<double>(contract::modeled_memory_limit_bytes(c.contract->resources));
}

std::optional<double> estimate(const CampaignView& c, const space::Candidate& x) {
    return c.memory_estimate ? c.memory_estimate(x) : std::nullopt;
}

} // namespace

bank::HardwareKey campaign_hardware(const CampaignView& c, const std::string& spool_dir) {
    bank::HardwareKey key;
    bool found = false;
    if (!spool_dir.empty()) {
        auto path = std::filesystem::path(spool_dir) / "allocations.jsonl";
        if (std::filesystem::exists(path)) {
            auto read = node::read_records(path.string());
            if (!read.records.empty()) {
                key.topology = read.records.front().topology;
                found = true;
            }
        }
    }
    if (!found) key.topology = node::topology_from_live();
    key.stack = bank::current_software_stack(c.contract->name + "@" + baseline_tree_hash(c));
    return key;
}

namespace {

bank::Finding make_finding(const CampaignView& c, const std::string& kind, bool verified,
                           nlohmann::json content, std::vector<std::int64_t> trials) {
    bank::Finding f;
    f.kind = kind;
    f.workload = c.contract->name;
    f.verified = verified;
    f.content = std::move(content);
    f.campaign = c.id;
    f.trials = std::move(trials);
    return f;
}

// Each change's own effect as its ablation measured it (ablation_stage.cpp), by "knob:NAME" / "patch:ID".
// Knobs a constraint ties together were removed together: each gets the group's effect, and says so.
std::map<std::string, store::AblationComponent> ablated_effects(const store::VerificationRow& v) {
    std::map<std::string, store::AblationComponent> measured;
    if (!v.detail.ablation) return measured;
    for (const auto& comp : v.detail.ablation->components) {
        measured[comp.change.kind + ":" + comp.change.name] = comp;
        for (const auto& name : comp.change.names.value_or(std::vector<std::string>{})) {
            auto shared = comp;
            if (shared.state == "measured")
                shared.measured_by =
                    "ablation, together with the knobs a constraint ties it to: " + comp.change.name;
            measured["knob:" + name] = shared;
        }
    }
    return measured;
}

// A promoted verification's findings: its setting (with its memory as a ratio of the limit it ran under),
// and each change's own effect: the bundle's speed-up only for a bundle of one change; a change of a larger
// bundle gets what its ablation measured, or no speed-up (unverified) when that was not measured. Never the
// bundle's speed-up credited to every part of it.
void add_promoted_findings(std::vector<bank::Finding>& out, const CampaignView& c,
                           const store::VerificationRow& v, double limit) {
    auto& st = *c.store;
    std::vector<std::int64_t> support;
    double peak = 0;
    for (const auto& t : st.trials()) {
        if (t.verification_id != v.id) continue;
        support.push_back(t.id);
        // The change's own memory: its candidate runs (not the baseline's, nor a spot check's run without its
        // patches).
        if (t.kind == store::TrialKind::VerifyCandidate)
            peak = std::max(peak, t.peak_memory_bytes.value_or(0));
    }
    auto cand = space::Candidate::from_json(v.candidate);
    nlohmann::json content = {
        {"candidate", v.candidate}, {"knobs", v.candidate.value("knobs", nlohmann::json::object())},
        {"patches", cand.patches},  {"speedup", v.speedup.value_or(0)},
        {"lo", v.lo.value_or(0)},   {"hi", v.hi.value_or(0)}};
    // Capacity as a rule relative to memory: the verified peak over the limit it ran under, that limit, and
    // how far the contract's estimate was from the measured peak (where there is an estimate).
    if (peak > 0 && limit > 0) {
        content["memory_ratio"] = peak / limit;
        content["limit_bytes"] = limit;
        if (auto est = estimate(c, cand); est && *est > 0) content["estimate_factor"] = peak / *est;
    }
    // A limit per GPU ([resources] gpu_mem): capacity settings carry to other GPUs by it.
    if (const auto gpu = c.contract->resources.gpu_mem_bytes; gpu > 0)
        content["gpu_limit_bytes"] = static_cast<double>(gpu);
    out.push_back(make_finding(c, "knob_setting", true, content, support));
    const auto measured = ablated_effects(v);
    auto number = [](const std::optional<double>& x) { return x ? nlohmann::json(*x) : nlohmann::json(); };
    auto own_effect = [&](const std::string& key, nlohmann::json effect, const std::string& kind) {
        std::vector<std::int64_t> trials = support;
        const auto it = measured.find(key);
        const bool ok = it != measured.end() && it->second.state == "measured";
        if (ok) {
            const auto& comp = it->second;
            effect["speedup"] = number(comp.effect);
            effect["lo"] = number(comp.lo);
            effect["hi"] = number(comp.hi);
            effect["measured_by"] = comp.measured_by ? nlohmann::json(*comp.measured_by) : nlohmann::json();
            for (const auto& pr : comp.pairs.value_or(std::vector<store::AblationPair>{})) {
                trials.push_back(pr.bundle_trial);
                trials.push_back(pr.without_trial);
            }
        } else {
            effect["measured_by"] = "not measured: part of a bundle whose ablation did not measure it";
        }
        effect["bundle_speedup"] = v.speedup.value_or(0);
        if (content.contains("memory_ratio")) effect["memory_ratio"] = content["memory_ratio"];
        out.push_back(make_finding(c, kind, ok, effect, trials));
    };
    const auto base = c.contract->space.baseline();
    for (const auto& [name, value] : cand.knobs) {
        const auto b = base.knobs.find(name);
        if (b == base.knobs.end() || b->second == value) continue;
        own_effect(
            "knob:" + name,
            {{"knob", name}, {"value", space::env_value(value)}, {"baseline", space::env_value(b->second)}},
            "knob_effect");
    }
    for (const auto& p : cand.patches) {
        std::vector<std::string> others;
        for (const auto& q : cand.patches)
            if (q != p) others.push_back(q);
        own_effect("patch:" + p, {{"patch", p}, {"composes_with", others}}, "patch_effect");
    }
}

// Memory: where the limit was hit, and how far the analytic estimate is from measured peaks.
void add_memory_findings(std::vector<bank::Finding>& out, const CampaignView& c, double limit) {
    std::vector<double> ratios;
    std::vector<std::int64_t> ratio_trials;
    for (const auto& t : c.store->trials({.state = store::TrialState::Finished})) {
        auto cand = space::Candidate::from_json(t.candidate);
        if (t.outcome == trial::Outcome::OutOfMemory) {
            out.push_back(make_finding(c, "oom_threshold", false,
                                       {{"candidate", t.candidate}, {"limit_bytes", limit}}, {t.id}));
            continue;
        }
        if (t.outcome != trial::Outcome::Ok || !t.peak_memory_bytes) continue;
        if (auto est = estimate(c, cand); est && *est > 0) {
            ratios.push_back(*t.peak_memory_bytes / *est);
            ratio_trials.push_back(t.id);
        }
    }
    if (!ratios.empty())
        out.push_back(make_finding(c, "memory_correction", ratios.size() >= 3,
                                   {{"factor", measure::median(ratios)}, {"trials", ratios.size()}},
                                   ratio_trials));
}

// The agent's calibration: its claims against what trials measured, for its next campaign on hardware like
// this one (keyed by the agent's name, not the workload: how far an agent's claims are off).
std::optional<bank::Finding> agent_calibration_finding(const CampaignView& c) {
    if (c.agent_speed_pairs.empty() && c.agent_memory_pairs.empty()) return std::nullopt;
    auto pairs = [](const std::vector<model::ClaimPair>& v) {
        nlohmann::json a = nlohmann::json::array();
        for (const auto& p : v)
            a.push_back({{"claimed", p.claimed}, {"measured", p.measured}});
        return a;
    };
    auto f = make_finding(c, "agent_calibration", true,
                          {{"agent", c.contract->agent.name},
                           {"speedup", pairs(c.agent_speed_pairs)},
                           {"memory", pairs(c.agent_memory_pairs)}},
                          {});
    f.workload = agent_bank_workload(c.contract->agent.name);
    return f;
}

} // namespace

std::vector<bank::Finding> campaign_findings(const CampaignView& c) {
    std::vector<bank::Finding> out;
    auto& st = *c.store;
    const double limit = memory_limit(c);
    std::set<std::int64_t> promoted;
    for (const auto& [vid, key] : st.promotions())
        promoted.insert(vid);
    for (const auto& v : st.verifications())
        if (v.promoted && promoted.count(v.id)) add_promoted_findings(out, c, v, limit);
    add_memory_findings(out, c, limit);
    if (auto d = st.baseline())
        out.push_back(make_finding(c, "noise", true,
                                   {{"cv", d->cv_between}, {"mde", d->minimum_detectable_effect}}, {}));
    if (auto f = agent_calibration_finding(c)) out.push_back(std::move(*f));
    return out;
}

std::string agent_bank_workload(const std::string& agent_name) {
    return "agent:" + agent_name;
}

AgentBankPairs agent_pairs_from_bank(bank::ExperienceBank& bank, const std::string& agent_name,
                                     const bank::HardwareKey& here, std::size_t max_pairs) {
    AgentBankPairs out;
    auto read = [&](const nlohmann::json& list, std::vector<model::ClaimPair>& into) {
        if (!list.is_array()) return;
        for (const auto& p : list) {
            if (into.size() >= max_pairs) return;
            const double claimed = json_number_or(p, "claimed", 0),
                         measured = json_number_or(p, "measured", 0);
            if (claimed > 0 && measured > 0) into.push_back({claimed, measured});
        }
    };
    for (const auto& prior : bank.priors(here, agent_bank_workload(agent_name), store::now_seconds())) {
        if (prior.finding.kind != "agent_calibration" || prior.hypothesis) continue;
        ++out.findings;
        read(prior.finding.content.value("speedup", nlohmann::json::array()), out.speed);
        read(prior.finding.content.value("memory", nlohmann::json::array()), out.memory);
    }
    return out;
}

BankIngest ingest_into_bank(bank::ExperienceBank& bank, const CampaignView& c, const std::string& spool_dir) {
    const auto hardware = campaign_hardware(c, spool_dir);
    const auto records = std::filesystem::path(spool_dir) / "allocations.jsonl";
    if (!spool_dir.empty() && std::filesystem::exists(records)) {
        bank.ingest_allocation_records(records.string(), hardware.stack);
    } else {
        char host[256] = {};
        ::gethostname(host, sizeof host - 1);
        bank.upsert_hardware(hardware, host);
    }
    BankIngest r;
    for (auto& f : campaign_findings(c)) {
        if (bank.add_finding(hardware, std::move(f)))
            ++r.added;
        else
            ++r.known;
    }
    c.store->log(fmt::format("bank: {} findings added, {} already known", r.added, r.known));
    return r;
}

namespace {

// A verified setting carried to this campaign's memory: by the capacity rule per GPU where either side has a
// limit per GPU and there is no estimate; else, with an estimate, to the largest neighbour that keeps the
// verified peak-to-limit ratio; else with the memory limit. Nullopt when it cannot be carried (its settings
// may not fit). `adapted`: what was changed, for the seed's reason; `rule`: the provenance's capacity rule.
struct Carried {
    space::Candidate candidate;
    std::string adapted;
    nlohmann::json rule;
};
// The capacity rule: the candidate's capacity settings scaled by here / there (space::scale_capacity);
// `here_text` says the memory compared ("40960 MiB per GPU", "memory limit 180 MiB"), `rule` is its name in
// the provenance. False: they cannot be scaled.
bool scale_capacity(Carried& out, const space::Space& space, const space::Candidate& cand, double here,
                    double there, const std::string& here_text, const char* rule) {
    auto scaled = space::scale_capacity(space, cand, here / there);
    if (!scaled) return false;
    out.adapted = fmt::format("; capacity rule: {} here vs {:.0f} MiB where verified (x{:.2f}): {}",
                              here_text, there / 1048576, here / there,
                              scaled->change.empty() ? "no setting changes" : scaled->change);
    out.rule = {
        {"rule", rule}, {"from", cand.to_json()}, {"scale", here / there}, {"change", scaled->change}};
    out.candidate = scaled->candidate;
    return true;
}

std::optional<Carried> carry_to_memory(const CampaignView& c, const bank::HardwareKey& hardware,
                                       const bank::Prior& prior, const space::Candidate& cand, double limit) {
    const auto& f = prior.finding;
    const auto& space = c.contract->space;
    Carried out{cand, {}, {}};
    // A limit per GPU on either side: the capacity rule scales by the memory of one GPU, the limit the
    // contract gives or else the GPU memory of the hardware key; without both sides known, the finding
    // cannot be carried (its settings may not fit).
    const double gpu_here = static_cast<double>(c.contract->resources.gpu_mem_bytes);
    const double gpu_there = f.content.value("gpu_limit_bytes", 0.0);
    const bool per_gpu = (gpu_here > 0 || gpu_there > 0) && !estimate(c, cand);
    if (per_gpu) {
        const double here = gpu_here > 0 ? gpu_here : hardware.accelerator_memory_bytes;
        const double there = gpu_there > 0 ? gpu_there : prior.hardware.accelerator_memory_bytes;
        if (!(here > 0 && there > 0)) return std::nullopt;
        if (std::abs(here / there - 1) > 0.01 &&
            !scale_capacity(out, space, cand, here, there, fmt::format("{:.0f} MiB per GPU", here / 1048576),
                            "gpu_memory_scale"))
            return std::nullopt;
    } else if (f.content.contains("memory_ratio") && limit > 0) {
        const double ratio = std::max(f.content["memory_ratio"].get<double>(), 0.5);
        const double factor = f.content.value("estimate_factor", 1.0);
        if (estimate(c, cand)) {
            // With an estimate: keep the verified peak-to-limit ratio on this campaign's limit.
            auto fits = [&](const space::Candidate& x) {
                auto est = estimate(c, x);
                return !est || *est * factor <= ratio * limit * 1.05;
            };
            if (!fits(cand)) {
                std::optional<space::Candidate> best;
                double best_est = 0;
                for (const auto& n : space.neighbours(cand)) {
                    auto est = estimate(c, n);
                    if (!est || !fits(n) || n.patches != cand.patches) continue;
                    if (!best || *est > best_est) best = n, best_est = *est; // the largest that fits
                }
                if (!best) return std::nullopt;
                out.adapted = fmt::format("; adapted to this limit ({} -> {}) to keep peak/limit <= {:.2f}",
                                          cand.describe(), best->describe(), ratio);
                out.rule = {{"rule", "memory_estimate"}, {"from", cand.to_json()}, {"ratio", ratio}};
                out.candidate = *best;
            }
        } else if (const double there = f.content.value("limit_bytes", 0.0);
                   there > 0 && std::abs(limit / there - 1) > 0.01) {
            // Without one: capacity settings scale with the memory limit.
            if (!scale_capacity(out, space, cand, limit, there,
                                fmt::format("memory limit {:.0f} MiB", limit / 1048576),
                                "memory_limit_scale"))
                return std::nullopt;
        }
    }
    return out;
}

} // namespace

std::vector<Seed> seeds_from_bank(bank::ExperienceBank& bank, const CampaignView& c,
                                  const bank::HardwareKey& hardware, int max_seeds) {
    std::vector<Seed> seeds;
    const auto& space = c.contract->space;
    const double limit = memory_limit(c);
    const auto now = store::now_seconds();
    std::set<std::string> taken;
    for (const auto& prior : bank.priors(hardware, c.contract->name, now)) {
        if (static_cast<int>(seeds.size()) >= max_seeds) break;
        const auto& f = prior.finding;
        if (f.kind != "knob_setting" || !f.content.contains("candidate")) continue;
        space::Candidate cand;
        try {
            cand = space::Candidate::from_json(f.content["candidate"]);
            space.check(cand);
        } catch (const Error&) {
            continue; // the space changed since: the finding does not apply
        }
        if (!space.feasible(cand)) continue;
        const auto carried = carry_to_memory(c, hardware, prior, cand, limit);
        if (!carried) continue;
        const auto& [carried_cand, adapted, rule] = *carried;
        cand = carried_cand;
        if (!taken.insert(cand.key()).second) continue;
        Seed s;
        s.candidate = cand;
        s.weight = prior.weight;
        s.hypothesis = prior.hypothesis;
        s.reason = fmt::format(
            "from the experience bank: verified {:.2f}x in campaign {} on {} (similarity {:.2f}, weight "
            "{:.2f}){}{}",
            f.content.value("speedup", 0.0), f.campaign, f.origin, prior.similarity, prior.weight,
            prior.hypothesis
                ? fmt::format("; unseen hardware (similarity below {:.2f}): a hypothesis to verify, "
                              "not a result",
                              bank::kSeenHardwareSimilarity)
                : "",
            adapted);
        s.provenance = {{"finding", f.uid},
                        {"campaign", f.campaign},
                        {"trials", f.trials},
                        {"origin", f.origin},
                        {"hardware", bank::fingerprint(prior.hardware)},
                        {"similarity", prior.similarity},
                        {"speedup", f.content.value("speedup", 0.0)},
                        {"capacity", rule}};
        seeds.push_back(std::move(s));
    }
    return seeds;
}

} // namespace infrarsi::campaign
