#include "report/report.hpp"

#include "bank/experience_bank.hpp"
#include "measure/log_format.hpp"
#include "measure/statistics.hpp"
#include "report/format.hpp"
#include "space/rendering.hpp"
#include "util/atomic_file.hpp"
#include "util/error.hpp"
#include "util/json_field.hpp"
#include "util/process.hpp"
#include "util/shell_quote.hpp"
#include "verify/sequential.hpp"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

namespace infrarsi::report {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {
json opt(const std::optional<double>& v) {
    return v ? json(*v) : json();
}

// A trial's files: the wrapper's result.json and the job's log.txt beside it; a build failure has no run, its
// file is the build's log.
json trial_files(const store::TrialRow& t) {
    if (t.result_path.empty()) return {{"result", ""}, {"log", ""}};
    if (t.outcome == trial::Outcome::BuildFailure) return {{"result", ""}, {"log", t.result_path}};
    const auto log = (fs::path(t.result_path).parent_path() / "log.txt").string();
    std::error_code ec;
    return {{"result", t.result_path}, {"log", fs::is_regular_file(log, ec) ? log : ""}};
}

// What the job printed step by step (campaign/batch_runner.cpp keeps it): its own step numbers, each step's
// time and loss; null where nothing was kept.
json trial_curve(const store::TrialRow& t) {
    const auto& m = t.measurements;
    if (!m.step_times_s || !m.step_numbers) return nullptr;
    return {{"steps", *m.step_numbers},
            {"step_s", *m.step_times_s},
            {"loss", m.losses ? json(*m.losses) : json()}};
}

json trial_json(const store::TrialRow& t) {
    const auto files = trial_files(t);
    const auto cand = t.candidate.is_object() ? t.candidate : json::object();
    json j = {{"id", t.id},
              {"batch", t.batch_id},
              {"kind", store::to_string(t.kind)},
              {"candidate", space::Candidate::from_json(t.candidate).describe()},
              {"state", store::to_string(t.state)},
              {"outcome", store::outcome_name(t)},
              {"violation", trial::to_string(t.violation)},
              {"detail", t.detail},
              {"job_id", t.job_id},
              {"node", t.node},
              {"step_s", opt(t.step_time_s)},
              {"step_s_ci", t.step_time_lo ? json::array({*t.step_time_lo, *t.step_time_hi}) : json()},
              // A search trial's step time over its batch's control's (campaign::control_ratio), the figure
              // the search compares: like against like.
              {"ratio_to_control", opt(campaign::control_ratio(t))},
              // The job's own MFU figure, over the peak it assumes (the peak its figure implies): its claim,
              // not a figure of this campaign's (those are the baseline's and the verifications').
              {"job_mfu", opt(t.mfu)},
              {"job_peak_flops", opt(t.measurements.peak_flops)},
              {"tokens_per_s", opt(t.tokens_per_s)},
              {"peak_memory_bytes", opt(t.peak_memory_bytes)},
              {"cost_node_s", t.cost_node_s},
              {"counted", t.counted},
              {"reason", t.reason},
              {"result", files["result"]},
              {"log", files["log"]},
              {"knobs", cand.value("knobs", json::object())},
              {"patches", cand.value("patches", json::array())},
              {"started_at", opt(t.measurements.started_at)},
              {"ended_at", opt(t.measurements.ended_at)},
              {"curve", trial_curve(t)},
              // What the candidate's code could not write (docs/orchestrator.md, "Evidence").
              {"evidence", t.measurements.evidence ? t.measurements.evidence->document : json()},
              {"isolation", t.measurements.isolation ? trial::to_json(*t.measurements.isolation) : json()},
              {"leftover_processes_killed", t.measurements.leftover_processes_killed}};
    // Jobs of the user submitted while the trial ran that the campaign did not submit: a warning
    // (campaign/self_submitted.cpp), present only when there were any.
    if (!t.measurements.self_submitted_jobs.empty())
        j["self_submitted_jobs"] = trial::to_json(t.measurements.self_submitted_jobs);
    // What of the job's own files was removed once the trial was read ([workload] keep_job_files), when any.
    if (const auto& r = t.measurements.job_files_removed) j["job_files_removed"] = trial::to_json(*r);
    return j;
}

std::string fmt_opt(const json& v, const char* spec = "{:.4f}") {
    return v.is_number() ? fmt::format(fmt::runtime(spec), v.get<double>()) : "-";
}

// An MFU, or "unknown" where there is none (the record's null: above 1 against the measured peak).
std::string mfu_text(const json& v) {
    return v.is_number() ? fmt_opt(v) : "unknown";
}

// The losses verification compared, as the contract's loss mode reads them: per step, the doctor's reference
// curve and the median of the candidate's verification runs; the summary the mode decides on (the largest
// relative step difference, the mean of the last k steps, or the final evaluation loss).
json loss_comparison(const contract::Invariants& inv, const std::vector<double>& reference,
                     const std::vector<store::TrialRow>& base, const std::vector<store::TrialRow>& cand) {
    auto per_step = [&](const std::vector<store::TrialRow>& ts) {
        std::vector<std::vector<double>> runs;
        for (const auto& t : ts)
            if (t.measurements.losses) runs.push_back(*t.measurements.losses);
        std::vector<double> med;
        for (int i = 0; i < inv.steps; ++i) {
            std::vector<double> xs;
            for (const auto& r : runs)
                if (static_cast<int>(r.size()) > i) xs.push_back(r[static_cast<std::size_t>(i)]);
            if (xs.empty()) break;
            med.push_back(measure::median(xs));
        }
        return med;
    };
    auto evals = [](const std::vector<store::TrialRow>& ts) {
        std::vector<double> xs;
        for (const auto& t : ts)
            if (t.measurements.eval_loss) xs.push_back(*t.measurements.eval_loss);
        return xs;
    };
    const auto got = per_step(cand);
    const auto paired = per_step(base);
    // Pairs each at a seed of their own (verification_stage.cpp): the reference is the paired baselines'
    // median at those seeds, not the doctor's curve at the contract's seed (an empty `reference`).
    const bool at_pair_seeds = reference.empty();
    const std::vector<double>& ref = at_pair_seeds ? paired : reference;
    json steps = json::array();
    double worst = 0;
    for (std::size_t i = 0; i < got.size() && i < ref.size(); ++i) {
        steps.push_back({{"step", i + 1}, {"baseline", ref[i]}, {"candidate", got[i]}});
        worst = std::max(worst, std::fabs(got[i] - ref[i]) / std::max(std::fabs(ref[i]), 1e-12));
    }
    json j = {{"mode", inv.loss_mode == contract::LossMode::PerStep     ? "per_step"
                       : inv.loss_mode == contract::LossMode::LastKMean ? "last_k_mean"
                                                                        : "final_eval"},
              {"tolerance", inv.loss_tolerance},
              {"steps", steps},
              {"max_step_relative", worst}};
    if (!paired.empty()) j["paired_baseline_steps"] = paired;
    if (inv.loss_mode == contract::LossMode::LastKMean && static_cast<int>(got.size()) >= inv.steps &&
        static_cast<int>(ref.size()) >= inv.steps) {
        double a = 0, b = 0;
        for (int i = inv.steps - inv.loss_last_k; i < inv.steps; ++i)
            a += ref[static_cast<std::size_t>(i)], b += got[static_cast<std::size_t>(i)];
        j["summary"] = {{"what", fmt::format("mean loss of the last {} steps", inv.loss_last_k)},
                        {"baseline", a / inv.loss_last_k},
                        {"candidate", b / inv.loss_last_k}};
    } else if (inv.loss_mode == contract::LossMode::FinalEval) {
        const auto eb = evals(base), ec = evals(cand);
        if (!eb.empty() && !ec.empty())
            j["summary"] = {{"what", "final evaluation loss (median of the A/B runs)"},
                            {"baseline", measure::median(eb)},
                            {"candidate", measure::median(ec)}};
    } else {
        j["summary"] = {
            {"what", "largest relative per-step difference"}, {"baseline", 0.0}, {"candidate", worst}};
    }
    j["reference"] = at_pair_seeds ? "paired baselines, median at the pairs' seeds" : "baseline reference";
    return j;
}

// The equivalence check's compared values numbered as the job numbers its steps (nanoGPT's iter 0, 1, ...):
// `job_step` beside `step` (the position, from 1), from the step numbers its patch set's run printed.
json job_step_numbers(const std::vector<store::TrialRow>& trials, const store::EquivalenceCheck& c) {
    json e = store::to_json(c);
    if (!c.candidate_trial || !c.values) return e;
    const auto id = *c.candidate_trial;
    const auto t = std::find_if(trials.begin(), trials.end(), [&](const auto& x) { return x.id == id; });
    if (t == trials.end() || !t->measurements.step_numbers) return e;
    const auto& numbers = *t->measurements.step_numbers;
    for (auto* list : {&e["values"], &e["beyond"]})
        if (list->is_array())
            for (auto& v : *list)
                if (const int i = v.value("step", 0); i > 0 && i <= static_cast<int>(numbers.size()))
                    v["job_step"] = numbers[static_cast<std::size_t>(i - 1)];
    return e;
}

// Whether a verification's pairs ran each at a seed of its own (verification_stage.cpp records it per pair).
bool pairs_seeded(const store::VerificationRow& v) {
    return !v.detail.pairs.empty() && v.detail.pairs[0].seed.has_value();
}

double median_of(const std::vector<store::TrialRow>& ts, std::optional<double> store::TrialRow::*field) {
    std::vector<double> xs;
    for (const auto& t : ts)
        if (t.outcome == trial::Outcome::Ok && (t.*field)) xs.push_back(*(t.*field));
    return measure::median(xs);
}
// How to apply a promoted candidate's settings, one line each, as a user pastes them: the #SBATCH lines,
// `export K=V` and the arguments, shell-quoted.
std::string apply_lines(const json& promoted, const std::string& indent) {
    std::string o;
    const json options = promoted.value("sbatch_options", json::array());
    const json env = promoted.value("environment", json::object());
    for (const auto& opt : options)
        o += indent + "#SBATCH " + opt.get<std::string>() + "\n";
    for (const auto& [k, v] : env.items())
        o += indent + "export " + k + "=" + shell_quote(v.get<std::string>()) + "\n";
    const auto args = promoted.value("arguments", std::vector<std::string>{});
    if (!args.empty()) o += indent + "arguments: " + shell_join(args) + "\n";
    return o;
}

// The campaign's state as status and report show it: its stage, or "cancelled" (infrarsi cancel) before done.
std::string campaign_state(campaign::Campaign& c) {
    const auto stage = c.store().stage();
    if (stage != store::Stage::Done && c.cancelled()) return "cancelled";
    return store::to_string(stage);
}
} // namespace

namespace {
// What is left, in wall time: during the search, the search trials left at the pace so far (wall time per
// counted trial, the doctor's included), within the wall-time budget; later, the wall-time budget.
void add_estimate_left(json& j, store::Stage stage, const campaign::BudgetUse& use,
                       const contract::Budget& b) {
    const double wall_left = b.wall_time_s > 0 ? std::max(0.0, b.wall_time_s - use.wall_s) : -1;
    if (stage == store::Stage::Search && use.trials > 0) {
        const double pace = use.wall_s / use.trials * std::max(0, b.trials - use.trials);
        j["estimate_left_s"] = wall_left >= 0 ? std::min(pace, wall_left) : pace;
        j["estimate_basis"] = wall_left >= 0 && wall_left < pace ? "wall-time budget" : "search pace so far";
    } else if (stage != store::Stage::Done && wall_left >= 0) {
        j["estimate_left_s"] = wall_left;
        j["estimate_basis"] = "wall-time budget";
    }
}

// A campaign started from the plugin's tune request (campaign/tune_intake.hpp): its job, script and user.
void add_tune(json& j, store::CampaignStore& s) {
    if (auto job = s.meta("tune_job_id")) {
        j["tune"] = {{"job_id", std::stoul(*job)},
                     {"script", s.meta("tune_script").value_or("")},
                     {"user", s.meta("tune_user").value_or("")},
                     // "adopted" (the doctor's first run), "not adopted: <why>", or empty before the doctor
                     {"submitted_job", s.campaign_run().submitted_job.value_or("")}};
        if (auto r = s.meta("tune_request")) j["tune"]["request"] = json::parse(*r, nullptr, false);
    }
}
} // namespace

json status(campaign::Campaign& c) {
    auto& s = c.store();
    auto use = c.budget_use();
    const auto& b = c.contract().budget;
    std::map<std::string, int> counts;
    // The budget's trials by outcome: counted search trials, a patch set that did not build excepted (it
    // cost a build, no cluster time: Campaign::budget_use).
    std::map<std::string, int> search_counts;
    int running = 0, pending = 0;
    const store::TrialRow* best = nullptr;
    double best_ratio = 0;
    const auto baseline = s.baseline();
    const double base_step_s = baseline ? baseline->median_step_s : 0.0;
    auto trials = s.trials();
    for (const auto& t : trials) {
        if (t.state == store::TrialState::Finished && t.kind == store::TrialKind::Search && t.counted &&
            t.outcome != trial::Outcome::BuildFailure)
            ++search_counts[store::outcome_name(t)];
        if (t.state == store::TrialState::Finished)
            ++counts[store::outcome_name(t)];
        else if (t.state == store::TrialState::Submitted)
            ++running;
        else
            ++pending;
        // The best as the search sees it: over its batch's control where it has one (like against like),
        // else over the doctor's baseline.
        if (const auto r = campaign::baseline_ratio(t, base_step_s); t.kind == store::TrialKind::Search &&
                                                                     t.outcome == trial::Outcome::Ok && r &&
                                                                     *r > 0 && (!best || *r < best_ratio)) {
            best = &t;
            best_ratio = *r;
        }
    }
    int failed = 0;
    for (const auto& [k, n] : counts)
        if (k != trial::to_string(trial::Outcome::Ok)) failed += n;
    json j = {{"format", format_json(kStatusFormat)},
              {"campaign", s.meta("name").value_or("")},
              {"dir", c.dir().string()},
              {"state", campaign_state(c)},
              {"trials", {{"used", use.trials}, {"budget", b.trials}}},
              {"node_hours", {{"used", use.node_hours}, {"budget", b.node_hours}}},
              {"wall_s", use.wall_s},
              {"running", running},
              {"pending", pending},
              {"failed", failed},
              {"outcomes", counts},
              {"search_outcomes", search_counts},
              {"promotions", s.promotions().size()}};
    // The batch the campaign is at: the latest one.
    const auto batches = s.batches();
    if (!batches.empty()) {
        const auto& b = batches.back();
        j["batch"] = {{"id", b.id},
                      {"kind", store::to_string(b.kind)},
                      {"state", store::to_string(b.state)},
                      {"trials", s.trials_of_batch(b.id).size()}};
    }
    add_estimate_left(j, s.stage(), use, b);
    add_tune(j, s);
    if (baseline)
        j["baseline"] = {{"step_s", baseline->median_step_s}, {"mde", baseline->minimum_detectable_effect}};
    if (best) {
        j["best"] = trial_json(*best);
        j["best"]["speedup_vs_baseline"] = 1 / best_ratio;
        j["best"]["speedup_over"] = campaign::control_ratio(*best) ? "control" : "doctor";
    }
    json ev = json::array();
    for (const auto& [t, m] : s.events(8))
        ev.push_back({{"time", t}, {"message", m}});
    j["recent"] = ev;
    return j;
}

std::string render_status(const json& j) {
    std::string out = fmt::format("campaign {} ({})  state: {}\n", j["campaign"].get<std::string>(),
                                  j["dir"].get<std::string>(), j["state"].get<std::string>());
    out += fmt::format("trials: {} of {} used; node-hours {:.3f}; wall {:.0f} s\n",
                       j["trials"]["used"].get<int>(), j["trials"]["budget"].get<int>(),
                       j["node_hours"]["used"].get<double>(), j["wall_s"].get<double>());
    if (j.contains("tune")) {
        const auto script = j["tune"]["script"].get<std::string>();
        const auto adopted = j["tune"].value("submitted_job", std::string());
        out += fmt::format("tune request: job {} ({}){}\n", j["tune"]["job_id"].get<unsigned long>(),
                           script.empty() ? "no script file" : script,
                           adopted.empty() ? "" : "; as a baseline run: " + adopted);
    }
    out += fmt::format("running {}, pending {}, failed {}; outcomes:", j["running"].get<int>(),
                       j["pending"].get<int>(), j["failed"].get<int>());
    for (const auto& [k, v] : j["outcomes"].items())
        out += fmt::format(" {}={}", k, v.get<int>());
    out += "\n";
    if (j.contains("baseline"))
        out += fmt::format("baseline {} s/step, minimum detectable effect {:.1f}%\n",
                           fmt_opt(j["baseline"]["step_s"]), 100 * j["baseline"]["mde"].get<double>());
    if (j.contains("best"))
        out += fmt::format("best so far: {} at {} s/step ({:.2f}x over {}, in search, unverified)\n",
                           j["best"]["candidate"].get<std::string>(), fmt_opt(j["best"]["step_s"]),
                           j["best"]["speedup_vs_baseline"].get<double>(),
                           j["best"].value("speedup_over", "doctor") == "control" ? "its batch's control"
                                                                                  : "the doctor's baseline");
    out += fmt::format("promoted: {}\n", j["promotions"].get<std::size_t>());
    for (const auto& e : j["recent"])
        out += "  " + e["message"].get<std::string>() + "\n";
    return out;
}

namespace {
// A patch's state, one vocabulary for the JSON and the text: "scope_refused" (the scope check refused it: it
// touches a file outside the editable scope or a protected one; refused_because says which), else
// "equivalence_refused" where the equivalence check of the patch alone failed (its losses left the
// baseline's), else "scope_accepted" (it may run; `equivalence` lists the checks of the sets it was in).
json patch_json(const store::PatchRow& p, const std::vector<store::EquivalenceCheck>& checks) {
    json eq = json::array();
    std::string state = p.accepted ? "scope_accepted" : "scope_refused", why = p.reason;
    for (const auto& r : checks) {
        const auto& set = r.patches;
        if (std::find(set.begin(), set.end(), p.id) == set.end()) continue;
        eq.push_back({{"patches", set}, {"state", r.state}, {"reason", r.reason.value_or("")}});
        if (p.accepted && set.size() == 1 && r.state == "failed")
            state = "equivalence_refused", why = r.reason.value_or("");
    }
    return {{"id", p.id},
            {"state", state},
            {"refused_because", why},
            {"equivalence", eq},
            {"tags", p.info.value("tags", json())},
            {"touches", p.info.value("touches", json())},
            {"description", p.info.value("description", json())}};
}

// Above this minimum detectable effect a campaign is nearly powerless: few changes of settings bring a gain
// that large, and no smaller one can be told from the noise.
constexpr double kPowerlessMde = 0.15;

// Why a campaign has promoted nothing, from what it ran, never a guess: it has not finished; its search ran
// no trial (it stopped before, a scheduler that never answered, a budget spent by the doctor); no candidate
// reached verification (nothing measured faster in the search), with the power the doctor's noise left it; or
// what reached verification was refused. `reason` is one of not_finished, no_search_trial, none_verified,
// refused.
json why_none_promoted(campaign::Campaign& c, const std::vector<store::TrialRow>& trials,
                       const json& verifications) {
    auto& s = c.store();
    int searched = 0, searched_ok = 0, stopped = 0;
    for (const auto& t : trials) {
        if (t.kind != store::TrialKind::Search || t.state != store::TrialState::Finished) continue;
        ++searched;
        if (t.outcome == trial::Outcome::Ok) ++searched_ok;
        if (t.outcome == trial::Outcome::StoppedSlow) ++stopped;
    }
    const auto baseline = s.baseline();
    const double mde = baseline ? baseline->minimum_detectable_effect : 0.0;
    // The doctor's noise as a limit on what the campaign could find: a gain under the MDE cannot be told from
    // the noise, and above kPowerless (a gain few changes of settings bring) the campaign was nearly
    // powerless: say so, with the figure, rather than leave the reader to blame the candidates.
    const bool powerless = mde > kPowerlessMde;
    const std::string power =
        powerless
            ? fmt::format(". The doctor's minimum detectable effect was {:.0f}%: the campaign was nearly "
                          "powerless, only a gain over {:.2f}x could be told from the baseline's noise "
                          "(a quieter node, longer trials or more doctor runs lower it)",
                          100 * mde, 1 + mde)
            : "";
    json j = {{"mde", baseline ? json(mde) : json()}, {"powerless", powerless}};
    const bool done = s.stage() == store::Stage::Done;
    if (searched == 0) {
        std::string why = !baseline ? "the doctor has no baseline yet"
                          : done    ? "the budget ended before the search"
                                    : "the campaign has not reached its search";
        if (const auto paused = c.paused()) why = "the campaign is paused: " + *paused;
        j["reason"] = "no_search_trial";
        j["text"] = "none: no search trial ran (" + why + ")";
    } else if (!done && verifications.empty()) {
        j["reason"] = "not_finished";
        j["text"] = fmt::format("none yet: the campaign is at its {} stage ({} search trials ran)",
                                store::stage_names.name(s.stage()), searched);
    } else if (verifications.empty()) {
        // A candidate reaches verification when a search trial of it ran every step faster than the baseline
        // beside it (its batch's control; without one, the doctor's) (campaign/verification_stage.cpp): none
        // did.
        j["reason"] = "none_verified";
        j["text"] = fmt::format(
            "none: no candidate reached verification: none of the {} search trials ran "
            "every step faster than the baseline beside it ({} ran every step, {} were stopped early "
            "as slower than the best so far){}",
            searched, searched_ok, stopped, power);
    } else {
        j["reason"] = "refused";
        j["text"] = fmt::format("none: the {} verified candidate(s) did not beat the baseline by the rule's "
                                "bound with the loss held (see Verifications){}",
                                verifications.size(), power);
    }
    return j;
}
} // namespace

namespace {
// Where each figure comes from.
json sources_json(const contract::Contract& k) {
    return {{"steps", "the job's output (stdout and stderr), read as " + measure::describe(k.metrics)},
            {"memory",
             k.resources.gpu_mem_bytes > 0
                 ? "the GPU's, as the job's step lines report it (its allocator's peak), else as the trial "
                   "wrapper's nvidia-smi samples of the job's processes saw it (gpu_memory_source), against "
                   "gpu_mem " +
                       k.resources.gpu_mem +
                       " per GPU; a GPU OOM is censored there; the host's peak is "
                       "kept as host_peak_bytes"
                 : "the job cgroup's peak on the trial's node (what Slurm enforces --mem on), else "
                   "sacct's MaxRSS, else the job's own report; an OOM is censored at the limit"},
            {"memory_prior", campaign::memory_prior_name(k)}};
}

// The doctor's baseline, the nodes it found slow, the bank's seeds and whether the job takes the seed.
void add_baseline(json& r, campaign::Campaign& c, const std::string& unseeded) {
    auto& s = c.store();
    if (auto d = s.baseline()) {
        json b = store::to_json(*d);
        b.erase("reference_losses");
        // An MFU over a peak the campaign did not establish (none: the median of the job's own figures; or
        // the peak those figures imply) is the job's claim: said as such (job_mfu), never as ours.
        if (b.contains("mfu") && (!d->peak_flops || d->peak_flops_by_job)) {
            b["job_mfu"] = b["mfu"];
            b.erase("mfu");
        }
        r["baseline"] = b;
    }
    // The nodes the doctor found slow (their GPUs > 1.5x slower than the median node's): no trial ran there
    // after.
    if (auto slow = s.campaign_run().slow_nodes) r["slow_nodes"] = *slow;
    // Where the search started: the experience bank's seeds (a campaign that inherited nothing has none).
    if (const auto run = s.campaign_run(); run.bank_path) {
        r["bank"] = {{"path", *run.bank_path},
                     {"hardware", run.bank_hardware.value_or(json::object())},
                     {"seeds", store::to_json(run.bank_seeds.value_or(std::vector<store::BankSeed>{}))},
                     {"findings_recorded", run.bank_ingested.has_value()}};
    }
    r["seeds"] = {{"reach_job", unseeded.empty()}};
    if (!unseeded.empty()) r["seeds"]["why"] = unseeded;
}

// The finished trials by outcome and what they cost; what [workload] keep_job_files removed.
void add_outcomes(json& r, campaign::Campaign& c, const std::vector<store::TrialRow>& trials) {
    json outcomes = json::object(), cost = json::object(), failed_cost = json::object();
    double total = 0;
    std::uint64_t removed_trials = 0, removed_entries = 0, removed_bytes = 0; // [workload] keep_job_files
    for (const auto& t : trials) {
        if (const auto& m = t.measurements.job_files_removed) {
            ++removed_trials;
            removed_entries += m->entries;
            removed_bytes += m->bytes;
        }
        if (t.state != store::TrialState::Finished) continue;
        const std::string o = store::outcome_name(t);
        outcomes[o] = outcomes.value(o, 0) + 1;
        total += t.cost_node_s;
        cost[o] = cost.value(o, 0.0) + t.cost_node_s;
        if (t.outcome != trial::Outcome::Ok) failed_cost[o] = failed_cost.value(o, 0.0) + t.cost_node_s;
    }
    r["outcomes"] = outcomes;
    r["cost_node_s"] = cost;
    r["failed_cost_node_s"] = failed_cost;
    r["total_cost_node_s"] = total;
    if (removed_trials > 0)
        r["job_files_removed"] = {
            {"trials", removed_trials},
            {"entries", removed_entries},
            {"bytes", removed_bytes},
            {"keep_job_files", contract::keep_job_files_names.name(c.contract().workload.keep_job_files)}};
}

// Per agent call: how far that call's claims were from what its patches measured (calibrate_claims' error).
void add_claim_errors(json& calls, const json& claims) {
    for (auto& call : calls) {
        std::vector<model::ClaimPair> pairs;
        for (const auto& p : claims)
            if (p["call"] == call["call"] && p.contains("claimed") && p.contains("measured"))
                pairs.push_back({p["claimed"].value("speedup", 1.0), p["measured"]["speedup"].get<double>()});
        const auto cal = model::calibrate_claims(pairs);
        call["measured_patches"] = cal.pairs;
        call["calibration_error"] = cal.pairs > 0 ? json(cal.error) : json(nullptr);
    }
}

// A patch of the agent's: its claim against what trials measured.
json agent_claim(campaign::Campaign& c, const store::PatchRow& p,
                 const std::vector<store::EquivalenceCheck>& checks) {
    auto& s = c.store();
    json j = {{"id", p.id}, {"call", p.info.value("call", 0)}, {"state", patch_json(p, checks)["state"]}};
    if (p.info.contains("claim")) j["claimed"] = p.info["claim"];
    // A search trial of the patch that broke the contract: how a check refused it (loss_invariant,
    // ...).
    for (const auto& t :
         s.trials({.kinds = {store::TrialKind::Search}, .outcome = trial::Outcome::ContractViolation})) {
        const auto cand = space::Candidate::from_json(t.candidate);
        if (std::find(cand.patches.begin(), cand.patches.end(), p.id) == cand.patches.end()) continue;
        j["broke_contract"] = std::string(trial::violation_names.name(t.violation));
        break;
    }
    if (const auto e = p.accepted ? c.agent().measured_patch_effect(p.id) : std::nullopt) {
        j["measured"] = {{"speedup", e->speedup}, {"pairs", e->pairs}};
        if (e->memory_factor) j["measured"]["memory_factor"] = *e->memory_factor;
    }
    return j;
}

// The agent (docs/agent.md): each call, what it cost, and per patch its claim against what trials measured.
json agent_json(campaign::Campaign& c, const std::vector<store::EquivalenceCheck>& checks) {
    auto& s = c.store();
    json calls = json::array();
    long long tokens = 0;
    double cost = 0, seconds = 0;
    for (const auto& a : s.agent_calls()) {
        tokens += a.tokens;
        cost += a.cost;
        seconds += a.detail.seconds.value_or(0.0);
        calls.push_back({{"call", a.id},
                         {"trigger", a.trigger},
                         {"outcome", a.outcome},
                         {"reason", a.reason},
                         {"offered", a.offered},
                         {"accepted", a.accepted},
                         {"tokens", a.tokens},
                         {"cost", a.cost},
                         {"model", a.model},
                         {"seconds", a.detail.seconds.value_or(0.0)},
                         {"isolated", a.detail.isolated.value_or(false)}});
    }
    json claims = json::array();
    for (const auto& p : s.patches())
        if (p.info.value("source", "") == "agent") claims.push_back(agent_claim(c, p, checks));
    add_claim_errors(calls, claims);
    const auto cal = c.agent().calibration();
    return {{"name", c.contract().agent.name},
            {"calibration",
             {{"pairs", cal.speed.pairs},
              {"bank_pairs", cal.bank_pairs},
              {"speedup_error", cal.speed.error},
              {"speedup_discount", cal.speed.discount},
              {"speedup_error_after_discount", cal.speed.discounted_error},
              {"memory_pairs", cal.memory.pairs},
              {"memory_error", cal.memory.error},
              {"memory_discount", cal.memory.discount}}},
            {"calls", calls},
            {"claims", claims},
            {"tokens", tokens},
            {"cost", cost},
            {"seconds", seconds}};
}

// One verification: its decision, pairs, looks, MFU, equivalence, spot check and ablation.
json verification_json(const store::VerificationRow& v, const std::vector<store::TrialRow>& trials,
                       const std::vector<store::TrialRow>& base, const std::vector<store::TrialRow>& cnd,
                       const std::string& unseeded) {
    auto cand = space::Candidate::from_json(v.candidate);
    json entry = {{"id", v.id},
                  {"candidate", cand.describe()},
                  {"state", store::to_string(v.state)},
                  {"promoted", v.promoted},
                  {"speedup", opt(v.speedup)},
                  {"speedup_ci", v.lo ? json::array({*v.lo, *v.hi}) : json()},
                  {"reasons", v.detail.reasons},
                  {"evidence", v.detail.evidence},
                  {"pairs", store::to_json(v.detail.pairs)},
                  {"mde", v.detail.mde.value_or(0.0)},
                  {"min_speedup", opt(v.detail.min_speedup)},
                  {"baseline_step_s", median_of(base, &store::TrialRow::step_time_s)},
                  {"candidate_step_s", median_of(cnd, &store::TrialRow::step_time_s)},
                  // Only over the campaign's own denominator (below); the jobs' own figures are theirs.
                  {"baseline_mfu", json()},
                  {"candidate_mfu", json()},
                  {"order_seed", v.detail.first.order_seed ? json(*v.detail.first.order_seed) : json()},
                  {"reproduced", v.detail.reproduced ? json(*v.detail.reproduced) : json()},
                  {"recheck", v.detail.recheck ? store::to_json(*v.detail.recheck) : json()}};
    // The sequence of looks (verify/sequential.hpp): each block's interval over the pairs so far.
    if (!v.detail.sequence.empty()) entry["sequence"] = store::to_json(v.detail.sequence);
    // MFU with the campaign's one denominator (verification_stage.cpp): its ratio is the speed-up.
    if (const auto& m = v.detail.mfu) {
        entry["mfu"] = store::to_json(*m);
        // Over the peak the job's own figure implies: the job's claim, kept under mfu, not as ours.
        entry["baseline_mfu"] = m->peak_flops_by_job ? json() : opt(m->baseline);
        entry["candidate_mfu"] = m->peak_flops_by_job ? json() : opt(m->candidate);
        // The step times that MFU is at: the baseline's over its runs, the candidate's at the speed-up.
        entry["baseline_step_s"] = m->baseline_step_s;
        entry["candidate_step_s"] = m->candidate_step_s;
    }
    if (v.detail.equivalence) {
        auto eq = *v.detail.equivalence;
        if (!unseeded.empty() && eq.seed_fresh.value_or(false)) {
            eq.seed_fresh = false;
            eq.seed_note = "no fresh seed in effect: " + unseeded;
        }
        entry["equivalence"] = job_step_numbers(trials, eq);
    }
    if (v.detail.first.spot_check) entry["spot_check"] = store::to_json(*v.detail.first.spot_check);
    if (v.detail.ablation) entry["ablation"] = store::to_json(*v.detail.ablation);
    return entry;
}

// The audit path of a promoted candidate: the change itself, the search trials behind it, the measurements,
// the verification.
json audit_json(campaign::Campaign& c, const store::VerificationRow& v, const json& entry,
                const std::vector<store::TrialRow>& vt) {
    auto& s = c.store();
    const auto cand = space::Candidate::from_json(v.candidate);
    json audit = entry;
    audit["knobs"] = v.candidate["knobs"];
    // The settings in the three forms a job takes them (docs/contract.md, [knobs.NAME]).
    const auto job = space::render(c.contract().space, cand);
    audit["environment"] = job.environment;
    audit["arguments"] = job.arguments;
    audit["sbatch_options"] = job.sbatch_options;
    json ps = json::array();
    for (const auto& id : cand.patches) {
        const auto* p = c.patch_info(id);
        ps.push_back({{"id", id},
                      {"diff", p ? p->file.string() : ""},
                      {"touches", p ? p->touches : std::vector<std::string>{}},
                      {"description", p ? p->description : ""}});
    }
    audit["patches"] = ps;
    json support = json::array();
    for (const auto& t : s.trials({.kinds = {store::TrialKind::Search}, .candidate_key = v.candidate_key}))
        support.push_back(trial_json(t));
    audit["supporting_trials"] = support;
    json vts = json::array();
    for (const auto& t : vt)
        vts.push_back(trial_json(t));
    audit["verification_trials"] = vts;
    return audit;
}

// Every verification, and the audit path of each promoted one.
void add_verifications(json& r, campaign::Campaign& c, const std::vector<store::TrialRow>& trials,
                       const std::string& unseeded) {
    auto& s = c.store();
    json verifications = json::array(), promoted = json::array();
    std::map<std::int64_t, bool> is_promoted;
    for (const auto& [vid, key] : s.promotions())
        is_promoted[vid] = true;
    for (const auto& v : s.verifications()) {
        auto vt = s.trials({.verification_id = v.id});
        std::vector<store::TrialRow> base, cnd;
        for (const auto& t : vt)
            if (t.kind == store::TrialKind::VerifyBaseline)
                base.push_back(t);
            else if (t.kind == store::TrialKind::VerifyCandidate)
                cnd.push_back(t); // not a spot check's run without the patches
        json entry = verification_json(v, trials, base, cnd, unseeded);
        verifications.push_back(entry);
        if (!is_promoted.count(v.id)) continue;
        entry["loss_comparison"] = loss_comparison(
            c.contract().invariants,
            s.baseline() && !pairs_seeded(v) ? s.baseline()->reference_losses : std::vector<double>{}, base,
            cnd);
        promoted.push_back(audit_json(c, v, entry, vt));
    }
    r["verifications"] = verifications;
    r["promoted"] = promoted;
    if (promoted.empty()) r["none_promoted"] = why_none_promoted(c, trials, verifications);
}
} // namespace

json build(campaign::Campaign& c) {
    auto& s = c.store();
    const auto& k = c.contract();
    json r;
    r["format"] = format_json(kReportFormat);
    r["campaign"] = {{"name", s.meta("name").value_or("")},
                     {"id", s.meta("id").value_or("")},
                     {"dir", c.dir().string()},
                     {"contract", k.file.string()},
                     {"state", campaign_state(c)}};
    auto use = c.budget_use();
    r["budget"] = {{"trials_used", use.trials},
                   {"trials", k.budget.trials},
                   {"node_hours_used", use.node_hours},
                   {"node_hours", k.budget.node_hours},
                   {"wall_s", use.wall_s},
                   {"wall_time_s", k.budget.wall_time_s}};
    // The baseline's settings: what the trial table marks a trial's settings against.
    r["baseline_knobs"] = k.space.baseline().to_json().value("knobs", json::object());
    r["memory_limit_bytes"] =
        contract::modeled_memory_limit_bytes(k.resources); // the limit OOMs are censored at
    r["sources"] = sources_json(k);
    // What the seeds checked: a job that ignores the seed it is given (or is given none) ran every check "at
    // a fresh seed" at one seed in effect, and no record here may say otherwise.
    const std::string unseeded = c.equivalence().seeds_not_reaching_job();
    add_baseline(r, c, unseeded);
    auto trials = s.trials();
    add_outcomes(r, c, trials);
    // Each patch by the checks it met (patch_state): the scope check at init (or at the agent's answer), the
    // equivalence checks of the patch sets it was in.
    const auto checks = s.equivalence_checks();
    json patches = json::array();
    for (const auto& p : s.patches())
        patches.push_back(patch_json(p, checks));
    r["patches"] = patches;
    if (c.contract().agent.enabled() || !s.agent_calls().empty()) r["agent"] = agent_json(c, checks);
    add_verifications(r, c, trials, unseeded);
    json ts = json::array();
    for (const auto& t : trials)
        ts.push_back(trial_json(t));
    r["trials"] = ts;
    return r;
}

namespace {
// Each A/B pair's order and node, and the re-check in a fresh allocation.
std::string pair_lines(const json& v, const std::string& indent) {
    std::string o;
    auto pairs = [&](const json& ps) {
        std::string s;
        for (const auto& p : ps)
            s += fmt::format(
                " {}:{} on {}{} ({:.4f}/{:.4f} s);", p.value("pair", 0), p.value("order", "?"),
                p.value("baseline_node", std::string("?")),
                p.value("same_node", false) ? "" : fmt::format(" / {}", p.value("candidate_node", "?")),
                p.value("baseline_step_s", 0.0), p.value("candidate_step_s", 0.0));
        return s;
    };
    if (v.contains("pairs") && !v["pairs"].empty())
        o += indent + "pairs (order, node, baseline/candidate s/step):" + pairs(v["pairs"]) + "\n";
    if (v.contains("sequence") && v["sequence"].is_array() && !v["sequence"].empty()) {
        o += indent + "sequence of looks (pairs: speed-up [one-sided bounds] -> next):";
        for (const auto& l : v["sequence"])
            o += fmt::format(" {}{}: {} -> {};", l.value("pairs", 0),
                             l.value("stage", "") == "recheck" ? " (re-check)" : "",
                             verify::look_text(json_number_or(l, "estimate", NAN),
                                               json_number_or(l, "lo", -INFINITY),
                                               json_number_or(l, "hi", INFINITY)),
                             l.value("next", "?"));
        o += "\n";
    }
    const auto& rc = v.value("recheck", json());
    // An end of the interval that was infinite was stored as null (JSON has no infinity).
    auto ci_end = [](const json& r, std::size_t i, double if_not) {
        const auto& ci = r.value("ci", json());
        return ci.is_array() && ci.size() == 2 && ci[i].is_number() ? ci[i].get<double>() : if_not;
    };
    if (rc.is_object() && rc.contains("pairs"))
        o += fmt::format("{}re-check in a fresh allocation: {} ({:.3f}x [{:.3f}, {:.3f}]):{}\n", indent,
                         v.value("reproduced", json()) == json(true) ? "reproduced" : "DID NOT reproduce",
                         json_number_or(rc, "speedup", NAN), ci_end(rc, 0, -INFINITY),
                         ci_end(rc, 1, INFINITY), pairs(rc["pairs"]));
    else if (rc.is_object() && rc.value("skipped", false))
        o += indent + "re-check in a fresh allocation: not run (budget): not promoted\n";
    return o;
}

std::string render_loss_comparison(const json& l) {
    if (!l.is_object()) return {};
    std::string o =
        fmt::format("      loss invariant ({}, tolerance {:.3g} relative): ", l["mode"].get<std::string>(),
                    l["tolerance"].get<double>());
    if (l.contains("summary"))
        o += fmt::format("{}: baseline {:.6g}, candidate {:.6g}; ", l["summary"]["what"].get<std::string>(),
                         l["summary"]["baseline"].get<double>(), l["summary"]["candidate"].get<double>());
    o += fmt::format("per step ({} vs candidate):", l.value("reference", "baseline reference"));
    for (const auto& st : l["steps"])
        o += fmt::format(" {}: {:.6g}/{:.6g}", st["step"].get<int>(), st["baseline"].get<double>(),
                         st["candidate"].get<double>());
    return o + "\n";
}

// The spot check of a verification stage with patches (campaign/verification_stage.cpp): one pair's candidate
// run against the candidate's knobs without its patches at that pair's seed.
std::string render_spot_check(const json& s, const std::string& stage) {
    if (!s.is_object() || !s.contains("state")) return {};
    const auto got = fmt::format("{}, largest difference {} (tolerance {:.3g})", s.value("state", ""),
                                 s.contains("max_relative") && s["max_relative"].is_number()
                                     ? fmt::format("{:.3g}", s["max_relative"].get<double>())
                                     : std::string("-"),
                                 s.value("tolerance", 0.0));
    std::string o =
        s.value("knobs_moved", false)
            ? fmt::format("      spot check{}: the patch set vs {} without it (its knobs do not fit without "
                          "it) at pair {}'s seed {}: {}\n",
                          stage, s.value("knobs", std::string()), s.value("pair", 0), s.value("seed", 0LL),
                          got)
            : fmt::format(
                  "      spot check{}: pair {}'s candidate run vs its knobs without the patches at seed "
                  "{}: {}\n",
                  stage, s.value("pair", 0), s.value("seed", 0LL), got);
    if (s.contains("seed_note")) o += "        " + s["seed_note"].get<std::string>() + "\n";
    return o;
}

std::string render_equivalence(const json& e, bool has_patches) {
    if (!has_patches) return "      equivalence: no patches (knob changes only)\n";
    if (!e.is_object()) return "      equivalence: NOT CHECKED\n";
    std::string o = fmt::format(
        "      equivalence apart from knobs: {} at seed {} ({}), tolerance {:.3g} relative ({}), largest "
        "difference {}{}\n",
        e.value("state", ""), e.value("seed", 0LL), e.value("seed_note", ""), e.value("tolerance", 0.0),
        e.value("tolerance_key", ""),
        e.contains("max_relative") && e["max_relative"].is_number()
            ? fmt::format("{:.3g}", e["max_relative"].get<double>())
            : std::string("-"),
        e.value("math_changing", false) ? "; FLAGGED: a patch is tagged math_changing" : "");
    if (e.value("knobs_moved", false))
        o += fmt::format("        at {}: {}\n", e.value("knobs", std::string()),
                         e.value("knobs_note", std::string()));
    if (e.contains("values")) {
        const bool numbered = !e["values"].empty() && e["values"][0].contains("job_step");
        o += numbered ? "        per step, as the job numbers its steps (baseline vs patch set):"
                      : "        per step (baseline vs patch set):";
        for (const auto& st : e["values"])
            o += fmt::format(" {}: {:.9g}/{:.9g}",
                             st.contains("job_step")     ? std::to_string(st["job_step"].get<int>())
                             : st["step"].get<int>() > 0 ? std::to_string(st["step"].get<int>())
                                                         : "eval",
                             st["baseline"].get<double>(), st["candidate"].get<double>());
        o += "\n";
    }
    return o;
}

// A detail of several lines (a compiler's error, its source line and caret) under its trial's line.
std::string indented(std::string s) {
    for (auto at = s.find('\n'); at != std::string::npos; at = s.find('\n', at + 1))
        s.insert(at + 1, "        ");
    return s;
}

// A patch's state (patch_json) in words.
std::string patch_state_text(const std::string& state) {
    return state == "scope_accepted"        ? "accepted by the scope check"
           : state == "equivalence_refused" ? "REFUSED by the equivalence check"
                                            : "REFUSED by the scope check";
}

std::string render_ablation(const json& a) {
    if (!a.is_object()) return "      attribution: not measured\n";
    std::string o = fmt::format("      attribution ({}):\n", a.value("state", ""));
    for (const auto& comp : a.value("components", json::array())) {
        if (comp.value("state", "") == "measured")
            o += fmt::format("        {}: {:.3f}x [{:.3f}, {:.3f}] ({}){}\n", comp["name"].get<std::string>(),
                             comp["effect"].get<double>(), comp["lo"].get<double>(), comp["hi"].get<double>(),
                             comp.value("measured_by", ""),
                             comp.value("carries", false) ? ": carries gain" : ": no measurable gain");
        else
            o += fmt::format("        {}: {} {}\n", comp["name"].get<std::string>(), comp.value("state", ""),
                             comp.value("why", ""));
    }
    for (const auto& sk : a.value("skipped", json::array()))
        o += fmt::format("        {}: skipped: {}\n", sk["name"].get<std::string>(),
                         sk["why"].get<std::string>());
    if (a.contains("note")) o += "        " + a["note"].get<std::string>() + "\n";
    return o;
}

} // namespace

namespace {
// The doctor's baseline: its step time, MFU and its denominator, noise, slow nodes, phases.
std::string render_baseline(const json& r) {
    std::string o;
    const auto& b = r["baseline"];
    o += fmt::format(
        "Baseline (doctor, {} runs): {} s/step steady, cold start {} s/step, MFU {}, noise CV {:.2f}%, "
        "minimum detectable effect {:.2f}%\n",
        b["completed"].get<int>(), fmt_opt(b["median_step_s"]), fmt_opt(b["cold_step_s"]),
        b.contains("mfu") ? fmt_opt(b["mfu"], "{:.4f}")
        : b.contains("job_mfu")
            ? fmt_opt(b["job_mfu"], "unknown (the job's own figure {:.4f} is over a peak the job assumes, "
                                    "not one measured here)")
            : std::string("unknown"),
        100 * b["cv_between"].get<double>(), 100 * b["minimum_detectable_effect"].get<double>());
    if (b.contains("peak_flops") && b.contains("model_flops_per_step") && b.value("peak_flops_by_job", false))
        o += fmt::format("  the job's MFU figures imply a peak of {:.4g} FLOP/s: its assumption, not this "
                         "hardware's; the speed-ups below are measured, no MFU is\n",
                         b["peak_flops"].get<double>());
    else if (b.contains("peak_flops") && b.contains("model_flops_per_step"))
        o += fmt::format("  MFU denominator (one for the baseline and every candidate): {:.4g} FLOP/s, {}; "
                         "model FLOPs a step {:.4g} (the baseline's)\n",
                         b["peak_flops"].get<double>(), b.value("peak_flops_source", std::string()),
                         b["model_flops_per_step"].get<double>());
    if (r.contains("slow_nodes"))
        o += fmt::format("  slow nodes, kept off after the doctor (their GPUs more than 1.5x slower than the "
                         "median node's): {}\n",
                         fmt::join(r["slow_nodes"].get<std::vector<std::string>>(), ", "));
    if (b.contains("phases") && b["phases"].is_object()) {
        o += "  phases (median s/step):";
        for (const auto& [k, v] : b["phases"].items())
            o += fmt::format(" {}={:.4f}", k, v.get<double>());
        o += "\n";
    }
    return o;
}

// A promoted change: its speed-up, MFU, pairs, how to apply it, its patches and every check it passed.
std::string render_promoted(const json& p) {
    std::string o;
    o += fmt::format(
        "  {}\n    speed-up {:.3f}x (one-sided bounds {:.3f}-{:.3f} at the rule's level) over {} "
        "counterbalanced A/B pairs ({} in the first stage); "
        "{:.4f} -> {:.4f} s/step; MFU {} -> {}\n",
        p["candidate"].get<std::string>(), p["speedup"].get<double>(), p["speedup_ci"][0].get<double>(),
        p["speedup_ci"][1].get<double>(),
        p.contains("sequence") && !p["sequence"].empty() ? p["sequence"].back().value("pairs", 0)
                                                         : static_cast<int>(p["pairs"].size()),
        p["pairs"].size(), p["baseline_step_s"].get<double>(), p["candidate_step_s"].get<double>(),
        mfu_text(p["baseline_mfu"]), mfu_text(p["candidate_mfu"]));
    if (p.contains("mfu") && p["mfu"].value("peak_flops_by_job", false)) {
        o += "    MFU: unknown (the job's own figures are over a peak it assumes, not one measured "
             "here)\n";
    } else if (p.contains("mfu")) {
        const auto& m = p["mfu"];
        o += fmt::format("    MFU denominator {:.4g} FLOP/s, {}; {:.4g} model FLOPs a step",
                         m["peak_flops"].get<double>(), m["peak_flops_source"].get<std::string>(),
                         m["model_flops_per_step"].get<double>());
        if (m["baseline"].is_number() && m["candidate"].is_number())
            o += fmt::format(": MFU ratio {:.3f} = the speed-up at fixed model FLOPs\n",
                             m["candidate"].get<double>() / m["baseline"].get<double>());
        else
            o += fmt::format(": MFU unknown where {}\n", m.value("unknown", std::string("above 1")));
    }
    o += pair_lines(p, "    ");
    o += apply_lines(p, "    ");
    for (const auto& patch : p["patches"])
        o += fmt::format("    patch {}: {} (diff {})\n", patch["id"].get<std::string>(),
                         patch["description"].get<std::string>(), patch["diff"].get<std::string>());
    o += "    supporting search trials:";
    for (const auto& t : p["supporting_trials"])
        o += fmt::format(" #{} ({} s/step)", t["id"].get<int>(), fmt_opt(t["step_s"]));
    o += "\n    checks passed:\n";
    o += "      A/B verification:";
    for (const auto& e : p["evidence"])
        o += " " + e.get<std::string>() + ";";
    o += "\n";
    o += render_loss_comparison(p.value("loss_comparison", json()));
    o += render_equivalence(p.value("equivalence", json()), !p["patches"].empty());
    o += render_spot_check(p.value("spot_check", json()), "");
    if (p.value("recheck", json()).is_object())
        o += render_spot_check(p["recheck"].value("spot_check", json()), " (re-check)");
    o += render_ablation(p.value("ablation", json()));
    return o;
}

// Whether the checks' seeds reached the job.
std::string render_seeds(const json& r) {
    std::string o;
    if (r.contains("seeds") && !r["verifications"].empty())
        o +=
            r["seeds"]["reach_job"].get<bool>()
                ? "\nSeeds: each equivalence check, A/B pair and spot check ran at a seed drawn for it, and "
                  "no settings printed the same losses at three seeds: a patch that replays an earlier run's "
                  "losses prints another seed's and fails\n"
                : fmt::format("\nSeeds: {}. The equivalence and spot checks ran at one seed: a candidate "
                              "replaying an earlier run's output is not excluded by seeds (only a patch that "
                              "changes the math at that seed is)\n",
                              r["seeds"]["why"].get<std::string>());
    return o;
}

// Every verification and its decision.
std::string render_verifications(const json& r) {
    std::string o;
    o += "\nVerifications:\n";
    if (r["verifications"].empty())
        o += "  no candidate reached verification" +
             (r.contains("none_promoted") && r["none_promoted"]["reason"] == "none_verified"
                  ? std::string(": see Promoted changes above")
                  : std::string()) +
             "\n";
    for (const auto& v : r["verifications"]) {
        o += fmt::format("  {}: {} {}\n", v["candidate"].get<std::string>(),
                         v["promoted"].get<bool>()           ? "PROMOTED"
                         : v.value("state", "") == "skipped" ? "skipped"
                         : v.value("state", "") == "recheck" ? "being re-checked"
                                                             : "rejected",
                         v["speedup"].is_number() ? fmt::format("{:.3f}x", v["speedup"].get<double>()) : "");
        for (const auto& why : v["reasons"])
            o += "    - " + why.get<std::string>() + "\n";
        if (!v["promoted"].get<bool>()) o += pair_lines(v, "    ");
    }
    return o;
}

// Each patch by the checks it met.
std::string render_patches(const json& r) {
    std::string o;
    if (!r["patches"].empty())
        o +=
            "\nPatches (the scope check: the files a patch may touch; the equivalence check: the same losses "
            "as without it at a fresh seed):\n";
    for (const auto& p : r["patches"]) {
        const auto state = p["state"].get<std::string>();
        o += fmt::format("  {} {}", p["id"].get<std::string>(), patch_state_text(state));
        if (state != "scope_accepted") o += ": " + p["refused_because"].get<std::string>();
        for (const auto& e : p.value("equivalence", json::array()))
            if (state == "scope_accepted" || e["patches"].size() > 1)
                o += fmt::format("; equivalence of {}: {}",
                                 fmt::join(e["patches"].get<std::vector<std::string>>(), "+"),
                                 e["state"].get<std::string>());
        o += "\n";
    }
    return o;
}

// The agent's calls and its claims against what was measured.
std::string render_agent(const json& a) {
    std::string o;
    o += fmt::format("\nAgent {}: {} calls, {} tokens, cost {:.2f}, {:.1f} s\n", a["name"].get<std::string>(),
                     a["calls"].size(), a["tokens"].get<long long>(), a["cost"].get<double>(),
                     a["seconds"].get<double>());
    for (const auto& call : a["calls"]) {
        o += fmt::format("  call {} ({}): {}{}; {} patches offered, {} accepted\n", call["call"].get<int>(),
                         call["trigger"].get<std::string>(), call["outcome"].get<std::string>(),
                         call["reason"].get<std::string>().empty() ? ""
                                                                   : ": " + call["reason"].get<std::string>(),
                         call["offered"].get<int>(), call["accepted"].get<int>());
        if (call.value("measured_patches", 0) > 0)
            o += fmt::format("    its claims off by {:.0f}% over {} measured patches\n",
                             100 * std::expm1(call["calibration_error"].get<double>()),
                             call["measured_patches"].get<int>());
    }
    if (const auto& cal = a["calibration"]; cal["pairs"].get<int>() > 0)
        o += fmt::format("  calibration over {} measured patches ({} from the experience bank): claims off "
                         "by {:.0f}% (mean |log claimed - log measured|), next claims discounted x{:.2f}\n",
                         cal["pairs"].get<int>(), cal.value("bank_pairs", 0),
                         100 * std::expm1(cal["speedup_error"].get<double>()),
                         cal["speedup_discount"].get<double>());
    for (const auto& p : a["claims"]) {
        if (!p.contains("claimed")) continue;
        o += fmt::format("  {}: claimed {:.2f}x", p["id"].get<std::string>(),
                         p["claimed"]["speedup"].get<double>());
        o += p.contains("measured")
                 ? fmt::format(", measured {:.2f}x over {} pairs of trials\n",
                               p["measured"]["speedup"].get<double>(), p["measured"]["pairs"].get<int>())
             : p["state"] != "scope_accepted" ? ", " + patch_state_text(p["state"].get<std::string>()) + "\n"
             : p.contains("broke_contract")
                 ? ", its trial broke the contract (" + p["broke_contract"].get<std::string>() + ")\n"
                 : std::string(", not measured alone\n");
    }
    return o;
}

// The trials by outcome, what the failed ones cost, what the jobs' files took.
std::string render_costs(const json& r) {
    std::string o;
    o += "\nTrials by outcome (cost in node-seconds):\n";
    for (const auto& [k, v] : r["outcomes"].items())
        o += fmt::format("  {:<20} {:>4}  {:>9.1f}\n", k, v.get<int>(), r["cost_node_s"].value(k, 0.0));
    // A trial stopped as slower than the incumbent is a measured search step, not a failure of the candidate:
    // its cost is said apart from the failures'.
    const std::string stopped = trial::to_string(trial::Outcome::StoppedSlow);
    double failed = 0;
    for (const auto& [k, v] : r["failed_cost_node_s"].items())
        if (k != stopped) failed += v.get<double>();
    const double total = r["total_cost_node_s"].get<double>();
    o += fmt::format("  failed trials cost {:.1f} of {:.1f} node-seconds ({:.1f}%)\n", failed, total,
                     total > 0 ? 100 * failed / total : 0.0);
    if (r["failed_cost_node_s"].contains(stopped))
        o += fmt::format("  trials stopped early as slower than the incumbent cost {:.1f} node-seconds\n",
                         r["failed_cost_node_s"][stopped].get<double>());
    if (r.contains("job_files_removed")) {
        const auto& jf = r["job_files_removed"];
        o += fmt::format(
            "  files the jobs wrote in their trial directories, removed once read: {} in {} trials, "
            "{:.1f} MiB ([workload] keep_job_files = \"{}\")\n",
            jf["entries"].get<std::uint64_t>(), jf["trials"].get<std::uint64_t>(),
            jf["bytes"].get<std::uint64_t>() / 1048576.0, jf["keep_job_files"].get<std::string>());
    }
    return o;
}

// The experience bank's seeds for this hardware.
std::string render_bank(const json& r) {
    std::string o;
    if (r.contains("bank")) {
        const auto& bk = r["bank"];
        o += fmt::format("\nExperience bank {}: {}; {} seeds for this hardware{}\n",
                         bk["path"].get<std::string>(), bank::describe_match(bk["hardware"]),
                         bk["seeds"].size(),
                         bk["findings_recorded"].get<bool>() ? "; this campaign's findings recorded" : "");
        for (const auto& sd : bk["seeds"])
            o += fmt::format("  seed {}: {}\n", space::Candidate::from_json(sd["candidate"]).describe(),
                             sd["reason"].get<std::string>());
    }
    return o;
}

std::string render_warnings(const json& r) {
    std::string o;
    // Warnings on trials: jobs the user submitted while they ran (possibly from inside the trial, outside its
    // private view).
    std::string warnings;
    for (const auto& t : r["trials"]) {
        if (!t.contains("self_submitted_jobs")) continue;
        std::string jobs;
        for (const auto& j : t["self_submitted_jobs"])
            jobs += fmt::format("{}{} ({}, submitted {})", jobs.empty() ? "" : ", ", j.value("job", ""),
                                j.value("state", ""), j.value("submitted", ""));
        warnings +=
            fmt::format("  trial #{}: jobs submitted while it ran that the campaign did not submit: {}\n",
                        t["id"].get<int>(), jobs);
    }
    if (!warnings.empty()) o += "\nWarnings:\n" + warnings;
    return o;
}

// The search trials, one line each.
std::string render_search_trials(const json& r) {
    std::string o;
    o += "\nSearch trials (step time, and over its batch's control's: the ratio the search compares):\n";
    for (const auto& t : r["trials"]) {
        if (t["kind"] != "search") continue;
        o += fmt::format("  #{:<4} {:<19} {:>8} s/step {:>7}  {:>8} MiB  {}{}\n", t["id"].get<int>(),
                         t["outcome"].get<std::string>(), fmt_opt(t["step_s"]),
                         t.value("ratio_to_control", json()).is_number()
                             ? fmt::format("{:.3f}", t["ratio_to_control"].get<double>())
                             : "-",
                         t["peak_memory_bytes"].is_number()
                             ? fmt::format("{:.0f}", t["peak_memory_bytes"].get<double>() / (1 << 20))
                             : "-",
                         t["candidate"].get<std::string>(),
                         t["outcome"] == "ok" ? "" : "  (" + indented(t["detail"].get<std::string>()) + ")");
    }
    return o;
}

} // namespace

std::string render(const json& r) {
    std::string o;
    o += fmt::format("InfraRSI report: campaign {} ({})\n", r["campaign"]["name"].get<std::string>(),
                     r["campaign"]["dir"].get<std::string>());
    o += fmt::format("contract: {}\nstate: {}\n\n", r["campaign"]["contract"].get<std::string>(),
                     r["campaign"]["state"].get<std::string>());
    if (r.contains("sources")) {
        const auto& src = r["sources"];
        o += fmt::format("Where the figures come from:\n  steps: {}\n  memory: {}\n  memory prior: {}\n\n",
                         src["steps"].get<std::string>(), src["memory"].get<std::string>(),
                         src["memory_prior"].get<std::string>());
    }
    if (r.contains("baseline")) o += render_baseline(r);
    o += "\nPromoted changes:\n";
    if (r["promoted"].empty() && r.contains("none_promoted"))
        o += "  " + r["none_promoted"]["text"].get<std::string>() + "\n";
    for (const auto& p : r["promoted"])
        o += render_promoted(p);
    o += render_seeds(r);
    o += render_verifications(r);
    o += render_patches(r);
    if (r.contains("agent")) o += render_agent(r["agent"]);
    o += render_costs(r);
    o += render_bank(r);
    o += render_warnings(r);
    o += render_search_trials(r);
    const auto& b = r["budget"];
    o += fmt::format("\nBudget used: {} of {} trials, {:.3f} node-hours, {:.0f} s wall\n",
                     b["trials_used"].get<int>(), b["trials"].get<int>(), b["node_hours_used"].get<double>(),
                     b["wall_s"].get<double>());
    return o;
}

std::string sbatch_snippet(const std::map<std::string, std::string>& env, bool with_patches,
                           const std::vector<std::string>& sbatch_options,
                           const std::vector<std::string>& args, const std::string& title) {
    std::string out = "# InfraRSI: " + (title.empty() ? std::string("promoted settings") : title) + ".\n";
    if (!sbatch_options.empty()) {
        out += "# sbatch options: with your script's other #SBATCH lines, before its first command (they\n"
               "# replace the same options there).\n";
        for (const auto& opt : sbatch_options)
            out += "#SBATCH " + opt + "\n";
    }
    if (!env.empty()) out += "# Before the launch line:\n";
    for (const auto& [k, val] : env)
        out += "export " + k + "=" + shell_quote(val) + "\n";
    if (!args.empty())
        out += "# Arguments of your job's command (after its own; they replace the same options there):\n"
               "infrarsi_args=(" +
               shell_join(args) + ")\n# e.g.  srun python train.py ... \"${infrarsi_args[@]}\"\n";
    if (with_patches)
        out += "# Build the workload with the patch series in infrarsi-patches/ applied (see series).\n";
    return out;
}

namespace {
// infrarsi-patches/: the promoted patch series, numbered in order, and its series file.
void write_patch_series(campaign::Campaign& c, const space::Candidate& cand, const fs::path& target,
                        std::vector<fs::path>& written) {
    fs::path pdir = target / "infrarsi-patches";
    fs::create_directories(pdir);
    std::string series;
    int n = 0;
    for (const auto& id : cand.patches) {
        const auto* p = c.patch_info(id);
        if (!p)
            throw Error("promoted patch '" + id + "' is not in the catalog",
                        c.contract().patch_catalog.string(), "the catalog as at init");
        auto name = fmt::format("{:04d}-{}.patch", ++n, id);
        fs::copy_file(p->file, pdir / name, fs::copy_options::overwrite_existing);
        series += name + "\n";
        written.push_back(pdir / name);
    }
    write_file_atomically(pdir / "series", series);
    written.push_back(pdir / "series");
}

// A branch of the user's repository with the series applied, made in a separate worktree so the user's
// checkout is not touched. Returns the worktree.
fs::path apply_to_branch(campaign::Campaign& c, const space::Candidate& cand, const ApplyOptions& o) {
    fs::path wt = o.target / "infrarsi-worktree";
    auto git = [&](std::vector<std::string> args, const fs::path& cwd) {
        args.insert(args.begin(), "git");
        ProcessOptions po;
        po.cwd = cwd.string();
        auto r = run_process(args, po);
        if (!r.ok()) throw Error("git failed: " + r.err, describe_command(args), "a git repository");
    };
    git({"worktree", "add", "-b", o.git_branch, wt.string()}, o.git_repo);
    auto rel = fs::relative(c.contract().workload.source, o.git_repo);
    for (const auto& id : cand.patches) {
        const auto* p = c.patch_info(id);
        auto r = run_process(
            {"patch", "-p1", "--batch", "--fuzz=0", "-d", (wt / rel).string(), "-i", p->file.string()});
        if (!r.ok())
            throw Error("patch " + id + " does not apply: " + r.out, (wt / rel).string(),
                        "the baseline tree");
    }
    fs::copy_file(o.target / "infrarsi.env", wt / rel / "infrarsi.env", fs::copy_options::overwrite_existing);
    git({"add", "-A", "."}, wt / rel);
    git({"-c", "user.name=infrarsi", "-c", "user.email=infrarsi@localhost", "commit", "-q", "-m",
         "InfraRSI: promoted change " + cand.describe()},
        wt);
    return wt;
}
} // namespace

std::vector<fs::path> apply(campaign::Campaign& c, const ApplyOptions& o) {
    auto& s = c.store();
    auto promos = s.promotions();
    if (promos.empty())
        throw Error("nothing was promoted", c.dir().string(),
                    "a finished campaign with a verified change (see infrarsi report)");
    store::VerificationRow v;
    for (const auto& x : s.verifications())
        if (x.id == promos[0].first) v = x;
    auto cand = space::Candidate::from_json(v.candidate);
    std::vector<fs::path> written;
    fs::create_directories(o.target);
    const auto job = space::render(c.contract().space, cand);
    const auto& env = job.environment;
    const auto& args = job.arguments;
    const auto& options = job.sbatch_options;
    for (const auto& [k, val] : env)
        if (val.find_first_of("\n\r") != std::string::npos)
            throw Error("the value of " + k + " holds a line break",
                        "campaign " + s.meta("name").value_or(""),
                        "single-line values (an env file has one variable per line)");
    const std::string title = "promoted settings of campaign " + s.meta("name").value_or("") +
                              fmt::format(" ({:.3f}x, 95% CI {:.3f}-{:.3f})", v.speedup.value_or(0),
                                          v.lo.value_or(0), v.hi.value_or(0));
    {
        // K=V lines, values shell-quoted: `set -a; . infrarsi.env` and systemd's EnvironmentFile read them.
        fs::path p = o.target / "infrarsi.env";
        std::string out = "# InfraRSI: " + title + "\n";
        for (const auto& [k, val] : env)
            out += k + "=" + shell_quote(val) + "\n";
        write_file_atomically(p, out);
        written.push_back(p);
    }
    {
        // Sourced by a shell: every value single-quoted, so a space or $(...) in a choice stays a value.
        fs::path p = o.target / "infrarsi-sbatch-snippet.sh";
        write_file_atomically(p, sbatch_snippet(env, !cand.patches.empty(), options, args, title));
        written.push_back(p);
    }
    write_patch_series(c, cand, o.target, written);
    if (!o.git_branch.empty()) {
        written.push_back(apply_to_branch(c, cand, o));
    }
    s.log("applied " + cand.describe() + " to " + o.target.string());
    return written;
}

} // namespace infrarsi::report
