// The agent stage (docs/agent.md): a site's coding agent is called after the doctor, after each search batch,
// and when the space has no untried candidate left, until its calls or its token budget are spent. It gets
// one request (the goal, the scope, the baseline, every finished trial, the fate of its earlier patches) and
// answers with patches and priors. Everything it says is untrusted: the call is contained (agent/exec.hpp),
// its answer bounded and checked (agent/protocol.hpp), and each patch stored in the campaign, then refused or
// accepted by the same scope check as a catalog patch; an accepted one joins the space and from there goes
// through the same sandbox, build, equivalence check, spot check and verification as any patch.
#include "campaign/agent_stage.hpp"

#include "campaign/control.hpp"

#include "agent/exec.hpp"
#include "agent/protocol.hpp"
#include "measure/statistics.hpp"
#include "util/atomic_file.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"
#include "util/install_paths.hpp"
#include "util/sha256.hpp"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace infrarsi::campaign {

using nlohmann::json;
using store::TrialKind;
using store::TrialState;

namespace {

bool from_agent(const store::PatchRow& p) {
    return p.info.is_object() && p.info.value("source", "") == "agent";
}

// A stored claim as a prior of the proposer (PatchClaim or KnobPrior: the same fields), discounted by the
// agent's calibration.
template <class Prior> void set_prior(Prior& p, const store::AgentClaim& claim, const AgentCalibration& cal) {
    p.speedup = claim.speedup;
    p.memory_factor = claim.memory_factor;
    p.confidence = claim.confidence;
    p.discount = cal.speed.discount;
    p.memory_discount = cal.memory.discount;
    p.calibration_error = cal.speed.error;
}

store::AgentClaim stored_claim(const agent::Claim& c) {
    return {c.speedup, c.memory_factor, c.confidence};
}

json claim_json(const agent::Claim& c) {
    return store::to_json(stored_claim(c));
}

int finished_search_batches(store::CampaignStore& store) {
    int finished = 0;
    for (const auto& b : store.batches(store::BatchState::Finished))
        if (b.kind == store::BatchKind::Search) ++finished;
    return finished;
}

} // namespace

std::filesystem::path AgentStage::patch_file(const std::string& id) const {
    return c_.dir / "agent" / "patches" / (id + ".patch");
}

void AgentStage::load_patches(bool read_only, std::vector<std::string>& changed) {
    for (const auto& row : c_.store.patches()) {
        if (!from_agent(row) || !row.accepted) continue;
        patch::PatchInfo p;
        p.id = row.id;
        p.file = patch_file(row.id);
        p.description = row.info.value("description", "");
        p.tags = row.info.value("tags", std::vector<std::string>{});
        p.touches = row.info.value("touches", std::vector<std::string>{});
        // The stored patch is what was checked: a file changed since (by hand; no trial can reach it) is
        // refused, not run.
        std::string now;
        try {
            now = sha256_file_hex(p.file);
        } catch (const std::exception&) {
        }
        if (now != row.info.value("sha256", "")) {
            if (read_only) {
                changed.push_back("agent patch " + p.file.string());
                continue;
            }
            throw Error("an agent patch changed since the agent returned it", p.file.string(),
                        "the file as stored (sha256 " + row.info.value("sha256", "") + ")");
        }
        c_.catalog.push_back(std::move(p));
    }
}

bool AgentStage::due(bool space_exhausted) {
    const auto& a = c_.contract.agent;
    if (!a.enabled()) return false;
    const auto calls = c_.store.agent_calls();
    if (static_cast<int>(calls.size()) >= a.calls) return false;
    long long tokens = 0;
    for (const auto& c : calls)
        tokens += c.tokens;
    if (a.token_budget > 0 && tokens >= a.token_budget) return false;
    if (calls.empty()) return true;
    // Once after each search batch: the last call saw fewer finished batches than there are now. Once more
    // when the space is exhausted, unless the last call was that one.
    const auto seen = calls.back().detail.search_batches.value_or(-1);
    const int finished = finished_search_batches(c_.store);
    if (space_exhausted) return finished > seen || calls.back().trigger != "space_exhausted";
    return finished > seen;
}

std::optional<AgentPatchEffect> AgentStage::measured_patch_effect(const std::string& id) {
    // Pairs of finished search trials whose candidates differ by this patch alone (same knobs, same other
    // patches), compared like with like: each against the control that ran beside it in its batch (a
    // batch's control is the baseline there: ratio 1), so two batches under different load compare by their
    // ratios. A trial without a control (the doctor's, run alone) is not compared with one that had one.
    // The median over pairs; the peaks' ratio likewise (memory does not depend on the load).
    const auto trials = c_.store.trials({.kinds = {TrialKind::Search, TrialKind::SearchControl},
                                         .state = TrialState::Finished,
                                         .outcome = trial::Outcome::Ok});
    auto ratio = [](const store::TrialRow& t) -> std::optional<double> {
        if (t.kind == TrialKind::SearchControl) return 1.0;
        return control_ratio(t);
    };
    std::map<std::string, std::vector<const store::TrialRow*>> by_key;
    for (const auto& t : trials)
        if (ratio(t)) by_key[t.candidate_key].push_back(&t);
    std::vector<double> speed, memory;
    for (const auto& t : trials) {
        auto c = space::Candidate::from_json(t.candidate);
        const auto it = std::find(c.patches.begin(), c.patches.end(), id);
        const auto rt = ratio(t);
        if (it == c.patches.end() || !rt || !(*rt > 0)) continue;
        c.patches.erase(it);
        const auto without = by_key.find(c.key());
        if (without == by_key.end()) continue;
        for (const auto* w : without->second) {
            speed.push_back(*ratio(*w) / *rt);
            if (w->peak_memory_bytes && t.peak_memory_bytes && *w->peak_memory_bytes > 0)
                memory.push_back(*t.peak_memory_bytes / *w->peak_memory_bytes);
        }
    }
    if (speed.empty()) return std::nullopt;
    AgentPatchEffect e;
    e.speedup = measure::median(speed);
    if (!memory.empty()) e.memory_factor = measure::median(memory);
    e.pairs = static_cast<int>(speed.size());
    return e;
}

AgentPairs AgentStage::own_pairs() {
    AgentPairs out;
    for (const auto& p : c_.store.patches()) {
        if (!from_agent(p) || !p.accepted || !p.info.contains("claim")) continue;
        const auto e = measured_patch_effect(p.id);
        if (!e) continue;
        const auto& c = p.info["claim"];
        out.speed.push_back({c.value("speedup", 1.0), e->speedup});
        if (e->memory_factor) out.memory.push_back({c.value("memory_factor", 1.0), *e->memory_factor});
    }
    return out;
}

AgentCalibration AgentStage::calibration() {
    // The bank's pairs for this agent on hardware like this (seed_from_bank), then this campaign's own.
    AgentPairs all;
    if (const auto kept = c_.store.campaign_run().agent_bank_pairs) {
        for (const auto& p : kept->speedup)
            all.speed.push_back({p.claimed, p.measured});
        for (const auto& p : kept->memory)
            all.memory.push_back({p.claimed, p.measured});
    }
    AgentCalibration cal;
    cal.bank_pairs = static_cast<int>(all.speed.size());
    const auto own = own_pairs();
    all.speed.insert(all.speed.end(), own.speed.begin(), own.speed.end());
    all.memory.insert(all.memory.end(), own.memory.begin(), own.memory.end());
    cal.speed = model::calibrate_claims(all.speed);
    cal.memory = model::calibrate_claims(all.memory);
    return cal;
}

void AgentStage::fill_priors(search::ProposalContext& ctx) {
    const auto calls = c_.store.agent_calls();
    if (calls.empty()) return;
    const auto cal = calibration();
    std::map<std::string, const store::PatchRow*> rows;
    const auto all = c_.store.patches();
    for (const auto& p : all)
        if (from_agent(p) && p.accepted) rows[p.id] = &p;
    for (auto& f : ctx.patches) {
        const auto it = rows.find(f.id);
        if (it == rows.end()) continue;
        // An agent's patch claims through its claim, discounted by its calibration, never through its tags.
        f.claim = std::nullopt;
        if (!it->second->info.contains("claim")) continue;
        search::PatchClaim claim;
        set_prior(claim, store::agent_claim_from_json(it->second->info["claim"]), cal);
        f.claim = claim;
    }
    // The knob priors of the latest call that gave any: an agent's newer view replaces its older one.
    for (auto it = calls.rbegin(); it != calls.rend(); ++it) {
        const auto& priors = it->detail.knob_priors;
        if (!priors || priors->empty()) continue;
        for (const auto& k : *priors) {
            search::KnobPrior kp;
            kp.knob = k.knob;
            kp.value = k.value;
            set_prior(kp, k.claim, cal);
            ctx.knob_priors.push_back(std::move(kp));
        }
        break;
    }
}

namespace {

// What the agent may change: the files, the knobs and their values, the constraints, from the baseline.
json scope_json(const contract::Contract& c) {
    json knobs = json::array();
    for (const auto& k : c.space.knobs) {
        json values = json::array();
        for (const auto& v : k.domain())
            values.push_back(space::to_json(v));
        knobs.push_back({{"name", k.name}, {"values", values}});
    }
    json constraints = json::array();
    for (const auto& x : c.space.constraints)
        constraints.push_back(x.text);
    return {{"editable", c.editable},
            {"protected", c.protected_files},
            {"knobs", knobs},
            {"constraints", constraints},
            {"baseline", c.space.baseline().to_json()}};
}

json baseline_json(const store::Baseline& b, double limit) {
    json base = {{"step_time_s", b.median_step_s},
                 {"cold_step_s", b.cold_step_s},
                 {"noise_cv", b.cv_between},
                 {"minimum_detectable_effect", b.minimum_detectable_effect},
                 {"phases", b.phases},
                 {"memory_limit_bytes", limit},
                 {"tokens_per_s", b.tokens_per_s}};
    if (b.peak_memory_bytes) base["peak_memory_bytes"] = *b.peak_memory_bytes;
    if (b.mfu) base["mfu"] = *b.mfu;
    return base;
}

// One finished trial as the agent reads it (`limit`: the memory limit an OOM's peak passed).
json trial_json(const store::TrialRow& t, double limit) {
    json j = {{"candidate", t.candidate}, {"outcome", store::outcome_name(t)}};
    if (t.violation != trial::Violation::None)
        j["violation"] = std::string(trial::violation_names.name(t.violation));
    if (t.outcome == trial::Outcome::OutOfMemory) {
        j["peak_memory_bytes_above"] = limit; // censored: the peak passed the limit
    } else if (t.peak_memory_bytes) {
        j["peak_memory_bytes"] = *t.peak_memory_bytes;
    }
    if (t.outcome == trial::Outcome::Timeout && t.step_time_s)
        j["step_time_s_at_least"] = *t.step_time_s;
    else if (t.step_time_s)
        j["step_time_s"] = *t.step_time_s;
    if (const auto r = control_ratio(t)) j["ratio_to_control"] = *r;
    if (t.outcome == trial::Outcome::BuildFailure && !t.detail.empty())
        j["build_error"] = agent::job_output(t.detail);
    return j;
}

// The failed equivalence check of a patch set that contains patch `id`, or nullptr.
const store::EquivalenceCheck* failed_check_of(const std::vector<store::EquivalenceCheck>& failed_checks,
                                               const std::string& id) {
    const auto check =
        std::find_if(failed_checks.begin(), failed_checks.end(), [&](const store::EquivalenceCheck& r) {
            return std::find(r.patches.begin(), r.patches.end(), id) != r.patches.end();
        });
    return check == failed_checks.end() ? nullptr : &*check;
}

// The check's own figures (why, the largest difference, tolerance): written by equivalence_stage.cpp, not the
// job.
json equivalence_figures(const store::EquivalenceCheck& check) {
    json why = json::object();
    if (check.reason) why["reason"] = *check.reason;
    if (check.max_relative)
        why["max_relative"] = std::isfinite(*check.max_relative) ? json(*check.max_relative) : json("inf");
    if (check.tolerance) why["tolerance"] = *check.tolerance;
    why["patches"] = check.patches;
    if (check.candidate) why["candidate"] = *check.candidate;
    return why;
}

// An accepted patch's fate in `j`: the search trials that ran it (a build failure among them), and what
// trials measured of it.
void accepted_fate(json& j, const std::string& id, const std::vector<store::TrialRow>& search_trials,
                   const std::optional<AgentPatchEffect>& effect) {
    j["fate"] = "accepted";
    int tried = 0;
    for (const auto& t : search_trials) {
        const auto c = space::Candidate::from_json(t.candidate);
        if (std::find(c.patches.begin(), c.patches.end(), id) == c.patches.end()) continue;
        ++tried;
        if (t.outcome == trial::Outcome::BuildFailure) {
            j["fate"] = "build_failure";
            j["build_error"] = agent::job_output(t.detail);
        }
    }
    j["trials"] = tried;
    if (effect) {
        j["fate"] = "measured";
        j["measured"] = {{"speedup", effect->speedup}, {"pairs", effect->pairs}};
        if (effect->memory_factor) j["measured"]["memory_factor"] = *effect->memory_factor;
    }
}

json calibration_json(const AgentCalibration& cal) {
    return {{"pairs", cal.speed.pairs},
            {"speedup_error", cal.speed.error},
            {"speedup_discount", cal.speed.discount},
            {"memory_pairs", cal.memory.pairs},
            {"memory_error", cal.memory.error},
            {"memory_discount", cal.memory.discount}};
}

} // namespace

json AgentStage::request(int call, const std::string& trigger, const std::filesystem::path& tree,
                         const std::vector<store::EquivalenceCheck>& failed_checks) {
    const auto& a = c_.contract.agent;
    json req;
    req["protocol"] = agent::kProtocolVersion;
    req["call"] = call;
    req["calls_left"] = a.calls - call;
    req["trigger"] = trigger;
    req["goal"] = a.goal;
    req["max_patches"] = a.max_patches_per_call;
    req["tree"] = tree.string();
    req["scope"] = scope_json(c_.contract);
    const double limit = static_cast<double>(contract::modeled_memory_limit_bytes(c_.contract.resources));
    if (const auto b = c_.store.baseline()) req["baseline"] = baseline_json(*b, limit);
    req["hardware"] = {{"nodes", c_.contract.resources.nodes},
                       {"ranks_per_node", c_.contract.resources.ntasks_per_node},
                       {"memory_limit_bytes", limit}};
    json trials = json::array();
    for (const auto& t : c_.store.trials({.kinds = {TrialKind::Search, TrialKind::Doctor},
                         .state = TrialState::Finished,
                         .counted = true}))
        trials.push_back(trial_json(t, limit));
    req["trials"] = trials;
    // Its earlier patches and what became of them.
    json patches = json::array();
    for (const auto& p : c_.store.patches()) {
        if (!from_agent(p)) continue;
        json j = {{"id", p.id},
                  {"name", p.info.value("name", "")},
                  {"call", p.info.value("call", 0)},
                  {"claim", p.info.value("claim", json(nullptr))}};
        if (!p.accepted) {
            j["fate"] = "refused";
            j["reason"] = p.reason;
        } else if (const auto* check = failed_check_of(failed_checks, p.id)) {
            j["fate"] = "not_equivalent";
            j["equivalence"] = equivalence_figures(*check);
        } else {
            accepted_fate(j, p.id,
                          c_.store.trials({.kinds = {TrialKind::Search}, .state = TrialState::Finished}),
                          measured_patch_effect(p.id));
        }
        patches.push_back(std::move(j));
    }
    req["patches"] = patches;
    req["calibration"] = calibration_json(calibration());
    return req;
}

namespace {

// A call that was running when this process was killed: it ended with it.
void end_interrupted_calls(store::CampaignStore& store) {
    for (auto c : store.agent_calls())
        if (c.outcome == "running") {
            c.outcome = "interrupted";
            c.reason = "the orchestrator stopped during the call";
            store.update_agent_call(c);
        }
}

// How the call went, whatever it answered.
void record_call(store::AgentCallRow& row, const agent::CallResult& res) {
    row.finished = store::now_seconds();
    row.detail.seconds = res.seconds;
    row.detail.isolated = res.isolated;
    row.detail.isolation = res.isolation;
    row.detail.leftovers = res.leftovers;
    row.detail.stderr_tail = agent::job_output(res.err_tail, 4096);
    row.outcome = std::string(agent::call_outcome_names.name(res.outcome));
    row.reason = res.reason;
}

// What the answer said besides its patches: its usage, what was refused while reading it, its knob priors.
void record_answer(store::AgentCallRow& row, const agent::Response& answer) {
    row.tokens = answer.usage.tokens;
    row.cost = answer.usage.cost;
    row.model = answer.usage.model;
    row.offered = static_cast<int>(answer.patches.size() + answer.refused.size());
    auto& d = row.detail;
    d.refused_while_reading.emplace();
    for (const auto& r : answer.refused)
        d.refused_while_reading->push_back({r.index, r.name, r.reason});
    d.knob_priors.emplace();
    for (const auto& k : answer.knob_priors)
        d.knob_priors->push_back({k.knob, k.value, stored_claim(k.claim)});
    d.refused_priors.emplace();
    for (const auto& r : answer.refused_priors)
        d.refused_priors->push_back({r.index, std::nullopt, r.reason});
}

} // namespace

int AgentStage::consult(const RunOptions& o, const std::string& trigger) {
    end_interrupted_calls(c_.store);
    if (!due(trigger == "space_exhausted")) return 0;
    const auto& a = c_.contract.agent;
    const int finished_batches = finished_search_batches(c_.store);
    store::AgentCallRow row;
    row.started = store::now_seconds();
    row.trigger = trigger;
    row.outcome = "running";
    row.id = c_.store.add_agent_call(row);
    row.detail.search_batches = finished_batches;
    c_.store.update_agent_call(row);
    const int call = static_cast<int>(row.id);

    // The tree the agent reads: the baseline's sandbox (an unpatched copy, made for the doctor), read-only in
    // the call's view.
    const auto tree = host_.baseline_tree();
    const std::filesystem::path call_dir = c_.dir / "agent" / "calls" / std::to_string(call);
    agent::CallSpec spec;
    spec.campaign = c_.dir;
    spec.call_dir = call_dir;
    spec.tree = tree;
    spec.command = a.command;
    spec.time_limit = std::chrono::seconds(a.call_time_limit_s);
    spec.request = request(call, trigger, tree, host_.failed_equivalence_checks()).dump(2);
    std::error_code ec;
    std::filesystem::create_directories(call_dir, ec);
    write_file_atomically(call_dir / "request.json", spec.request);
    host_.say(o, fmt::format("agent {}: call {} of {} ({})", a.name, call, a.calls, trigger));
    const auto res = agent::call_agent(infrarsi_command(), spec);

    record_call(row, res);
    if (res.outcome != agent::CallOutcome::ok) {
        c_.store.update_agent_call(row);
        host_.say(o, fmt::format("agent {}: call {} failed ({}): {}; the campaign goes on without it", a.name,
                                 call, row.outcome, res.reason));
        return 0;
    }
    agent::Response answer;
    try {
        agent::Limits limits;
        limits.max_patches = a.max_patches_per_call;
        answer = agent::parse_response(res.out, limits);
    } catch (const Error& e) {
        row.outcome = "invalid_output";
        row.reason = e.what();
        c_.store.update_agent_call(row);
        host_.say(o, fmt::format("agent {}: call {}: invalid answer: {}", a.name, call, e.what()));
        return 0;
    }
    record_answer(row, answer);

    for (std::size_t i = 0; i < answer.patches.size(); ++i) {
        const auto& ap = answer.patches[i];
        const auto outcome = take_patch(ap, call, static_cast<int>(i));
        if (outcome.accepted) ++row.accepted;
        host_.say(o, outcome.accepted
                         ? fmt::format("agent {}: patch {} accepted ({})", a.name, outcome.id,
                                       ap.description.substr(0, 80))
                         : fmt::format("agent {}: patch {} refused: {}", a.name, outcome.id, outcome.reason));
    }
    for (const auto& r : answer.refused)
        host_.say(o, fmt::format("agent {}: patch #{} refused: {}", a.name, r.index, r.reason));
    c_.store.update_agent_call(row);
    return row.accepted;
}

AgentStage::PatchIntake AgentStage::take_patch(const agent::ProposedPatch& ap, int call, int index) {
    // An id of its own: the call, the agent's name for it; never a catalog id or an earlier patch's.
    std::set<std::string> taken;
    for (const auto& p : c_.store.patches())
        taken.insert(p.id);
    for (const auto& p : c_.catalog)
        taken.insert(p.id);
    std::string id = fmt::format("agent{}-{}", call, ap.name);
    for (int n = 2; taken.count(id); ++n)
        id = fmt::format("agent{}-{}-{}", call, ap.name, n);

    const std::string digest = agent::change_digest(ap.diff);
    std::string reason;
    for (const auto& p : c_.store.patches())
        if (from_agent(p) && p.info.value("digest", "") == digest) {
            reason = "the same change as patch " + p.id + " (not tried again)";
            break;
        }
    if (reason.empty())
        for (const auto& p : c_.catalog)
            if (!p.file.empty() && p.file.parent_path() != patch_file("x").parent_path()) {
                std::string text;
                try {
                    text = read_regular_file(p.file.string(), {.max_bytes = 16u << 20});
                } catch (const Error&) {
                    continue;
                }
                if (agent::change_digest(text) == digest) {
                    reason = "the same change as catalog patch " + p.id + " (not tried again)";
                    break;
                }
            }
    patch::PatchInfo info;
    info.id = id;
    info.file = patch_file(id);
    info.description = ap.description;
    info.tags = ap.tags;
    info.touches = patch::touched_paths(ap.diff);
    info.symlink = patch::changes_symlink(ap.diff);
    if (reason.empty() && info.touches.empty()) reason = "the diff touches no file (not a unified diff?)";
    if (reason.empty()) {
        const auto scope = patch::check_scope(info, c_.contract.editable, c_.contract.protected_files);
        if (!scope.accepted) reason = "out of scope: " + scope.reason;
    }
    // Stored whatever its fate: the campaign stays auditable (what the agent said, and why it was refused).
    std::error_code ec;
    std::filesystem::create_directories(info.file.parent_path(), ec);
    write_file_atomically(info.file, ap.diff);
    json j = {{"source", "agent"},
              {"call", call},
              {"index", index},
              {"name", ap.name},
              {"description", ap.description},
              {"tags", ap.tags},
              {"touches", info.touches},
              {"file", info.file.string()},
              {"sha256", sha256_hex(ap.diff)},
              {"digest", digest},
              {"bytes", ap.diff.size()}};
    if (ap.claimed) j["claim"] = claim_json(ap.claim);
    const bool accepted = reason.empty();
    c_.store.put_patch({id, accepted, reason, j});
    c_.store.log(accepted ? "agent patch " + id + " accepted" : "agent patch " + id + " refused: " + reason);
    if (accepted) {
        c_.catalog.push_back(info);
        c_.contract.space.patches.push_back(id);
        std::sort(c_.contract.space.patches.begin(), c_.contract.space.patches.end());
    }
    return {id, accepted, reason};
}

} // namespace infrarsi::campaign
