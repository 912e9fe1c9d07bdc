#include "trial/assess.hpp"

#include "measure/log_format.hpp"
#include "measure/statistics.hpp"
#include "slurm/user_jobs.hpp"
#include "trial/evidence.hpp"
#include "trial/result.hpp"
#include "util/error.hpp"
#include "util/file_digest.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <sstream>

namespace infrarsi::trial {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The job's last lines: from the end of its output only (a 2 GiB log is not read to find them).
std::string last_lines(const fs::path& file, std::size_t n) {
    std::istringstream in(read_trial_output(file, 64u << 10).text);
    std::vector<std::string> lines;
    std::string line;
    while (std::getline(in, line)) {
        lines.push_back(line);
        if (lines.size() > n) lines.erase(lines.begin());
    }
    std::string s;
    for (const auto& l : lines)
        s += (s.empty() ? "" : " | ") + l;
    return s;
}

// What the trial's files say, once checked against the evidence's digests of them.
struct Files {
    std::optional<Result> result; // none: the wrapper wrote none, or it is not a result, or it was rewritten
    std::optional<TrialEvidence> plugin; // the plugin's root-side record, where it wrote one
    std::string rewritten;               // what changed after the task ended; empty: nothing
};

// result.json and log.txt against their digests when the task ended (the plugin's, else the local
// scheduler's as the trial's parent): files the job's user changed since say nothing of the trial (a job it
// submitted, or a process that escaped it, rewrote them) and are refused. Evidence without digests (an older
// record, Slurm's accounting alone) checks nothing here.
Files read_files(const AssessInput& in, const fs::path& log, std::vector<std::string>& notes) {
    Files f;
    const auto& rec = in.record;
    // No result file (the wrapper died with the job: a node failure, a time limit): no wrapper wall time.
    // One that is not a result (the job can reach the file) counts as none, and the log says why.
    FileDigest result_seen; // the bytes read, held against the evidence's digest below
    try {
        f.result = read_result(in.result_path, &result_seen);
    } catch (const Error& e) {
        notes.push_back(std::string("result ignored: ") + e.what());
    }
    f.plugin = read_plugin_evidence(in.evidence_spool, rec.job_id);
    const auto& recorded_result = f.plugin ? f.plugin->result_file : rec.result_file;
    const auto& recorded_log = f.plugin ? f.plugin->log_file : rec.log_file;
    if (recorded_result)
        if (auto d = digest_difference(*recorded_result, result_seen); !d.empty())
            f.rewritten = "result.json: " + d;
    if (recorded_log)
        if (auto d = digest_difference(*recorded_log, digest_file(log.string(), kMaxDigestLogBytes));
            !d.empty())
            f.rewritten += (f.rewritten.empty() ? "" : "; ") + std::string("log.txt: ") + d;
    if (!f.rewritten.empty()) {
        notes.push_back("files changed after it ended: " + f.rewritten);
        f.result.reset();
    }
    return f;
}

// The steps and evaluation losses the job printed (result.json's, else its log's), held to exactly the
// contract's steps, and the job's whole output (for classify).
struct Steps {
    std::vector<measure::StepSample> steps;
    std::vector<measure::EvalLoss> evals;
    std::string step_lines; // check_step_lines's reason; empty: they are the contract's
    std::string job_output;
};

Steps read_steps(const AssessInput& in, const fs::path& log, const Files& files) {
    Steps s;
    const auto& inv = in.contract.invariants;
    // The workload's output (the trial's log.txt, where srun-launched steps report too) and the batch step's
    // own output (Slurm's -o file, where slurmstepd reports for the batch step).
    const auto log_output = read_trial_output(log);
    const std::string& log_text = log_output.text;
    s.job_output = in.slurm_output.empty() ? log_text : log_text + read_trial_output(in.slurm_output).text;
    if (files.result) s.steps = files.result->steps.steps, s.evals = files.result->steps.evals;
    if (s.steps.empty() && files.rewritten.empty()) {
        // The wrapper may not have finished (killed with the job): read the steps the log has.
        // A log larger than what is read (its tail) has other line numbers than the times file's.
        const auto times = log_output.cut ? std::vector<double>{} : read_line_times(line_times_path(log));
        auto parsed = measure::parse_log(log_text, in.contract.metrics, &times);
        s.steps = std::move(parsed.steps);
        s.evals = std::move(parsed.evals);
    }
    // Exactly the contract's steps, each once and in order; no line after the last step is taken.
    s.step_lines = check_step_lines(s.steps, inv.steps);
    keep_contract_steps(s.steps, inv.steps);
    return s;
}

// The evidence: the plugin's root-side record where it wrote one, else the scheduler's own record (the
// local scheduler's is the trial's parent's; Slurm's accounting is root's, to the second).
struct Chosen {
    TimingEvidence timing;
    std::optional<double> peak;
    std::optional<EvidenceRecord> record;
};

Chosen choose_evidence(const AssessInput& in, const std::optional<TrialEvidence>& pe) {
    Chosen c;
    const auto& rec = in.record;
    if (pe) {
        c.timing = {pe->elapsed_s, 0.01, "plugin (root, slurmstepd)"};
        c.peak = pe->memory_peak_bytes;
        c.record = EvidenceRecord{pe->source, pe->elapsed_s, to_json(*pe)};
    } else if (rec.elapsed_s > 0) {
        const bool local = in.local_scheduler;
        c.timing = {rec.elapsed_s, local ? 0.01 : 1.0,
                    local ? "local scheduler (the trial's parent)" : "Slurm accounting"};
        const std::string source = local ? "local parent" : "slurm accounting";
        json doc = {{"source", source},
                    {"elapsed_s", rec.elapsed_s},
                    {"exit_code", rec.exit_code},
                    {"signal", rec.exit_signal}};
        if (local && rec.max_rss_bytes) {
            c.peak = static_cast<double>(*rec.max_rss_bytes);
            doc["memory_peak_bytes"] = *c.peak;
        }
        if (rec.result_file) doc["result_file"] = to_json(*rec.result_file);
        if (rec.log_file) doc["log_file"] = to_json(*rec.log_file);
        c.record = EvidenceRecord{source, rec.elapsed_s, doc};
    }
    return c;
}

// The steady-state summary and what is kept of each step (after the summary's measurements).
void record_steps(TrialRecord& r, const std::vector<measure::StepSample>& steps,
                  const std::optional<measure::TrialSummary>& summary, int warmup_steps) {
    auto& m = r.measurements;
    if (summary) {
        r.step_time_s = summary->steady_step_s.estimate;
        r.step_time_lo = summary->steady_step_s.lo;
        r.step_time_hi = summary->steady_step_s.hi;
        r.cold_step_s = summary->cold_step_s;
        r.tokens_per_s = summary->tokens_per_s;
        r.mfu = summary->mfu;
        r.peak_memory_bytes = summary->peak_rss_bytes;
        if (!summary->losses.empty()) r.loss = summary->losses.back();
        m.steady_samples = summary->steady_samples;
        m.losses = summary->losses;
        m.phases = summary->phases;
        m.excluded_steps = summary->excluded_steps;
        // MFU's parts as the job reports them: its model FLOPs per step, and the peak FLOP/s its own MFU
        // implies. Only the doctor's are used as a denominator (one per hardware: verify/mfu).
        if (const auto p = measure::reported_mfu_parts(steps, warmup_steps)) {
            m.model_flops = p->model_flops_per_step;
            if (p->peak_flops > 0) m.peak_flops = p->peak_flops;
        }
    }
    m.reported_step_s = reported_step_time_s(steps);
    // Each step as the job printed it, for the report's curves: its own step number (nanoGPT's iter,
    // counted from 0), its time and its loss; a trial stopped early keeps the steps it ran.
    if (!steps.empty()) {
        std::vector<int> numbers;
        std::vector<double> times, losses;
        for (const auto& st : steps)
            numbers.push_back(st.step), times.push_back(st.step_time_s), losses.push_back(st.loss);
        m.step_numbers = numbers;
        m.step_times_s = times;
        if (!m.losses) m.losses = losses;
    }
}

// The peak checked against the limit: the evidence's where there is evidence (the job can write
// result.json), else the job cgroup's the wrapper read (what Slurm enforces --mem on); the accounting's
// MaxRSS and what the workload reported can only raise it. With a per-GPU limit the memory that decides is
// the GPU's, as the job's step lines report it (its allocator's peak), else as the wrapper's nvidia-smi
// samples saw it; the host's stays in the measurements.
void record_peak(TrialRecord& r, const AssessInput& in, const std::optional<Result>& result,
                 std::optional<double> evidence_peak, const std::vector<measure::StepSample>& steps) {
    auto& peak = r.peak_memory_bytes;
    if (evidence_peak)
        peak = std::max(peak.value_or(0), *evidence_peak);
    else if (result && result->job_cgroup_peak_bytes)
        peak = std::max(peak.value_or(0), *result->job_cgroup_peak_bytes);
    if (in.record.max_rss_bytes) peak = std::max(peak.value_or(0), double(*in.record.max_rss_bytes));
    if (in.contract.resources.gpu_mem_bytes <= 0) return;
    if (peak) r.measurements.host_peak_bytes = *peak;
    peak.reset();
    for (const auto& s : steps)
        if (s.peak_device_bytes) peak = std::max(peak.value_or(0), *s.peak_device_bytes);
    if (peak) {
        r.measurements.gpu_memory_source = GpuMemorySource::StepLines;
    } else if (result && result->gpu_sampled_peak_bytes) {
        peak = *result->gpu_sampled_peak_bytes;
        r.measurements.gpu_memory_source = GpuMemorySource::Samples;
    }
}

// The checks beyond what the job's end says: the settings the wrapper saw, the step times against the
// evidence's elapsed time and the wrapper's clock, and the loss rule.
void check_contract(Evidence& e, const AssessInput& in, const Result* result,
                    const std::vector<measure::StepSample>& steps, const Chosen& evidence,
                    std::optional<double> pace, const Measurements& m) {
    const auto& inv = in.contract.invariants;
    // The settings the wrapper saw, against the entry the orchestrator wrote.
    if (in.check_settings && result) {
        std::string why = in.manifest_problem;
        if (why.empty() && in.manifest) {
            try {
                why = trial::check_settings(result->settings, in.manifest->task(in.array_index));
            } catch (const Error& err) {
                why = err.what();
            }
        }
        if (!why.empty()) e.settings_violation = why;
    }
    // The job's step times against the evidence's elapsed time, less the doctor's startup (the doctor's own
    // runs are what measures it).
    if (!in.doctor && in.startup && evidence.timing.elapsed_s > 0 &&
        (in.startup->source.empty() || (evidence.record && in.startup->source == evidence.record->source)) &&
        static_cast<int>(steps.size()) >= inv.steps)
        if (auto why = check_timing(*m.reported_step_s, evidence.timing, *in.startup); !why.empty())
            e.timing_violation = why;
    // The job's step times against the time the trial wrapper saw pass between its step lines, held to the
    // baseline's pace: catches a slowed clock however short the run is against its start-up's noise.
    if (!in.doctor && pace && !e.timing_violation && in.baseline_pace)
        if (auto why = check_pace(*pace, *in.baseline_pace); !why.empty()) e.timing_violation = why;
    if (in.loss_check && e.steps >= inv.steps) {
        std::vector<double> losses;
        for (const auto& s : steps)
            losses.push_back(s.loss);
        if (auto why = in.loss_check(losses, m.eval_loss); !why.empty()) e.loss_violation = why;
    }
}

} // namespace

TrialRecord assess(const AssessInput& in) {
    const auto& k = in.contract;
    const auto& inv = k.invariants;
    const auto& rec = in.record;
    TrialRecord r;
    const fs::path log = in.result_path.parent_path() / "log.txt";
    auto files = read_files(in, log, r.notes);
    const auto& result = files.result;
    const double wall = result ? result->wall_s : 0.0;
    r.cost_node_s = (rec.elapsed_s > 0 ? rec.elapsed_s : wall) * k.resources.nodes;
    auto [steps, evals, step_lines, job_output] = read_steps(in, log, files);
    const auto evidence = choose_evidence(in, files.plugin);
    const auto pace = step_pace(steps);
    std::optional<measure::TrialSummary> summary;
    if (static_cast<int>(steps.size()) > inv.warmup_steps) {
        measure::StepLog sl;
        sl.steps = steps;
        summary = measure::summarize(sl, inv.warmup_steps);
    }
    record_steps(r, steps, summary, inv.warmup_steps);
    auto& m = r.measurements;
    // When it ran (the scheduler's record): the report's timeline.
    if (const auto start = slurm::slurm_time_epoch(rec.start_time)) {
        m.started_at = *start;
        const auto end = slurm::slurm_time_epoch(rec.end_time);
        m.ended_at = rec.elapsed_s > 0 ? *start + rec.elapsed_s : end.value_or(*start);
    }
    if (pace) m.step_pace = *pace;
    m.evidence = evidence.record;
    if (result && !result->isolation.empty())
        m.isolation = IsolationRecord{result->isolated, result->isolation};
    m.self_submitted_jobs = in.self_submitted;
    // Processes the workload left behind, killed by the wrapper before it wrote result.json.
    if (result && result->leftover_processes_killed > 0)
        m.leftover_processes_killed = result->leftover_processes_killed;
    record_peak(r, in, result, evidence.peak, steps);

    Evidence e;
    e.record = &rec;
    if (!files.rewritten.empty()) e.rewritten_violation = files.rewritten;
    e.job_output = job_output;
    e.has_result = result.has_value();
    if (result && result->stopped_slow) e.stopped_slow = result->stopped_slow;
    e.steps = static_cast<int>(steps.size());
    e.summary = summary ? &*summary : nullptr;
    if (!step_lines.empty()) e.step_lines_violation = step_lines;
    // The final evaluation loss: the last one the job printed.
    if (!evals.empty()) m.eval_loss = evals.back().loss;
    check_contract(e, in, result ? &*result : nullptr, steps, evidence, pace, m);
    const std::string tail = last_lines(log, 3);
    e.log_tail = tail;
    const Limits limits{k.resources.mem, k.resources.mem_bytes, k.resources.time_limit, inv.steps,
                        measure::describe(k.metrics)};
    auto verdict = classify(e, limits);
    r.outcome = verdict.outcome;
    r.violation = verdict.violation;
    r.detail = std::move(verdict.detail);
    // Censored: an OOM's peak is only known to exceed the limit of the memory that ran out, and says nothing
    // of the other's: a GPU's of the host's, a host's of the GPU's.
    const bool gpu_oom = verdict.log && verdict.log->signal == LogSignal::GpuOom;
    const bool gpu_limit = k.resources.gpu_mem_bytes > 0;
    if (verdict.outcome == Outcome::OutOfMemory && gpu_oom == gpu_limit) {
        r.peak_memory_bytes = static_cast<double>(contract::modeled_memory_limit_bytes(k.resources));
        r.peak_censored = true;
    }
    m.log_signal = std::move(verdict.log);
    return r;
}

} // namespace infrarsi::trial
