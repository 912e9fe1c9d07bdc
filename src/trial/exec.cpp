#include "trial/exec.hpp"

#include "measure/steps.hpp"
#include "util/error.hpp"
#include "util/process.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sys/resource.h>

namespace infrarsi::trial {

namespace fs = std::filesystem;

int execute(const fs::path& manifest_path, int index) {
    std::ifstream in(manifest_path);
    if (!in)
        throw Error("cannot read the batch manifest", manifest_path.string(), "a readable manifest.json");
    nlohmann::json manifest;
    try {
        manifest = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        throw Error(std::string("malformed manifest: ") + e.what(), manifest_path.string(),
                    "JSON (docs/orchestrator.md)");
    }
    const nlohmann::json* task = nullptr;
    for (const auto& t : manifest.at("tasks"))
        if (t.at("index").get<int>() == index) task = &t;
    if (!task)
        throw Error("no task with index " + std::to_string(index), manifest_path.string(),
                    "an entry per array index (SLURM_ARRAY_TASK_ID)");
    const fs::path result = task->at("result").get<std::string>();
    const fs::path log = task->at("log").get<std::string>();
    fs::create_directories(result.parent_path());
    fs::create_directories(log.parent_path());

    ProcessOptions o;
    for (const auto& [k, v] : task->at("env").items())
        o.env[k] = v.get<std::string>();
    o.env["INFRARSI_TRIAL_ID"] = std::to_string(task->at("trial_id").get<long long>());
    if (task->contains("workdir")) o.cwd = task->at("workdir").get<std::string>();
    // The output goes straight to the log file, so a job killed at its time limit still leaves its steps.
    std::vector<std::string> argv{"/bin/sh", "-c", "exec \"$@\" >\"$0\" 2>&1", log.string()};
    for (const auto& a : task->at("command"))
        argv.push_back(a.get<std::string>());

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
    std::string text{std::istreambuf_iterator<char>(lin), {}};
    auto steps = measure::parse_step_log(text, manifest.value("step_prefix", "INFRARSI_STEP"),
                                         manifest.value("summary_prefix", "INFRARSI_SUMMARY"));
    nlohmann::json j;
    j["trial_id"] = task->at("trial_id");
    j["index"] = index;
    j["exit_code"] = r.exit_code;
    j["signal"] = r.term_signal;
    j["wall_s"] = wall;
    j["max_rss_children_bytes"] = static_cast<double>(ru.ru_maxrss) * 1024.0;
    j["log"] = log.string();
    j["steps"] = nlohmann::json::array();
    for (const auto& s : steps.steps)
        j["steps"].push_back(measure::to_json(s));
    j["malformed_step_lines"] = steps.malformed;
    if (steps.summary) j["summary"] = *steps.summary;
    if (!start_error.empty()) j["error"] = start_error;
    for (const char* v : {"SLURMD_NODENAME", "SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"})
        if (const char* e = std::getenv(v)) j["slurm"][v] = e;
    const fs::path tmp = result.string() + ".tmp";
    {
        std::ofstream out(tmp);
        out << j.dump(1) << "\n";
    }
    fs::rename(tmp, result);
    if (!start_error.empty()) return 127;
    return r.term_signal ? 128 + r.term_signal : r.exit_code;
}

} // namespace infrarsi::trial
