#include "trial/manifest.hpp"

#include "util/atomic_file.hpp"
#include "util/bounded_json.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"
#include "util/json_field.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_set>

namespace infrarsi::trial {
namespace {

using nlohmann::json;

// The knobs' allowed values as sets, built once: a task's env is checked in time linear in the manifest's
// size, not in tasks times values (a 4 MiB manifest of 43k tasks took 75 s per step with a linear search).
using AllowedValues = std::map<std::string, std::optional<std::unordered_set<std::string>>, std::less<>>;

// A value from the input, quoted in an error message: never all of a 4 MiB field.
std::string excerpt(const json& v) {
    auto s = v.dump();
    return s.size() <= 64 ? s : s.substr(0, 64) + "...";
}

bool valid_id(const std::string& s) {
    if (s.empty() || s.size() > 128) return false;
    return std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
               c == '_' || c == '-';
    });
}

bool absolute_path(const std::string& p) {
    return !p.empty() && p[0] == '/' && valid_env_value(p);
}

// A path field the wrapper uses: absent is empty, present must be absolute.
std::string optional_path(const json& t, const char* name, const std::string& where) {
    if (!t.contains(name)) return {};
    auto p = json_field<std::string>(t, name, where);
    if (!absolute_path(p))
        throw Error(std::string("'") + name + "' must be an absolute path without newlines", where);
    return p;
}

// An argv element list: strings without NUL bytes.
std::vector<std::string> argv_field(const json& t, const char* name, const std::string& at) {
    auto v = json_field<std::vector<std::string>>(t, name, at);
    for (const auto& a : v)
        if (a.find('\0') != std::string::npos) throw Error(std::string("'") + name + "' has a NUL byte", at);
    return v;
}

// "--name" or "--name=value": a long option, printable, as the batch runner writes them.
bool valid_sbatch_option(const std::string& o) {
    const auto eq = o.find('=');
    const std::string name = o.substr(0, eq);
    if (name.size() < 3 || name.rfind("--", 0) != 0) return false;
    if (!std::all_of(name.begin() + 2, name.end(),
                     [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; }))
        return false;
    return valid_env_value(o);
}

ManifestTask task_from_json(const json& t, const AllowedValues& knobs, bool v2, const std::string& at) {
    if (!t.is_object()) throw Error("a task must be a JSON object", at);
    ManifestTask e;
    e.index = json_field<std::uint32_t>(t, "index", at);
    e.trial_id = json_field<std::string>(t, "trial_id", at);
    if (!valid_id(e.trial_id)) throw Error("trial_id '" + e.trial_id + "' is not [A-Za-z0-9._-]{1,128}", at);
    e.result = json_field<std::string>(t, "result", at);
    if (!absolute_path(e.result)) throw Error("'result' must be an absolute path without newlines", at);
    if (!t.contains("env")) throw Error("missing field 'env'", at);
    const json& env = t.at("env");
    if (!env.is_object()) throw Error("'env' must be an object of NAME: value strings", at);
    for (const auto& [name, value] : env.items()) {
        auto k = knobs.find(name);
        if (k == knobs.end())
            throw Error("env sets '" + name + "', which the contract does not declare as a knob", at,
                        "only names listed in 'knobs'");
        if (!value.is_string()) throw Error("env." + name + " must be a string", at);
        auto v = value.get<std::string>();
        if (!valid_env_value(v))
            throw Error("env." + name + " is longer than " + std::to_string(kMaxEnvValueBytes) +
                            " bytes or has a NUL or newline",
                        at);
        if (k->second && !k->second->contains(v))
            throw Error("env." + name + "=" + v + " is not one of the contract's allowed values", at);
        e.env[name] = std::move(v);
    }
    if (t.contains("kind")) e.kind = json_field<std::string>(t, "kind", at);
    if (t.contains("candidate")) {
        e.candidate = t.at("candidate");
        if (!e.candidate.is_object() && !e.candidate.is_null())
            throw Error("'candidate' must be an object", at);
    }
    if (t.contains("command")) {
        e.command = argv_field(t, "command", at);
        if (e.command.empty()) throw Error("'command' must be a non-empty argv", at);
    }
    if (v2 && (t.contains("args") || t.contains("sbatch_options")))
        throw Error("'args' and 'sbatch_options' are fields of " + std::string(kManifestFormat) +
                        ", not of " + kManifestFormatV2,
                    at, std::string("\"format\": \"") + kManifestFormat + "\"");
    if (t.contains("args")) e.args = argv_field(t, "args", at);
    if (t.contains("sbatch_options")) {
        e.sbatch_options = json_field<std::vector<std::string>>(t, "sbatch_options", at);
        for (const auto& o : e.sbatch_options)
            if (!valid_sbatch_option(o))
                throw Error("sbatch option '" + o + "' is not --name or --name=value", at,
                            "long sbatch options as the orchestrator writes them");
    }
    if (t.contains("stop_slow")) {
        const json& st = t.at("stop_slow");
        ManifestTask::SlowStop s;
        s.skip_steps = json_field<int>(st, "skip_steps", at);
        s.after_steps = json_field<int>(st, "after_steps", at);
        if (st.contains("control_log")) {
            s.control_log = optional_path(st, "control_log", at);
            s.control_ratio = json_field<double>(st, "control_ratio", at);
            if (st.contains("step_s")) s.step_s = json_field<double>(st, "step_s", at);
            if (s.control_log.empty() || !(s.control_ratio > 0) || !std::isfinite(s.control_ratio) ||
                !(s.step_s >= 0) || !std::isfinite(s.step_s))
                throw Error(
                    "'stop_slow' with control_log needs an absolute control_log, control_ratio > 0 and "
                    "step_s >= 0",
                    at);
        } else {
            s.step_s = json_field<double>(st, "step_s", at);
            if (!(s.step_s > 0) || !std::isfinite(s.step_s))
                throw Error("'stop_slow' needs step_s > 0 (or a control_log and control_ratio)", at);
        }
        if (s.skip_steps < 0 || s.after_steps < 1 || s.after_steps > 1000000 || s.skip_steps > 1000000)
            throw Error("'stop_slow' needs skip_steps >= 0 and after_steps >= 1", at);
        e.stop_slow = s;
    }
    e.build = optional_path(t, "build", at);
    e.workdir = optional_path(t, "workdir", at);
    e.log = optional_path(t, "log", at);
    return e;
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
    return std::none_of(value.begin(), value.end(),
                        [](char c) { return c == '\0' || c == '\n' || c == '\r'; });
}

const ManifestTask& Manifest::task(std::uint32_t index) const {
    for (const auto& t : tasks)
        if (t.index == index) return t;
    throw Error("the manifest has no trial for array index " + std::to_string(index), "campaign " + campaign,
                "an entry per array index (SLURM_ARRAY_TASK_ID)");
}

json to_json(const Manifest& m) {
    json knobs = json::object();
    for (const auto& [name, allowed] : m.knobs)
        knobs[name] = allowed ? json(*allowed) : json(nullptr);
    json tasks = json::array();
    for (const auto& t : m.tasks) {
        json e = {{"index", t.index}, {"trial_id", t.trial_id}, {"env", t.env}, {"result", t.result}};
        if (!t.kind.empty()) e["kind"] = t.kind;
        if (!t.candidate.is_null()) e["candidate"] = t.candidate;
        if (!t.command.empty()) e["command"] = t.command;
        if (!t.args.empty()) e["args"] = t.args;
        if (!t.sbatch_options.empty()) e["sbatch_options"] = t.sbatch_options;
        if (t.stop_slow) {
            e["stop_slow"] = {{"skip_steps", t.stop_slow->skip_steps},
                              {"after_steps", t.stop_slow->after_steps}};
            if (t.stop_slow->control_log.empty() || t.stop_slow->step_s > 0)
                e["stop_slow"]["step_s"] = t.stop_slow->step_s;
            if (!t.stop_slow->control_log.empty()) {
                e["stop_slow"]["control_log"] = t.stop_slow->control_log;
                e["stop_slow"]["control_ratio"] = t.stop_slow->control_ratio;
            }
        }
        for (const auto& [name, value] :
             {std::pair{"build", &t.build}, {"workdir", &t.workdir}, {"log", &t.log}})
            if (!value->empty()) e[name] = *value;
        tasks.push_back(std::move(e));
    }
    return {{"format", kManifestFormat},     {"campaign", m.campaign}, {"batch", m.batch}, {"kind", m.kind},
            {"metrics", to_json(m.metrics)}, {"knobs", knobs},         {"tasks", tasks}};
}

Manifest manifest_from_json(const json& j, const std::string& where) {
    if (!j.is_object()) throw Error("a manifest must be a JSON object", where);
    if (j.contains("version"))
        throw Error("a batch manifest of an older infrarsi (\"version\": " + excerpt(j.at("version")) + ")",
                    where,
                    std::string(kManifestFormat) + "; `infrarsi run` on its campaign directory rewrites it");
    const auto format = json_field<std::string>(j, "format", where);
    if (format == "infrarsi-manifest/1")
        throw Error("format infrarsi-manifest/1 is no longer read", where,
                    std::string("\"format\": \"") + kManifestFormat +
                        "\", with the entries under \"tasks\" instead of \"trials\" (docs/plugin.md)");
    const bool v2 = format == kManifestFormatV2;
    if (format != kManifestFormat && !v2)
        throw Error("unknown manifest format '" + format + "'", where,
                    std::string(kManifestFormat) + " (or " + kManifestFormatV2 + ")");

    Manifest m;
    m.campaign = json_field<std::string>(j, "campaign", where);
    if (!valid_id(m.campaign))
        throw Error("campaign '" + m.campaign + "' is not [A-Za-z0-9._-]{1,128}", where);
    if (j.contains("batch")) m.batch = json_field<std::int64_t>(j, "batch", where);
    if (j.contains("kind")) m.kind = json_field<std::string>(j, "kind", where);
    if (j.contains("metrics"))
        m.metrics = measure::log_format_from_json(j.at("metrics"), where + ": metrics");

    if (!j.contains("knobs")) throw Error("missing field 'knobs'", where);
    const json& knobs = j.at("knobs");
    if (!knobs.is_object()) throw Error("'knobs' must be an object of NAME: [allowed values] or null", where);
    AllowedValues allowed_values;
    for (const auto& [name, allowed] : knobs.items()) {
        if (!valid_knob_name(name))
            throw Error("knob name '" + name + "' is not an environment name the plugin may set", where,
                        "[A-Z_][A-Z0-9_]*, not starting with SLURM_, SPANK_ or INFRARSI_");
        if (allowed.is_null()) {
            m.knobs[name] = std::nullopt;
            allowed_values[name] = std::nullopt;
            continue;
        }
        if (!allowed.is_array()) throw Error("knobs." + name + " must be an array of strings or null", where);
        std::vector<std::string> values;
        for (const auto& v : allowed) {
            if (!v.is_string() || !valid_env_value(v.get<std::string>()))
                throw Error("knobs." + name + " has a value that is not a valid environment string", where);
            values.push_back(v.get<std::string>());
        }
        allowed_values[name].emplace(values.begin(), values.end());
        m.knobs[name] = std::move(values);
    }

    if (!j.contains("tasks")) throw Error("missing field 'tasks'", where);
    const json& tasks = j.at("tasks");
    if (!tasks.is_array()) throw Error("'tasks' must be an array", where);
    std::set<std::uint32_t> seen;
    for (std::size_t i = 0; i < tasks.size(); ++i) {
        const std::string at = where + ": tasks[" + std::to_string(i) + "]";
        auto t = task_from_json(tasks[i], allowed_values, v2, at);
        if (!seen.insert(t.index).second)
            throw Error("index " + std::to_string(t.index) + " appears twice", at);
        m.tasks.push_back(std::move(t));
    }
    return m;
}

Manifest parse_manifest(const std::string& text, const std::string& where) {
    return manifest_from_json(parse_bounded_json(text, where, "a manifest written by the orchestrator",
                                                 {.max_bytes = kMaxManifestBytes}),
                              where);
}

Manifest read_manifest(const std::filesystem::path& path) {
    if (!path.is_absolute()) throw Error("manifest path must be absolute", path.string());
    return parse_manifest(read_regular_file(path.string(), {.max_bytes = kMaxManifestBytes}), path.string());
}

void write_manifest(const std::filesystem::path& path, const Manifest& m) {
    const json j = to_json(m);
    manifest_from_json(j, path.string() + " (being written)");
    write_file_atomically(path, j.dump(1) + "\n");
}

bool upgrade_manifest(const std::filesystem::path& path) {
    json j = read_bounded_json(path.string(), "a manifest written by the orchestrator",
                               {.max_bytes = kMaxManifestBytes});
    if (!j.is_object() || !j.contains("version")) return false;
    if (j.at("version") != 1)
        throw Error("unknown manifest version " + excerpt(j.at("version")), path.string(),
                    "version 1 or " + std::string(kManifestFormat));
    // Version 1 numbered trials with integers and had only the project's step lines, by their prefixes.
    j.erase("version");
    j["format"] = kManifestFormat;
    measure::LogFormat metrics;
    if (j.contains("step_prefix") && j.at("step_prefix").is_string())
        metrics.step_prefix = j.at("step_prefix");
    if (j.contains("summary_prefix") && j.at("summary_prefix").is_string())
        metrics.summary_prefix = j.at("summary_prefix");
    j.erase("step_prefix");
    j.erase("summary_prefix");
    j["metrics"] = to_json(metrics);
    if (j.contains("tasks") && j.at("tasks").is_array())
        for (auto& t : j.at("tasks"))
            if (t.is_object() && t.contains("trial_id") && t.at("trial_id").is_number_integer())
                t["trial_id"] = std::to_string(t.at("trial_id").get<std::int64_t>());
    // The first version-1 writers declared no knobs: every name the tasks set, with the values they set.
    if (!j.contains("knobs")) {
        std::map<std::string, std::set<std::string>> declared;
        for (const auto& t : j.value("tasks", json::array()))
            if (t.is_object() && t.contains("env") && t.at("env").is_object())
                for (const auto& [name, value] : t.at("env").items())
                    if (value.is_string()) declared[name].insert(value.get<std::string>());
        j["knobs"] = json::object();
        for (const auto& [name, values] : declared)
            j["knobs"][name] = std::vector<std::string>(values.begin(), values.end());
    }
    write_manifest(path, manifest_from_json(j, path.string()));
    return true;
}

std::map<std::string, std::string> trial_environment(const Manifest& m, std::uint32_t index) {
    const auto& t = m.task(index);
    auto env = t.env;
    env["INFRARSI_CAMPAIGN"] = m.campaign;
    env["INFRARSI_TRIAL_ID"] = t.trial_id;
    env["INFRARSI_RESULT"] = t.result;
    return env;
}

} // namespace infrarsi::trial
