#include "trial/exec.hpp"

#include "measure/steps.hpp"
#include "trial/manifest.hpp"
#include "trial/result.hpp"
#include "util/error.hpp"
#include "util/process.hpp"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sys/resource.h>

namespace infrarsi::trial {

namespace fs = std::filesystem;

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
    if (!task.workdir.empty()) o.cwd = task.workdir;
    // The output goes straight to the log file, so a job killed at its time limit still leaves its steps.
    std::vector<std::string> argv{"/bin/sh", "-c", "exec \"$@\" >\"$0\" 2>&1", log.string()};
    argv.insert(argv.end(), task.command.begin(), task.command.end());

    const auto start = std::chrono::steady_clock::now();
    ProcessResult r;
    std::string start_error;
    try {
        r = run_process(argv, o);
    } catch (const Error& e) {
        start_error = e.what();
    }
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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
    out.steps = measure::parse_step_log(text, manifest.step_prefix, manifest.summary_prefix);
    out.error = start_error;
    for (const char* v : {"SLURMD_NODENAME", "SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"})
        if (const char* e = std::getenv(v)) out.slurm[v] = e;
    write_result(result, out);
    if (!start_error.empty()) return 127;
    return r.term_signal ? 128 + r.term_signal : r.exit_code;
}

} // namespace infrarsi::trial
