#include "trial/exec.hpp"

#include "measure/log_format.hpp"
#include "trial/gpu_memory.hpp"
#include "trial/isolation.hpp"
#include "trial/manifest.hpp"
#include "trial/memory_peak.hpp"
#include "trial/rendezvous.hpp"
#include "trial/result.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"
#include "util/process.hpp"
#include "util/process_tree.hpp"

#include <fmt/core.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <set>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace infrarsi::trial {

namespace fs = std::filesystem;

namespace {

// The workload's output, written to its log as it arrives, and beside it (line_times_path) the seconds since
// the start at which each line ended. The step lines are read as they arrive (measure::LogReader): what the
// wrapper keeps is the steps and the line being read (cut at measure::kMaxReadLineBytes), not the output, so
// a job's output volume cannot grow the wrapper (whose memory counts in the trial's limit).
class LogSink {
  public:
    LogSink(const fs::path& log, const measure::LogFormat& format)
        : start_(std::chrono::steady_clock::now()), log_path_(log.string()),
          log_(::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)),
          times_(::open(line_times_path(log).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)),
          reader_(format) {
        if (!log_)
            throw Error(std::string("cannot create the trial log: ") + std::strerror(errno), log_path_);
    }
    void write(std::string_view chunk) {
        write_all(log_.get(), chunk, log_path_);
        // What the wrapper measures is what it received, not what the log file says later: the workload runs
        // in the trial directory and could rewrite the file.
        const double now = elapsed_s();
        std::string stamps;
        while (!chunk.empty()) {
            const auto nl = chunk.find('\n');
            const auto part = chunk.substr(0, nl);
            if (line_.size() < measure::kMaxReadLineBytes)
                line_.append(part.substr(0, measure::kMaxReadLineBytes - line_.size()));
            if (nl == std::string_view::npos) break;
            chunk.remove_prefix(nl + 1);
            stamps += fmt::format("{:.4f}\n", now);
            reader_.line(line_, now);
            line_.clear();
        }
        if (times_ && !stamps.empty()) write_all(times_.get(), stamps, log_path_ + " (line times)");
    }
    // The steps so far; finish() reads the last line (one without its newline has no time, as in the file).
    const measure::StepLog& steps() const { return reader_.log(); }
    measure::StepLog finish() {
        if (!line_.empty()) reader_.line(line_, std::nullopt);
        line_.clear();
        return reader_.take();
    }
    double elapsed_s() const {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    }

  private:
    std::chrono::steady_clock::time_point start_;
    std::string log_path_;
    UniqueFd log_, times_;
    measure::LogReader reader_;
    std::string line_; // the line being received, its first kMaxReadLineBytes
};

// The children of this process (a child subreaper inherits every orphaned descendant).
std::vector<pid_t> children() {
    return children_of(::getpid());
}

// The environment the workload got for the names its manifest entry sets: the wrapper's own with the
// entry's on top, as run_process gives it.
Settings seen_settings(const ManifestTask& task, const std::map<std::string, std::string>& env,
                       const std::vector<std::string>& argv) {
    Settings s;
    for (const auto& [name, value] : task.env) {
        (void)value;
        if (auto it = env.find(name); it != env.end())
            s.env[name] = it->second;
        else if (const char* v = std::getenv(name.c_str()))
            s.env[name] = std::string(v);
        else
            s.env[name] = std::nullopt;
    }
    s.argv = argv;
    s.build = task.build;
    std::error_code ec;
    s.workdir = task.workdir.empty() ? fs::current_path(ec).string() : task.workdir;
    return s;
}

} // namespace

namespace {

// The median of the first `after` timed steps past the first `skip` step lines; nullopt while fewer.
std::optional<double> early_median(const std::vector<measure::StepSample>& steps, int skip, int after) {
    std::vector<double> times;
    for (std::size_t i = static_cast<std::size_t>(skip); i < steps.size(); ++i)
        if (steps[i].timed && std::isfinite(steps[i].step_time_s) && steps[i].step_time_s > 0)
            times.push_back(steps[i].step_time_s);
    if (static_cast<int>(times.size()) < after) return std::nullopt;
    times.resize(static_cast<std::size_t>(after));
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    return times[times.size() / 2];
}

} // namespace

std::optional<std::string> slow_stop_reason(const std::vector<measure::StepSample>& steps,
                                            const ManifestTask::SlowStop& rule,
                                            const std::vector<measure::StepSample>* control) {
    const auto median = early_median(steps, rule.skip_steps, rule.after_steps);
    if (!median) return std::nullopt;
    if (rule.control_log.empty() || !control) {
        // No control to read: the absolute limit, where the rule has one; else the trial runs on.
        if (!(rule.step_s > 0) || !(*median > rule.step_s)) return std::string();
        return fmt::format("stopped after {} timed steps: median {:.4g} s/step is above {:.4g} s/step (the "
                           "incumbent slowed by the stop margin, max(MDE, 10%))",
                           rule.after_steps, *median, rule.step_s);
    }
    const auto reference = early_median(*control, rule.skip_steps, rule.after_steps);
    if (!reference) return std::nullopt; // the control has not got there yet: asked again at the next step
    const double limit = rule.control_ratio * *reference;
    if (!(*median > limit)) return std::string();
    return fmt::format(
        "stopped after {} timed steps: median {:.4g} s/step is above {:.4g} s/step (the batch's "
        "control ran {:.4g} s/step over its first {} timed steps beside it; x {:.4g}: the "
        "incumbent's ratio to its control slowed by the stop margin, max(MDE, 10%))",
        rule.after_steps, *median, limit, *reference, rule.after_steps, rule.control_ratio);
}

std::vector<measure::StepSample> control_steps(const fs::path& log, const measure::LogFormat& f) {
    try {
        auto out = read_trial_output(log);
        if (out.cut) return {};
        // Whole lines only: the control may be writing its last one now.
        const auto end = out.text.rfind('\n');
        if (end == std::string::npos) return {};
        out.text.resize(end + 1);
        const auto times = read_line_times(line_times_path(log));
        return measure::parse_log(out.text, f, &times).steps;
    } catch (const Error&) {
        return {};
    }
}

int execute(const fs::path& manifest_path, int index) {
    if (index < 0)
        throw Error("array index " + std::to_string(index) + " is negative", manifest_path.string());
    const Manifest manifest = read_manifest(fs::absolute(manifest_path));
    const ManifestTask& task = manifest.task(static_cast<std::uint32_t>(index));
    if (task.command.empty() || task.log.empty())
        throw Error("task " + std::to_string(index) + " names no command or log", manifest_path.string(),
                    "a batch manifest written by the orchestrator");
    const fs::path result = task.result;
    const fs::path log = task.log;
    fs::create_directories(result.parent_path());
    fs::create_directories(log.parent_path());

    ProcessOptions o;
    // The trial's environment, as the plugin sets it (trial_environment), but for where result.json goes: the
    // wrapper alone writes it, so the workload is not told.
    o.env = trial_environment(manifest, static_cast<std::uint32_t>(index));
    o.env.erase("INFRARSI_RESULT");
    o.env.emplace("PYTHONUNBUFFERED", "1"); // a Python job killed at its limit keeps the lines it printed
    // Trials that run at once on one host must not share a launcher's rendezvous port (trial/rendezvous.hpp).
    add_rendezvous_port(o.env);
    if (!task.workdir.empty()) o.cwd = task.workdir;
    // The output goes to the log file as it arrives (a job killed at its time limit still leaves its steps),
    // with the time each line ended, for formats that print no step time.
    LogSink sink(log, manifest.metrics);
    // A search trial too slow to be promoted is stopped once its first timed steps say so: its process
    // group gets SIGTERM, and SIGKILL with the next output after 5 s.
    // The batch's control's trial directory, opened before the trial's private view hides the rest of the
    // campaign (close-on-exec: the workload never holds it) and read through /proc/self/fd. It cannot be
    // opened where the plugin made the view before the wrapper ran: the rule's absolute step_s applies then.
    UniqueFd control_dir;
    std::string control_log;
    if (task.stop_slow && !task.stop_slow->control_log.empty()) {
        const fs::path p = task.stop_slow->control_log;
        control_dir.reset(::open(p.parent_path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
        if (control_dir)
            control_log = fmt::format("/proc/self/fd/{}/{}", control_dir.get(), p.filename().string());
    }
    std::optional<std::string> stopped;
    bool decided = !task.stop_slow;
    std::size_t steps_seen = 0;
    double stop_sent_s = -1;
    o.on_output = [&](std::string_view chunk) {
        sink.write(chunk);
        if (stop_sent_s >= 0) {
            if (sink.elapsed_s() - stop_sent_s > 5)
                for (const pid_t p : children())
                    ::kill(-p, SIGKILL);
            return;
        }
        if (decided || sink.steps().steps.size() == steps_seen) return;
        steps_seen = sink.steps().steps.size();
        // The control's steps are read only once this trial has enough of its own to compare.
        const auto& rule = *task.stop_slow;
        std::vector<measure::StepSample> control;
        const bool compare = !control_log.empty() &&
                             steps_seen >= static_cast<std::size_t>(rule.skip_steps + rule.after_steps);
        if (compare) control = control_steps(control_log, manifest.metrics);
        const auto why = slow_stop_reason(sink.steps().steps, rule, control_log.empty() ? nullptr : &control);
        if (!why) return; // not enough steps yet
        decided = true;
        if (why->empty()) return; // fast enough: runs to the end
        stopped = *why;
        stop_sent_s = sink.elapsed_s();
        for (const pid_t p : children())
            ::kill(-p, SIGTERM);
    };
    // A job's end (time limit, scancel) signals every process of it: the wrapper keeps draining the output
    // until the workload has gone, and Slurm's SIGKILL ends it after KillWait if need be.
    std::signal(SIGTERM, SIG_IGN);
    std::signal(SIGINT, SIG_IGN);
    // Whatever the workload leaves running is re-parented to the wrapper, which kills it before the result
    // is written (kill_orphans): nothing of the trial outlives its result file.
    ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);

    // The workload sees its own trial directory and sandbox of the campaign directory, nothing else of it
    // and no other campaign or bank (trial/isolation.hpp): the plugin's private view where it made one for
    // every step of the job, else one of the wrapper's own.
    Isolation isolation =
        contain(fs::absolute(manifest_path), task, site_of_this_process()).value_or(Isolation{});

    // The knobs' arguments follow the command and its fixed arguments: argv elements, never a shell line.
    std::vector<std::string> argv = task.command;
    argv.insert(argv.end(), task.args.begin(), task.args.end());
    ProcessResult r;
    std::string start_error;
    // On a GPU node, the workload's GPU memory as nvidia-smi sees it, for a job whose log prints no peak
    // (trial/gpu_memory.hpp); stopped before the leftovers are killed (its own nvidia-smi is no leftover).
    std::optional<GpuMemorySampler> gpu_sampler;
    if (auto query = nvidia_smi_query())
        gpu_sampler.emplace(
            std::move(*query), [] { return descendants_of(::getpid()); }, std::chrono::seconds(1));
    try {
        r = run_process(argv, o);
    } catch (const Error& e) {
        start_error = e.what();
    }
    const double wall = sink.elapsed_s();
    const auto gpu_sampled_peak = gpu_sampler ? gpu_sampler->peak_bytes() : std::nullopt;
    gpu_sampler.reset();
    const int leftovers = kill_orphans(std::chrono::milliseconds(500));
    rusage ru{};
    getrusage(RUSAGE_CHILDREN, &ru);

    Result out;
    out.leftover_processes_killed = leftovers;
    out.isolated = isolation.in_place;
    out.isolation = isolation.detail;
    out.settings = seen_settings(task, o.env, argv);
    out.trial_id = task.trial_id;
    out.index = task.index;
    out.exit_code = r.exit_code;
    out.signal = r.term_signal;
    out.wall_s = wall;
    out.max_rss_children_bytes = static_cast<double>(ru.ru_maxrss) * 1024.0;
    out.job_cgroup_peak_bytes = job_cgroup_peak_bytes();
    out.gpu_sampled_peak_bytes = gpu_sampled_peak;
    out.log = log.string();
    out.steps = sink.finish();
    out.error = start_error;
    out.stopped_slow = stopped;
    for (const char* v : {"SLURMD_NODENAME", "SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"})
        if (const char* e = std::getenv(v)) out.slurm[v] = e;
    write_result(result, out);
    if (!start_error.empty()) return 127;
    return r.term_signal ? 128 + r.term_signal : r.exit_code;
}

} // namespace infrarsi::trial
