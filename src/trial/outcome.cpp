#include "trial/outcome.hpp"

#include "util/error.hpp"

#include <fmt/format.h>

namespace infrarsi::trial {

Outcome parse_outcome(std::string_view name) {
    if (auto o = outcome_names.parse(name)) return *o;
    throw Error(fmt::format("unknown trial outcome '{}'", name), "outcome", outcome_names.list());
}

Violation parse_violation(std::string_view name) {
    if (auto v = violation_names.parse(name)) return *v;
    throw Error(fmt::format("unknown contract violation '{}'", name), "violation", violation_names.list());
}

bool says_nothing(Outcome o) {
    return o == Outcome::NodeFailure || o == Outcome::Cancelled;
}

namespace {

Verdict completed(const Evidence& e, const Limits& limits) {
    if (!e.has_result)
        return {Outcome::ContractViolation,
                Violation::NoResult,
                "no result file (the trial wrapper did not finish)",
                {}};
    // Checked before the count: extra lines (a forged burst at exit) must not pass as "enough steps".
    if (e.step_lines_violation)
        return {Outcome::ContractViolation,
                Violation::StepLines,
                fmt::format("step lines broke the contract ({} steps in format {}): {}", limits.steps,
                            limits.step_lines, *e.step_lines_violation),
                {}};
    if (e.steps < limits.steps)
        return {Outcome::ContractViolation,
                Violation::MissingSteps,
                fmt::format("missing step lines: {} of {} in format {}", e.steps, limits.steps,
                            limits.step_lines),
                {}};
    if (e.settings_violation)
        return {Outcome::ContractViolation,
                Violation::Settings,
                "the trial did not run its manifest entry's settings: " + *e.settings_violation,
                {}};
    if (e.timing_violation)
        return {Outcome::ContractViolation,
                Violation::Timing,
                "step times disagree with the evidence: " + *e.timing_violation,
                {}};
    if (e.loss_violation)
        return {Outcome::ContractViolation,
                Violation::LossInvariant,
                "loss invariant broken: " + *e.loss_violation,
                {}};
    if (!e.summary)
        return {Outcome::ContractViolation, Violation::MissingSteps, "no steady-state steps to measure", {}};
    const auto& s = e.summary->steady_step_s;
    return {Outcome::Ok,
            Violation::None,
            fmt::format("{:.4f} s/step (95% CI {:.4f}-{:.4f})", s.estimate, s.lo, s.hi),
            {}};
}

} // namespace

Verdict classify(const Evidence& e, const Limits& limits) {
    if (!e.record) throw Error("classify without a Slurm record", "trial::classify");
    const slurm::JobRecord& rec = *e.record;
    const slurm::JobEnd job = slurm::classify(rec);
    Verdict v;
    // Files rewritten after the task ended prove nothing they say, the log's account of a failure included;
    // what only Slurm knows (a node failure, a cancellation: re-queued) still stands.
    if (e.rewritten_violation && job != slurm::JobEnd::NodeFailure && job != slurm::JobEnd::Cancelled) {
        v.outcome = Outcome::ContractViolation;
        v.violation = Violation::RewrittenAfterEnd;
        v.detail = "the trial's files changed after it ended: " + *e.rewritten_violation;
        return v;
    }
    LogDiagnosis log = diagnose(e.job_output);
    const bool slurm_oom_in_log =
        is_memory(log.signal) && log.first && log.first->source == LineSource::Slurm;
    // The wrapper stopped it for slowness (it writes result.json after the workload has gone, so a job that
    // Slurm ended itself, at a limit or with its node, is never read as stopped).
    if (e.stopped_slow && (job == slurm::JobEnd::Failed || job == slurm::JobEnd::Completed) &&
        !slurm_oom_in_log) {
        v.outcome = Outcome::StoppedSlow;
        v.detail = *e.stopped_slow;
        return v;
    }
    switch (job) {
    case slurm::JobEnd::OutOfMemory:
        v.outcome = Outcome::OutOfMemory;
        v.detail = fmt::format("peak memory > limit {} ({} MiB): killed out of memory after {} steps",
                               limits.mem, limits.mem_bytes >> 20, e.steps);
        // Say which witness it was when Slurm's state alone does not.
        if (rec.state != slurm::JobState::OutOfMemory && !(rec.exit_code == 0 && rec.exit_signal == 125))
            v.detail += fmt::format(" (Slurm state {}: a step was OOM-killed, exit 0:125)", rec.raw_state);
        break;
    case slurm::JobEnd::Timeout:
        v.outcome = Outcome::Timeout;
        v.detail = fmt::format("time limit {} reached after {} steps", limits.time_limit, e.steps);
        break;
    case slurm::JobEnd::NodeFailure:
    case slurm::JobEnd::Cancelled:
        v.outcome = job == slurm::JobEnd::NodeFailure ? Outcome::NodeFailure : Outcome::Cancelled;
        v.detail = fmt::format("Slurm state {} on {}: re-queued, not counted", rec.raw_state, rec.node_list);
        break;
    case slurm::JobEnd::Failed:
        // A failed job's output says why (log_signals.hpp): a cgroup OOM kill Slurm reported there (where
        // ranks ran in an srun step, the job ends FAILED with the step's exit code), the GPU's or the host
        // allocator's out-of-memory, a collective that timed out, a rank's exception.
        if (slurm_oom_in_log) {
            v.outcome = Outcome::OutOfMemory;
            v.detail =
                fmt::format("peak memory > limit {} ({} MiB): killed out of memory after {} steps (Slurm "
                            "state {}: the job output reports an oom-kill event)",
                            limits.mem, limits.mem_bytes >> 20, e.steps, rec.raw_state);
        } else if (log.signal == LogSignal::HostOom) {
            v.outcome = Outcome::OutOfMemory;
            v.detail = fmt::format("host memory ran out after {} steps: {}", e.steps, log.reason);
        } else if (log.signal == LogSignal::GpuOom) {
            v.outcome = Outcome::OutOfMemory;
            v.detail = fmt::format("GPU memory ran out after {} steps: {}", e.steps, log.reason);
        } else if (rec.restarts > 0 && rec.exit_signal != 0 && !e.has_result && e.steps == 0 &&
                   log.signal == LogSignal::None) {
            // Slurm requeued the task and its re-run was killed by a signal before it printed a step or
            // wrote a result: the kill of the run on the failed node reached the relaunch (the job id is the
            // same). Nothing of the candidate ran to be judged: like the node failure, re-queued, not
            // counted.
            v.outcome = Outcome::NodeFailure;
            v.detail = fmt::format("Slurm requeued the task and its re-run was killed (exit {} signal {}, {} "
                                   "on {}) before a step or a result: re-queued, not counted",
                                   rec.exit_code, rec.exit_signal, rec.raw_state, rec.node_list);
        } else {
            v.outcome = Outcome::Crash;
            v.detail =
                fmt::format("exit {} signal {} ({}): {}", rec.exit_code, rec.exit_signal, rec.raw_state,
                            log.signal == LogSignal::None ? std::string(e.log_tail) : log.reason);
        }
        break;
    case slurm::JobEnd::Completed:
        v = completed(e, limits);
        break;
    }
    if (log.signal != LogSignal::None) v.log = std::move(log);
    // Slurm's own requeue (a contract that asks for --requeue): the task's last run is the one recorded.
    if (rec.restarts > 0)
        v.detail += fmt::format(" [Slurm requeued and re-ran this task {} time(s); its last run is recorded]",
                                rec.restarts);
    return v;
}

} // namespace infrarsi::trial
