#include "manifest.hpp"

#include "util/error.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

namespace infrarsi::spank {
namespace {

using nlohmann::json;

bool valid_id(const std::string& s) {
    if (s.empty() || s.size() > 128) return false;
    for (char c : s)
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '_' || c == '-'))
            return false;
    return true;
}

const json& member(const json& j, const char* name, const std::string& where) {
    if (!j.is_object() || !j.contains(name)) throw Error(std::string("missing field '") + name + "'", where);
    return j.at(name);
}

std::string string_member(const json& j, const char* name, const std::string& where) {
    const json& v = member(j, name, where);
    if (!v.is_string()) throw Error(std::string("field '") + name + "' must be a string", where);
    return v.get<std::string>();
}

} // namespace

bool valid_knob_name(const std::string& name) {
    if (name.empty() || name.size() > kMaxEnvNameBytes) return false;
    if (!((name[0] >= 'A' && name[0] <= 'Z') || name[0] == '_')) return false;
    for (char c : name)
        if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
    // Slurm's own variables and ours are not knobs: a manifest must not redirect a job's Slurm settings.
    for (const char* reserved : {"SLURM_", "SLURMD_", "SPANK_", "_SLURM_", "INFRARSI_"})
        if (name.starts_with(reserved)) return false;
    return true;
}

bool valid_env_value(const std::string& value) {
    if (value.size() > kMaxEnvValueBytes) return false;
    for (char c : value)
        if (c == '\0' || c == '\n' || c == '\r') return false;
    return true;
}

Manifest parse_manifest(const std::string& text, const std::string& where) {
    json j;
    try {
        j = json::parse(text);
    } catch (const json::parse_error& e) {
        throw Error(std::string("not valid JSON: ") + e.what(), where,
                    "a manifest written by the orchestrator");
    }
    if (!j.is_object()) throw Error("a manifest must be a JSON object", where);
    // Two shapes: ours ("format": "infrarsi-manifest/1", "trials") and the orchestrator's batch manifest
    // ("version": 1, "tasks", integer trial ids, more fields we ignore). Both must declare "knobs".
    const char* entries = "trials";
    if (j.contains("format")) {
        auto format = string_member(j, "format", where);
        if (format != kManifestFormat)
            throw Error("unknown manifest format '" + format + "'", where, kManifestFormat);
    } else if (j.contains("version")) {
        if (j.at("version") != 1)
            throw Error("unknown manifest version " + j.at("version").dump(), where, "version 1");
        entries = "tasks";
    } else {
        throw Error("a manifest needs \"format\": \"" + std::string(kManifestFormat) + "\" or \"version\": 1",
                    where);
    }

    Manifest m;
    m.campaign = string_member(j, "campaign", where);
    if (!valid_id(m.campaign))
        throw Error("campaign '" + m.campaign + "' is not [A-Za-z0-9._-]{1,128}", where);

    const json& knobs = member(j, "knobs", where);
    if (!knobs.is_object()) throw Error("'knobs' must be an object of NAME: [allowed values] or null", where);
    for (const auto& [name, allowed] : knobs.items()) {
        if (!valid_knob_name(name))
            throw Error("knob name '" + name + "' is not an environment name the plugin may set", where,
                        "[A-Z_][A-Z0-9_]*, not starting with SLURM_, SPANK_ or INFRARSI_");
        if (allowed.is_null()) {
            m.knobs[name] = std::nullopt;
            continue;
        }
        if (!allowed.is_array()) throw Error("knobs." + name + " must be an array of strings or null", where);
        std::vector<std::string> values;
        for (const auto& v : allowed) {
            if (!v.is_string() || !valid_env_value(v.get<std::string>()))
                throw Error("knobs." + name + " has a value that is not a valid environment string", where);
            values.push_back(v.get<std::string>());
        }
        m.knobs[name] = std::move(values);
    }

    const json& trials = member(j, entries, where);
    if (!trials.is_array()) throw Error(std::string("'") + entries + "' must be an array", where);
    std::set<uint32_t> seen;
    for (size_t i = 0; i < trials.size(); ++i) {
        const json& t = trials[i];
        const std::string at = where + ": " + entries + "[" + std::to_string(i) + "]";
        TrialEntry e;
        const json& index = member(t, "index", at);
        if (!index.is_number_integer() || index.get<int64_t>() < 0 ||
            index.get<int64_t>() > int64_t(UINT32_MAX))
            throw Error("'index' must be a non-negative integer (the array task id)", at);
        e.index = static_cast<uint32_t>(index.get<int64_t>());
        if (!seen.insert(e.index).second)
            throw Error("index " + std::to_string(e.index) + " appears twice", at);
        // The orchestrator numbers trials (its store's row id); ours are names. Either becomes a string.
        const json& tid = member(t, "trial_id", at);
        if (tid.is_number_integer() && tid.get<int64_t>() >= 0)
            e.trial_id = std::to_string(tid.get<int64_t>());
        else
            e.trial_id = string_member(t, "trial_id", at);
        if (!valid_id(e.trial_id))
            throw Error("trial_id '" + e.trial_id + "' is not [A-Za-z0-9._-]{1,128}", at);
        e.result = string_member(t, "result", at);
        if (e.result.empty() || e.result[0] != '/' || !valid_env_value(e.result))
            throw Error("result must be an absolute path without newlines", at);
        const json& env = member(t, "env", at);
        if (!env.is_object()) throw Error("'env' must be an object of NAME: value strings", at);
        for (const auto& [name, value] : env.items()) {
            auto k = m.knobs.find(name);
            if (k == m.knobs.end())
                throw Error("env sets '" + name + "', which the contract does not declare as a knob", at,
                            "only names listed in 'knobs'");
            if (!value.is_string()) throw Error("env." + name + " must be a string", at);
            auto v = value.get<std::string>();
            if (!valid_env_value(v))
                throw Error("env." + name + " is longer than " + std::to_string(kMaxEnvValueBytes) +
                                " bytes or has a NUL or newline",
                            at);
            if (k->second && std::find(k->second->begin(), k->second->end(), v) == k->second->end())
                throw Error("env." + name + "=" + v + " is not one of the contract's allowed values", at);
            e.env[name] = std::move(v);
        }
        m.trials.push_back(std::move(e));
    }
    return m;
}

Manifest read_manifest(const std::string& path) {
    if (path.empty() || path[0] != '/') throw Error("manifest path must be absolute", path);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) throw Error(std::string("cannot open the manifest: ") + std::strerror(errno), path);
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) throw Error("manifest is not a regular file", path);
    if (static_cast<size_t>(st.st_size) > kMaxManifestBytes)
        throw Error("manifest is " + std::to_string(st.st_size) + " bytes", path,
                    "at most " + std::to_string(kMaxManifestBytes));
    std::string text(static_cast<size_t>(st.st_size), '\0');
    size_t done = 0;
    while (done < text.size()) {
        ssize_t n = ::read(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw Error(std::string("read: ") + std::strerror(errno), path);
        if (n == 0) break;
        done += static_cast<size_t>(n);
    }
    text.resize(done);
    return parse_manifest(text, path);
}

std::map<std::string, std::string> trial_environment(const Manifest& m, uint32_t index) {
    for (const auto& t : m.trials) {
        if (t.index != index) continue;
        auto env = t.env;
        env["INFRARSI_CAMPAIGN"] = m.campaign;
        env["INFRARSI_TRIAL_ID"] = t.trial_id;
        env["INFRARSI_RESULT"] = t.result;
        return env;
    }
    throw Error("the manifest has no trial for array index " + std::to_string(index),
                "campaign " + m.campaign);
}

} // namespace infrarsi::spank
