#include "trial/tune_request.hpp"

#include "util/bounded_json.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"
#include "util/printable.hpp"

#include <nlohmann/json.hpp>

namespace infrarsi::trial {
namespace {

std::string str(const nlohmann::json& j, const char* name) {
    if (!j.contains(name) || !j.at(name).is_string())
        throw Error(std::string("field '") + name + "' missing or not a string", "tune request");
    auto s = j.at(name).get<std::string>();
    if (s.size() > 4096 || !printable(s))
        throw Error(std::string("field '") + name + "' is too long or has control characters",
                    "tune request");
    return s;
}

std::uint32_t id(const nlohmann::json& j, const char* name) {
    if (!j.contains(name) || !j.at(name).is_number_integer() || j.at(name).get<std::int64_t>() < 0 ||
        j.at(name).get<std::int64_t>() > std::int64_t(UINT32_MAX))
        throw Error(std::string("field '") + name + "' must be a non-negative integer", "tune request");
    return static_cast<std::uint32_t>(j.at(name).get<std::int64_t>());
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

TuneRequest read_tune_request(const std::filesystem::path& path) {
    const auto j = read_bounded_json(path.string(), "a tune request", {.max_bytes = kMaxTuneRequestBytes},
                                     /*follow_symlink=*/false);
    try {
        return tune_request_from_json(j);
    } catch (const Error& e) {
        throw Error(e.problem(), path.string(), e.expected());
    }
}

} // namespace infrarsi::trial
