// The doctor stage: run the baseline `repeats.doctor` times and turn the runs into the typed Baseline (step
// time, cold start, phases, noise and minimum detectable effect, reference losses) every later stage uses.
#include "campaign/doctor_stage.hpp"

#include "measure/noise.hpp"
#include "measure/statistics.hpp"
#include "node/allocation_record.hpp"
#include "node/calibration.hpp"
#include "node/gpu.hpp"
#include "node/topology.hpp"
#include "trial/proof.hpp"
#include "util/error.hpp"
#include "verify/verify.hpp"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <functional>
#include <map>
#include <set>

namespace infrarsi::campaign {

namespace fs = std::filesystem;

using nlohmann::json;
using store::TrialKind;
using store::TrialState;

namespace {

json opt(const std::optional<double>& v) {
    return v ? json(*v) : json();
}

} // namespace

namespace {

// What the doctor's runs measured, run by run: the complete ones' samples (a run is complete when it ran
// every step with a step time and losses), every run's record, and why the others are not.
struct DoctorSamples {
    std::vector<double> medians, within, colds, tps, mfus, peaks, model_flops, peak_flops;
    std::vector<std::vector<double>> losses;
    std::vector<double> eval_losses;
    std::vector<double> startups; // elapsed (evidence) - reported step times, per run
    std::set<std::string> startup_sources;
    std::vector<double> paces; // step times claimed over the time seen between step lines, per run
    std::map<std::string, std::vector<double>> phases;
    json runs = json::array();
    std::string failures;
};

// `submitted(t)`: the run is the job the user submitted, whose timing, noise and memory count but whose
// losses, startup and pace are its own (its seed and steps), not the campaign's.
DoctorSamples doctor_samples(const std::vector<store::TrialRow>& trials, const contract::Invariants& inv,
                             const std::function<bool(const store::TrialRow&)>& submitted) {
    DoctorSamples d;
    for (const auto& t : trials) {
        d.runs.push_back({{"trial", t.id},
                          {"node", t.node},
                          {"outcome", store::outcome_name(t)},
                          {"step_s", opt(t.step_time_s)},
                          {"cold_step_s", opt(t.cold_step_s)},
                          {"detail", t.detail}});
        bool complete = (t.outcome == trial::Outcome::Ok || t.outcome == trial::Outcome::ContractViolation) &&
                        t.step_time_s && t.measurements.losses &&
                        static_cast<int>(t.measurements.losses->size()) >= inv.steps;
        if (!complete) {
            d.failures += fmt::format("{}trial {}: {} {}", d.failures.empty() ? "" : "; ", t.id,
                                      store::outcome_name(t), t.detail);
            continue;
        }
        d.medians.push_back(*t.step_time_s);
        // Robust: one slow step (an evaluation, a checkpoint) must not make every candidate undetectable.
        d.within.push_back(measure::robust_cv(t.measurements.steady_samples));
        d.colds.push_back(t.cold_step_s.value_or(0));
        if (t.tokens_per_s) d.tps.push_back(*t.tokens_per_s);
        if (t.mfu) d.mfus.push_back(*t.mfu);
        if (t.measurements.model_flops) d.model_flops.push_back(*t.measurements.model_flops);
        if (t.measurements.peak_flops) d.peak_flops.push_back(*t.measurements.peak_flops);
        if (t.peak_memory_bytes) d.peaks.push_back(*t.peak_memory_bytes);
        // The reference losses come from the runs the campaign started, with the contract's seed and steps.
        if (!submitted(t)) {
            // The startup the timing check allows later trials (trial/proof.hpp): only runs through the trial
            // wrapper, as every later trial is run.
            const auto& m = t.measurements;
            if (m.evidence && m.evidence->elapsed_s && m.reported_step_s) {
                d.startups.push_back(*m.evidence->elapsed_s - *m.reported_step_s);
                d.startup_sources.insert(m.evidence->source);
            }
            if (m.step_pace) d.paces.push_back(*m.step_pace);
            d.losses.push_back(*m.losses);
            if (m.eval_loss) d.eval_losses.push_back(*m.eval_loss);
        }
        for (const auto& [k, v] : t.measurements.phases)
            d.phases[k].push_back(v);
    }
    return d;
}

// loss_mode final_eval: the baseline's final evaluation losses, which calibrate the tolerance, logged; and a
// warning where runs at different seeds printed the same loss.
void log_final_eval(store::CampaignStore& store, const contract::Invariants& inv,
                    const std::vector<double>& eval_losses, std::size_t completed, const fs::path& dir) {
    if (eval_losses.size() < 2)
        throw Error(
            fmt::format("loss_mode final_eval needs the final evaluation loss of at least 2 baseline "
                        "runs, and {} of {} printed one",
                        eval_losses.size(), completed),
            dir.string(),
            "a job that evaluates at its end, in the [metrics] format (docs/contract.md, loss modes)");
    const auto ref = verify::eval_reference(eval_losses);
    store.log(fmt::format("doctor: final evaluation loss {:.6g} +- {:.3g} (sd over {} seeds); tolerance "
                          "{:.3g}",
                          ref.mean, ref.sd, ref.runs, verify::eval_tolerance(ref, inv)));
    // Runs at different seeds that agree to the last printed digit: the seed most likely never reached
    // the job (unmodified nanoGPT hard-codes torch.manual_seed(1337) and has no seed setting), and the
    // tolerance is the contract's floor, not a measured spread. Say so where the user reads it.
    if (ref.runs >= 2 && ref.sd == 0.0)
        store.log(fmt::format(
            "doctor: warning: the {} baseline runs at seeds {}..{} printed the same final evaluation "
            "loss "
            "{:.6g}: does the job read {}? The loss tolerance is the floor loss_tolerance x |mean| = "
            "{:.3g}, not calibrated from a spread",
            ref.runs, inv.seed, inv.seed + ref.runs - 1, ref.mean,
            inv.seed_env.empty() ? inv.seed_arg : "$" + inv.seed_env, verify::eval_tolerance(ref, inv)));
}

// The startup the timing check allows later trials, and the step pace they are held to (trial/proof.hpp),
// from the baseline's runs through the trial wrapper; each logged.
void record_startup_and_pace(store::CampaignStore& store, const DoctorSamples& d) {
    if (auto startup = trial::measure_startup(d.startups)) {
        // Runs with one kind of evidence; mixed: no startup applies to every trial, the check is off.
        startup->source = d.startup_sources.size() == 1 ? *d.startup_sources.begin() : "mixed";
        store.set_startup(*startup);
        store.log(
            startup->wall_clock
                ? fmt::format("doctor: startup {:.3f} s (spread {:.3f} s over {} runs): the elapsed time "
                              "the evidence saw, less the step times the job reported",
                              startup->median_s, startup->spread_s, startup->runs)
                : fmt::format("doctor: the baseline's step times add up to {:.3f} s more than the "
                              "elapsed time the evidence saw: they are not wall-clock time, and the "
                              "timing check is off for this campaign",
                              -startup->median_s));
    }
    // The pace later trials are held to (trial/proof.hpp, check_pace): the median of the baseline's runs.
    if (!d.paces.empty()) {
        const double pace = measure::median(d.paces);
        store.set_step_pace(pace, static_cast<int>(d.paces.size()));
        store.log(
            pace <= trial::kWallClockPaceCeiling
                ? fmt::format(
                      "doctor: step pace {:.3f} (step times claimed over the time seen between step "
                      "lines, median of {} runs): a trial outside {:.3f}-{:.3f} is a timing violation",
                      pace, d.paces.size(), trial::kPaceFloor * pace, trial::kPaceCeiling * pace)
                : fmt::format("doctor: step pace {:.3f}: the step times claim more than passed between step "
                              "lines (not wall-clock time): a trial at or below {:.3f} is a timing violation",
                              pace, trial::kWallClockPaceCeiling));
    }
}

// The baseline's MFU denominator (the contract's peak, else the node's calibration, else the peak the job's
// own MFU figure implies) and its MFU; unknown, and said so, when that peak is below what the baseline
// achieved. `calibration` is asked only where the contract declares no peak.
void set_mfu_denominator(store::Baseline& d, store::CampaignStore& store, double contract_peak,
                         const std::function<std::optional<verify::PeakFlops>()>& calibration,
                         const std::vector<double>& reported_peaks) {
    std::optional<verify::PeakFlops> reported;
    if (!reported_peaks.empty())
        reported = verify::PeakFlops{
            measure::median(reported_peaks),
            fmt::format("the peak the job's own MFU figure implies (median of the doctor's {} baseline "
                        "runs; the job's assumption, not a measurement of this hardware; no calibration "
                        "record of the node)",
                        reported_peaks.size()),
            true};
    // No achieved figure here: a peak below what the baseline achieved is wrong (a probe on busy cores),
    // and the MFU is then unknown, not achieved / achieved = 1.
    const double achieved = d.median_step_s > 0 ? *d.model_flops_per_step / d.median_step_s : 0.0;
    const auto peak = verify::mfu_denominator(contract_peak, contract_peak > 0 ? std::nullopt : calibration(),
                                              reported, 0.0);
    if (peak.flops > 0 && achieved > peak.flops) {
        store.log(fmt::format("doctor: MFU unknown: the peak {:.4g} FLOP/s ({}) is below the {:.4g} "
                              "FLOP/s the baseline achieved",
                              peak.flops, peak.source, achieved));
    } else if (peak.flops > 0) {
        d.peak_flops = peak.flops;
        d.peak_flops_source = peak.source;
        d.peak_flops_by_job = peak.by_job;
        d.mfu = measure::mfu(*d.model_flops_per_step, d.median_step_s, *d.peak_flops);
        store.log(fmt::format("doctor: MFU denominator {:.4g} FLOP/s: {}", peak.flops, peak.source));
    }
}

} // namespace

std::vector<double> DoctorStage::reference_losses() {
    auto d = c_.store.baseline();
    return d ? d->reference_losses : std::vector<double>{};
}

NoiseCheck check_noise(const store::Baseline& d, double min_speedup) {
    NoiseCheck c;
    // A gain worth applying must be detectable; gains beyond 25% are rare, so an MDE above that (or above
    // the smallest gain the contract cares about, when that is larger) leaves almost nothing promotable.
    c.limit = std::max(kNoisyMde, min_speedup);
    c.noisy = !(d.minimum_detectable_effect <= c.limit);
    if (c.noisy)
        c.why =
            fmt::format("the baseline's minimum detectable effect {:.1f}% (noise CV {:.1f}% between runs, "
                        "{:.1f}% within a run, over {} runs) is above {:.0f}%: a candidate less than "
                        "{:.0f}% faster would need more A/B pairs than a verification can afford",
                        100 * d.minimum_detectable_effect, 100 * d.cv_between, 100 * d.cv_within, d.completed,
                        100 * c.limit, 100 * d.minimum_detectable_effect);
    return c;
}

std::optional<std::string> DoctorStage::paused() {
    return c_.store.campaign_run().paused;
}

std::string DoctorStage::noise_warning() {
    const auto d = c_.store.baseline();
    if (!d || d->minimum_detectable_effect <= kNoisyMde) return {};
    return fmt::format(
        "warning: with this noise only a candidate more than {:.0f}% faster can be promoted (noise "
        "CV {:.1f}% between runs, {:.1f}% within a run); more verification repeats ([repeats] verify "
        "= {}), more steps per trial, steps that leave out evaluations and checkpoints, or a quieter "
        "machine lower it",
        100 * d->minimum_detectable_effect, 100 * d->cv_between, 100 * d->cv_within,
        c_.contract.repeats.verify);
}

double DoctorStage::mde() {
    // Before the doctor has measured the noise, 5%.
    auto d = c_.store.baseline();
    return d ? d->minimum_detectable_effect : 0.05;
}

std::vector<node::AllocationRecord>
DoctorStage::allocation_records(const std::vector<store::TrialRow>& runs) {
    if (c_.batches.evidence().spool.empty() || c_.batches.evidence().scheduler != "slurm") return {};
    std::set<std::string> jobs;
    for (const auto& t : runs)
        if (!t.job_id.empty()) jobs.insert(t.job_id);
    const auto path = fs::path(c_.batches.evidence().spool) / "allocations.jsonl";
    std::error_code ec;
    if (!fs::exists(path, ec)) return {};
    return node::records_of_jobs(node::read_records(path.string()).records, jobs);
}

void DoctorStage::find_slow_nodes(const std::vector<store::TrialRow>& doctor_runs) {
    const auto slow = node::slow_gpu_nodes(allocation_records(doctor_runs));
    if (slow.empty()) return;
    c_.store.set_slow_nodes(slow);
    c_.store.log(fmt::format("doctor: the GPUs of node(s) {} are more than {}x slower than the median node's "
                             "(the plugin's GEMM probe): trials are kept off them",
                             fmt::join(slow, ", "), node::kSlowFactor));
}

std::vector<std::string> DoctorStage::slow_nodes() {
    return c_.store.campaign_run().slow_nodes.value_or(std::vector<std::string>{});
}

std::vector<std::string> DoctorStage::nodes_to_avoid(scheduler::Scheduler& sched) {
    const auto slow = slow_nodes();
    if (slow.empty()) return {};
    return scheduler::nodes_to_avoid(slow, sched.nodes(c_.contract.resources.partition),
                                     c_.contract.resources.nodes);
}

std::optional<verify::PeakFlops>
DoctorStage::calibration_peak(const std::vector<store::TrialRow>& doctor_runs) {
    std::vector<double> peaks;
    std::set<std::string> nodes, sources;
    if (!c_.batches.evidence().spool.empty() && c_.batches.evidence().scheduler == "slurm") {
        // The plugin's records of the doctor's own allocations: the hardware its runs had.
        for (const auto& r : allocation_records(doctor_runs))
            if (const auto p = node::node_peak_flops(r)) {
                peaks.push_back(p->flops);
                nodes.insert(r.node);
                sources.insert(p->source);
            }
        if (peaks.empty()) return std::nullopt;
        return verify::PeakFlops{
            measure::median(peaks),
            fmt::format("the plugin's records of the doctor's {} allocations on {} node(s), median of each "
                        "node's peak: {}",
                        peaks.size(), nodes.size(), fmt::join(sources, " | "))};
    }
    if (c_.batches.evidence().scheduler != "local") return std::nullopt;
    // The local scheduler runs the trials on this host: its GPUs' peak where it has NVIDIA devices (a GPU
    // job's peak is theirs), else its cores' measured together, as a job using all of them sees them.
    node::AllocationRecord here;
    try {
        here.topology = node::topology_from_live(std::chrono::milliseconds(2000));
    } catch (const Error&) {
        return std::nullopt;
    }
    if (node::has_nvidia_device_files()) here.gpu = node::probe_gpus_bounded({});
    if (const auto p = node::node_peak_flops(here); p && p->gpu)
        return verify::PeakFlops{
            p->flops, fmt::format("this host's {} (the local scheduler runs the trials here)", p->source)};
    constexpr auto kSlice = std::chrono::milliseconds(250);
    constexpr unsigned kRounds = 3;
    std::string isa;
    const double flops = node::all_core_peak_flops(0, kSlice, kRounds, &isa);
    if (!(flops > 0)) return std::nullopt;
    return verify::PeakFlops{
        flops, fmt::format("this host's calibration: the {} single-precision FMA peak of every core at once "
                           "(the fastest of {} rounds of {} ms; the local scheduler runs the trials here)",
                           isa, kRounds, kSlice.count())};
}

DoctorStage::DoctorStage(Context c, Host& host) : c_(c), host_(host) {
    c_.batches.register_stage(store::BatchKind::Doctor, {.finish = [this](std::int64_t) { finish(); }});
    c_.batches.register_stage(store::BatchKind::DoctorRemeasure,
                              {.finish = [this](std::int64_t batch_id) { finish(batch_id); }});
}

void DoctorStage::finish(std::optional<std::int64_t> remeasure) {
    auto trials = c_.store.trials({.kinds = {TrialKind::Doctor}, .state = TrialState::Finished});
    // The re-measurement alone (noise a passing load made is not averaged in), else the first measurement.
    std::erase_if(trials, [&](const store::TrialRow& t) {
        return remeasure ? t.batch_id != *remeasure
                         : c_.store.batch(t.batch_id).kind == store::BatchKind::DoctorRemeasure;
    });
    const auto& inv = c_.contract.invariants;
    const auto s = doctor_samples(trials, inv, [&](const store::TrialRow& t) {
        return c_.store.batch(t.batch_id).kind == store::BatchKind::Submitted;
    });
    if (s.medians.size() < 2)
        throw Error(fmt::format("the baseline completed only {} of {} doctor runs: {}", s.medians.size(),
                                trials.size(), s.failures),
                    c_.dir.string(), "a baseline that runs (check the contract's resources and command)");
    if (contract::uses_nccl(c_.contract)) check_nccl_transport(trials);
    find_slow_nodes(trials);
    auto noise = measure::calibrate(s.medians, s.within, c_.contract.repeats.verify);
    store::Baseline d;
    d.repeats = static_cast<int>(trials.size());
    d.completed = static_cast<int>(s.medians.size());
    d.runs = s.runs;
    d.median_step_s = noise.median_step_s;
    d.cold_step_s = measure::median(s.colds);
    d.cold_overhead = noise.median_step_s > 0 ? d.cold_step_s / noise.median_step_s : 0;
    d.cv_between = noise.cv_between;
    d.cv_within = noise.cv_within;
    d.minimum_detectable_effect = noise.minimum_detectable_effect;
    d.comparison_repeats = noise.comparison_repeats;
    for (const auto& [k, v] : s.phases)
        d.phases[k] = measure::median(v);
    d.tokens_per_s = measure::median(s.tps);
    d.reference_losses = verify::reference_losses(s.losses);
    d.eval_losses = s.eval_losses;
    if (inv.loss_mode == contract::LossMode::FinalEval)
        log_final_eval(c_.store, inv, s.eval_losses, s.medians.size(), c_.dir);
    if (!s.mfus.empty()) d.mfu = measure::median(s.mfus);
    // MFU's one denominator: declared in the contract, else measured once, here, by the baseline's runs.
    if (!s.model_flops.empty()) d.model_flops_per_step = measure::median(s.model_flops);
    if (d.model_flops_per_step)
        set_mfu_denominator(
            d, c_.store, c_.contract.resources.peak_flops, [&] { return calibration_peak(trials); },
            s.peak_flops);
    if (!s.peaks.empty()) d.peak_memory_bytes = *std::max_element(s.peaks.begin(), s.peaks.end());
    c_.store.put_baseline(d);
    record_startup_and_pace(c_.store, s);
    c_.store.log(fmt::format("doctor: baseline {:.4f} s/step, cold {:.4f} s, noise CV {:.2f}% between runs, "
                             "minimum detectable effect {:.2f}%",
                             noise.median_step_s, measure::median(s.colds), 100 * noise.cv_between,
                             100 * noise.minimum_detectable_effect));
    if (const auto warning = noise_warning(); !warning.empty()) c_.store.log("doctor: " + warning);
}

std::vector<Task> DoctorStage::baseline_tasks(int adopted, const std::string& why) const {
    // final_eval: each repeat at its own seed, so their spread calibrates the loss tolerance (the submitted
    // job's evaluation loss does not count there: it ran at its own seed).
    const bool seeds = c_.contract.invariants.loss_mode == contract::LossMode::FinalEval;
    std::vector<Task> tasks(static_cast<std::size_t>(
        seeds ? c_.contract.repeats.doctor : std::max(1, c_.contract.repeats.doctor - adopted)));
    for (std::size_t i = 0; i < tasks.size(); ++i) {
        auto& t = tasks[i];
        t.candidate = c_.contract.space.baseline();
        t.kind = TrialKind::Doctor;
        t.reason = seeds ? fmt::format("{} at seed {} for noise and loss calibration", why,
                                       c_.contract.invariants.seed + static_cast<long long>(i))
                         : why + " for noise calibration";
        if (seeds) t.seed = c_.contract.invariants.seed + static_cast<long long>(i);
    }
    return tasks;
}

void DoctorStage::run(const RunOptions& o) {
    c_.batches.resume_open(o);
    if (host_.stopping(o)) return;
    if (!c_.store.baseline()) {
        const auto batches = c_.store.batches();
        if (std::any_of(batches.begin(), batches.end(),
                        [](auto& b) { return b.kind == store::BatchKind::Doctor; }))
            return;
        // A campaign started from a tune request: the job the user submitted is the first baseline run.
        if (const auto submitted = adopt_submitted_job(o)) {
            c_.batches.await(*submitted, o);
            if (host_.stopping(o)) return;
        }
        int adopted = 0;
        for (const auto& b : c_.store.batches())
            if (b.kind == store::BatchKind::Submitted)
                for (const auto& t : c_.store.trials_of_batch(b.id))
                    adopted += t.outcome == trial::Outcome::Ok;
        const auto tasks = baseline_tasks(adopted, "baseline repeat");
        host_.say(o, fmt::format("doctor: building the baseline and running it {} times", tasks.size()));
        auto id = c_.batches.plan(store::BatchKind::Doctor, tasks).id;
        for (const auto& t : c_.store.trials_of_batch(id))
            if (t.array_index < 0)
                throw Error("the baseline does not build: " + t.detail, t.result_path,
                            "a baseline that builds");
        c_.batches.submit(id, o);
        c_.batches.await(id, o);
        if (host_.stopping(o) || !c_.store.baseline()) return;
    }
    pause_if_noisy(o);
}

void DoctorStage::pause_if_noisy(const RunOptions& o) {
    auto verdict = check_noise(*c_.store.baseline(), c_.contract.verify.min_speedup);
    if (!verdict.noisy) return;
    const auto batches = c_.store.batches();
    // Told to go on whatever the noise: no re-measurement either (it would spend what the user chose not to).
    if (!o.accept_noise && std::none_of(batches.begin(), batches.end(), [](auto& b) {
            return b.kind == store::BatchKind::DoctorRemeasure;
        })) {
        // Once, before the search spends anything: a load that passed (another job, a backup) made the noise,
        // or the host is this noisy.
        const auto tasks =
            baseline_tasks(0, "baseline re-measured one job at a time (the first measurement was "
                              "too noisy to promote a real gain)");
        host_.say(o,
                  fmt::format(
                      "doctor: {}; re-measuring the baseline {} times, one job at a time, before the search",
                      verdict.why, tasks.size()));
        const auto id = c_.batches.plan(store::BatchKind::DoctorRemeasure, tasks).id;
        c_.batches.submit(id, o);
        c_.batches.await(id, o);
        if (host_.stopping(o)) return;
        verdict = check_noise(*c_.store.baseline(), c_.contract.verify.min_speedup);
        if (!verdict.noisy) {
            const auto d = *c_.store.baseline();
            host_.say(o, fmt::format(
                             "doctor: re-measured: minimum detectable effect {:.1f}% (at most {:.0f}%): the "
                             "search goes on with the re-measured baseline",
                             100 * d.minimum_detectable_effect, 100 * verdict.limit));
            return;
        }
    }
    if (o.accept_noise) {
        if (paused() || !c_.store.campaign_run().noise_accepted) {
            c_.store.set_noise_accepted(verdict.why);
            c_.store.set_paused(std::nullopt);
            host_.say(o, "doctor: the noise is accepted (--accept-noise): " + verdict.why +
                             "; the search goes on");
        }
        return;
    }
    if (c_.store.campaign_run().noise_accepted) return; // accepted by an earlier run
    const std::string why = fmt::format(
        "{} (re-measured one job at a time, it stayed). The search would spend its budget on "
        "candidates it could not promote. A quieter machine (no other jobs on its nodes), more steps per "
        "trial, or steps that leave out evaluations and checkpoints lower it; `infrarsi run --accept-noise` "
        "goes on anyway",
        verdict.why);
    c_.store.set_paused(why);
    host_.say(o, "campaign paused: " + why);
}

} // namespace infrarsi::campaign
