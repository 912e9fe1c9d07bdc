#include "tune_request.hpp"

#include "util/error.hpp"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace infrarsi::spank {
namespace {

bool printable(const std::string& s) {
    for (unsigned char c : s)
        if (c < 0x20 || c == 0x7f) return false;
    return true;
}

std::string str(const nlohmann::json& j, const char* name) {
    if (!j.contains(name) || !j.at(name).is_string())
        throw Error(std::string("field '") + name + "' missing or not a string", "tune request");
    auto s = j.at(name).get<std::string>();
    if (s.size() > 4096 || !printable(s))
        throw Error(std::string("field '") + name + "' is too long or has control characters",
                    "tune request");
    return s;
}

uint32_t id(const nlohmann::json& j, const char* name) {
    if (!j.contains(name) || !j.at(name).is_number_integer() || j.at(name).get<int64_t>() < 0 ||
        j.at(name).get<int64_t>() > int64_t(UINT32_MAX))
        throw Error(std::string("field '") + name + "' must be a non-negative integer", "tune request");
    return static_cast<uint32_t>(j.at(name).get<int64_t>());
}

} // namespace

nlohmann::json to_json(const TuneRequest& r) {
    return {{"format", kTuneRequestFormat},
            {"job_id", r.job_id},
            {"uid", r.uid},
            {"user", r.user},
            {"script", r.script},
            {"contract", r.contract},
            {"submit_dir", r.submit_dir},
            {"job_name", r.job_name},
            {"node", r.node},
            {"time", r.time},
            {"plugin_version", r.plugin_version}};
}

TuneRequest tune_request_from_json(const nlohmann::json& j) {
    if (!j.is_object()) throw Error("a tune request must be a JSON object", "tune request");
    if (str(j, "format") != kTuneRequestFormat)
        throw Error("unknown format", "tune request", kTuneRequestFormat);
    TuneRequest r;
    r.job_id = id(j, "job_id");
    r.uid = id(j, "uid");
    r.user = str(j, "user");
    r.script = str(j, "script");
    r.contract = str(j, "contract");
    r.submit_dir = str(j, "submit_dir");
    r.job_name = str(j, "job_name");
    r.node = str(j, "node");
    r.time = str(j, "time");
    r.plugin_version = str(j, "plugin_version");
    if (r.job_id == 0) throw Error("job_id must be > 0", "tune request");
    if (r.contract.empty() || r.contract[0] != '/')
        throw Error("contract must be an absolute path", "tune request");
    if (!r.script.empty() && r.script[0] != '/')
        throw Error("script must be an absolute path", "tune request");
    return r;
}

std::optional<std::string> find_batch_script(const std::vector<std::string>& argv, const std::string& cwd) {
    for (size_t i = 1; i < argv.size(); ++i) {
        const std::string& a = argv[i];
        if (a.empty() || a[0] == '-') continue;
        std::string path = absolute_path(a, cwd);
        std::error_code ec;
        if (!std::filesystem::is_regular_file(path, ec)) continue;
        std::ifstream in(path, std::ios::binary);
        char head[2] = {0, 0};
        if (in.read(head, 2) && head[0] == '#' && head[1] == '!') return path;
    }
    return std::nullopt;
}

std::string default_contract_for(const std::string& script) {
    std::filesystem::path p(script);
    return (p.parent_path() / (p.stem().string() + ".contract.toml")).string();
}

std::string absolute_path(const std::string& path, const std::string& cwd) {
    if (!path.empty() && path[0] == '/') return std::filesystem::path(path).lexically_normal().string();
    return (std::filesystem::path(cwd) / path).lexically_normal().string();
}

bool valid_path_value(const std::string& path) {
    return !path.empty() && path[0] == '/' && path.size() <= 4096 && printable(path);
}

} // namespace infrarsi::spank
