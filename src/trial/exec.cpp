#include "trial/exec.hpp"

#include "measure/log_format.hpp"
#include "trial/manifest.hpp"
#include "trial/rendezvous.hpp"
#include "trial/result.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"
#include "util/process.hpp"

#include <fmt/core.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sys/resource.h>

namespace infrarsi::trial {

namespace fs = std::filesystem;

namespace {

// The workload's output, written to its log as it arrives, and beside it (line_times_path) the seconds since
// the start at which each line ended.
class LogSink {
  public:
    explicit LogSink(const fs::path& log)
        : start_(std::chrono::steady_clock::now()), log_path_(log.string()),
          log_(::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)),
          times_(::open(line_times_path(log).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) {
        if (!log_)
            throw Error(std::string("cannot create the trial log: ") + std::strerror(errno), log_path_);
    }
    void write(std::string_view chunk) {
        write_all(log_.get(), chunk, log_path_);
        if (!times_) return;
        const double now = elapsed_s();
        std::string stamps;
        for (char c : chunk)
            if (c == '\n') stamps += fmt::format("{:.4f}\n", now);
        if (!stamps.empty()) write_all(times_.get(), stamps, log_path_ + " (line times)");
    }
    double elapsed_s() const {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    }

  private:
    std::chrono::steady_clock::time_point start_;
    std::string log_path_;
    UniqueFd log_, times_;
};

} // namespace

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
    // The workload is not told where result.json goes: the wrapper alone writes it.
    o.env = task.env;
    o.env["INFRARSI_CAMPAIGN"] = manifest.campaign;
    o.env["INFRARSI_TRIAL_ID"] = task.trial_id;
    o.env.emplace("PYTHONUNBUFFERED", "1"); // a Python job killed at its limit keeps the lines it printed
    // Trials that run at once on one host must not share a launcher's rendezvous port (trial/rendezvous.hpp).
    add_rendezvous_port(o.env);
    if (!task.workdir.empty()) o.cwd = task.workdir;
    // The output goes to the log file as it arrives (a job killed at its time limit still leaves its steps),
    // with the time each line ended, for formats that print no step time.
    LogSink sink(log);
    o.on_output = [&sink](std::string_view chunk) { sink.write(chunk); };
    // A job's end (time limit, scancel) signals every process of it: the wrapper keeps draining the output
    // until the workload has gone, and Slurm's SIGKILL ends it after KillWait if need be.
    std::signal(SIGTERM, SIG_IGN);
    std::signal(SIGINT, SIG_IGN);

    // The knobs' arguments follow the command and its fixed arguments: argv elements, never a shell line.
    std::vector<std::string> argv = task.command;
    argv.insert(argv.end(), task.args.begin(), task.args.end());
    ProcessResult r;
    std::string start_error;
    try {
        r = run_process(argv, o);
    } catch (const Error& e) {
        start_error = e.what();
    }
    const double wall = sink.elapsed_s();
    rusage ru{};
    getrusage(RUSAGE_CHILDREN, &ru);

    std::ifstream lin(log);
    const std::string text{std::istreambuf_iterator<char>(lin), {}};
    Result out;
    out.trial_id = task.trial_id;
    out.index = task.index;
    out.exit_code = r.exit_code;
    out.signal = r.term_signal;
    out.wall_s = wall;
    out.max_rss_children_bytes = static_cast<double>(ru.ru_maxrss) * 1024.0;
    out.log = log.string();
    const auto times = read_line_times(line_times_path(log));
    out.steps = measure::parse_log(text, manifest.metrics, &times);
    out.error = start_error;
    for (const char* v : {"SLURMD_NODENAME", "SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"})
        if (const char* e = std::getenv(v)) out.slurm[v] = e;
    write_result(result, out);
    if (!start_error.empty()) return 127;
    return r.term_signal ? 128 + r.term_signal : r.exit_code;
}

} // namespace infrarsi::trial
