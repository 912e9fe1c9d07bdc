#include "trial/evidence.hpp"

#include "util/bounded_json.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"
#include "util/json_field.hpp"
#include "util/text.hpp"

#include <cerrno>
#include <sys/stat.h>
#include <unistd.h>

namespace infrarsi::trial {

using nlohmann::json;
namespace fs = std::filesystem;

json to_json(const TrialEvidence& e) {
    json j = {{"format", kEvidenceFormat},
              {"source", e.source},
              {"job", e.job},
              {"node", e.node},
              {"start_epoch", e.start_epoch},
              {"end_epoch", e.end_epoch},
              {"elapsed_s", e.elapsed_s},
              {"exit_code", e.exit_code},
              {"signal", e.signal}};
    if (e.memory_peak_bytes) j["memory_peak_bytes"] = *e.memory_peak_bytes;
    if (e.result_file) j["result_file"] = to_json(*e.result_file);
    if (e.log_file) j["log_file"] = to_json(*e.log_file);
    return j;
}

TrialEvidence evidence_from_json(const json& j, const std::string& where) {
    if (!j.is_object()) throw Error("evidence must be a JSON object", where);
    if (j.value("format", "") != kEvidenceFormat)
        throw Error("not trial evidence (format " + j.value("format", json()).dump() + ")", where,
                    kEvidenceFormat);
    TrialEvidence e;
    e.source = json_field<std::string>(j, "source", where);
    e.job = json_field<std::string>(j, "job", where);
    e.node = json_field<std::string>(j, "node", where);
    e.start_epoch = json_field<double>(j, "start_epoch", where);
    e.end_epoch = json_field<double>(j, "end_epoch", where);
    e.elapsed_s = json_field<double>(j, "elapsed_s", where);
    e.exit_code = json_field<int>(j, "exit_code", where);
    e.signal = json_field<int>(j, "signal", where);
    if (j.contains("memory_peak_bytes"))
        e.memory_peak_bytes = json_field<double>(j, "memory_peak_bytes", where);
    if (j.contains("result_file"))
        e.result_file = file_digest_from_json(j["result_file"], where + ": result_file");
    if (j.contains("log_file")) e.log_file = file_digest_from_json(j["log_file"], where + ": log_file");
    return e;
}

namespace {
// "12_3" -> ("12", "3"); "12" -> ("12", "0").
std::pair<std::string, std::string> split_job(const std::string& job) {
    const auto us = job.find('_');
    if (us == std::string::npos) return {job, "0"};
    return {job.substr(0, us), job.substr(us + 1)};
}
bool digits(const std::string& s) {
    return s.size() <= 12 && all_digits(s);
}
} // namespace

fs::path evidence_dir(const fs::path& spool, const std::string& job) {
    return spool / "trials" / split_job(job).first;
}

std::string evidence_file_prefix(const std::string& job) {
    return split_job(job).second + ".";
}

std::optional<TrialEvidence> read_plugin_evidence(const fs::path& spool, const std::string& job) {
    const auto [array, task] = split_job(job);
    if (spool.empty() || !digits(array) || !digits(task)) return std::nullopt;
    const fs::path dir = evidence_dir(spool, job);
    // Root's own records only: in a directory and files root owns and no one else may write. A file the
    // job's user could have planted (an orchestrator may be pointed at any directory) is no evidence.
    const auto roots = [](const fs::path& p, bool dir) {
        struct stat st {};
        return ::lstat(p.c_str(), &st) == 0 && (dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode)) &&
               st.st_uid == 0 && !(st.st_mode & (S_IWGRP | S_IWOTH));
    };
    if (!roots(dir, true)) return std::nullopt;
    std::error_code ec;
    std::optional<TrialEvidence> last;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind(evidence_file_prefix(job), 0) != 0 || entry.path().extension() != ".json") continue;
        if (!roots(entry.path(), false)) continue;
        try {
            const auto j = read_bounded_json(entry.path().string(), "trial evidence the plugin wrote",
                                             {.max_bytes = 1u << 16}, /*follow_symlink=*/false);
            auto e = evidence_from_json(j, entry.path().string());
            if (e.job != job) continue;
            if (!last || e.start_epoch > last->start_epoch) last = std::move(e);
        } catch (const std::exception&) {
            continue; // not evidence
        }
    }
    return last;
}

} // namespace infrarsi::trial
