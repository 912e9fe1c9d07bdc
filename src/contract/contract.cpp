#include "contract/contract.hpp"

#include "contract/draft.hpp"

#include "space/presets.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"
#include "util/number.hpp"
#include "util/toml_limits.hpp"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <set>

namespace infrarsi::contract {
namespace {

// Reads typed values out of the TOML tree; every failure names file:line and what was expected.
class Reader {
  public:
    explicit Reader(std::string file) : file_(std::move(file)) {}

    std::string at(const toml::node& n) const { return at(n.source()); }
    std::string at(const toml::source_region& r) const {
        return r.begin.line ? fmt::format("{}:{}", file_, r.begin.line) : file_;
    }
    std::string at_key(const toml::table& t, const std::string& key) const {
        for (auto&& [k, v] : t)
            if (k.str() == key) return at(k.source());
        return at(t);
    }
    const std::string& file() const { return file_; }

    [[noreturn]] void fail(const toml::node& n, const std::string& what, const std::string& expected) const {
        throw Error(what, at(n), expected);
    }

    const toml::table* table(const toml::table& parent, const std::string& key, const std::string& path,
                             bool required) const {
        const toml::node* n = parent.get(key);
        if (!n) {
            if (required) throw Error("missing table [" + path + "]", at(parent), "a [" + path + "] table");
            return nullptr;
        }
        if (!n->is_table()) fail(*n, "'" + path + "' is a " + type(*n), "a table");
        return n->as_table();
    }

    // Refuses keys the format does not know, so a typo is an error instead of a silent default.
    void known_keys(const toml::table& t, const std::string& path,
                    std::initializer_list<const char*> keys) const {
        for (auto&& entry : t) {
            const auto& k = entry.first;
            bool ok = std::any_of(keys.begin(), keys.end(), [&](const char* x) { return k.str() == x; });
            if (!ok) {
                std::string list;
                for (auto x : keys)
                    list += (list.empty() ? "" : ", ") + std::string(x);
                throw Error("unknown key '" + std::string(k.str()) + "' in [" + path + "]", at(k.source()),
                            "one of: " + list);
            }
        }
    }

    std::optional<std::string> str(const toml::table& t, const std::string& key, const std::string& path,
                                   bool required = false) const {
        const toml::node* n = t.get(key);
        if (!n) {
            if (required) throw Error("missing key '" + key + "' in [" + path + "]", at(t), "a string value");
            return std::nullopt;
        }
        if (!n->is_string()) fail(*n, "'" + path + "." + key + "' is a " + type(*n), "a string");
        return n->as_string()->get();
    }

    std::optional<long long> integer(const toml::table& t, const std::string& key, const std::string& path,
                                     bool required = false, long long min = LLONG_MIN,
                                     long long max = LLONG_MAX) const {
        const toml::node* n = t.get(key);
        if (!n) {
            if (required)
                throw Error("missing key '" + key + "' in [" + path + "]", at(t), "an integer value");
            return std::nullopt;
        }
        if (!n->is_integer()) fail(*n, "'" + path + "." + key + "' is a " + type(*n), "an integer");
        long long v = n->as_integer()->get();
        if (v < min || v > max)
            fail(*n, fmt::format("'{}.{}' is {}", path, key, v),
                 max == LLONG_MAX ? fmt::format("an integer >= {}", min)
                                  : fmt::format("an integer in [{}, {}]", min, max));
        return v;
    }

    // A count held in an int (trials, nodes, repeats...): in [min, INT_MAX], never cast down silently.
    std::optional<int> count(const toml::table& t, const std::string& key, const std::string& path,
                             bool required, long long min) const {
        auto v = integer(t, key, path, required, min, INT_MAX);
        if (!v) return std::nullopt;
        return static_cast<int>(*v);
    }

    std::optional<double> number(const toml::table& t, const std::string& key, const std::string& path,
                                 bool required = false) const {
        const toml::node* n = t.get(key);
        if (!n) {
            if (required) throw Error("missing key '" + key + "' in [" + path + "]", at(t), "a number");
            return std::nullopt;
        }
        if (n->is_integer()) return static_cast<double>(n->as_integer()->get());
        if (!n->is_floating_point()) fail(*n, "'" + path + "." + key + "' is a " + type(*n), "a number");
        const double v = n->as_floating_point()->get();
        if (!std::isfinite(v)) fail(*n, "'" + path + "." + key + "' is not finite", "a finite number");
        return v;
    }

    std::optional<bool> boolean(const toml::table& t, const std::string& key, const std::string& path) const {
        const toml::node* n = t.get(key);
        if (!n) return std::nullopt;
        if (!n->is_boolean()) fail(*n, "'" + path + "." + key + "' is a " + type(*n), "true or false");
        return n->as_boolean()->get();
    }

    std::vector<std::string> strings(const toml::table& t, const std::string& key,
                                     const std::string& path) const {
        std::vector<std::string> out;
        const toml::node* n = t.get(key);
        if (!n) return out;
        if (!n->is_array()) fail(*n, "'" + path + "." + key + "' is a " + type(*n), "an array of strings");
        for (const auto& e : *n->as_array()) {
            if (!e.is_string())
                fail(e, "an element of '" + path + "." + key + "' is a " + type(e), "a string");
            out.push_back(e.as_string()->get());
        }
        return out;
    }

    static std::string type(const toml::node& n) {
        switch (n.type()) {
        case toml::node_type::table:
            return "table";
        case toml::node_type::array:
            return "array";
        case toml::node_type::string:
            return "string";
        case toml::node_type::integer:
            return "integer";
        case toml::node_type::floating_point:
            return "float";
        case toml::node_type::boolean:
            return "boolean";
        default:
            return "date/time";
        }
    }

  private:
    std::string file_;
};

bool valid_env_name(const std::string& s) {
    if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
    return std::all_of(s.begin(), s.end(),
                       [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

fs::path resolve(const fs::path& dir, const std::string& p) {
    fs::path path(p);
    return (path.is_absolute() ? path : dir / path).lexically_normal();
}

void read_workload(const Reader& r, const toml::table& root, Contract& c) {
    const toml::table& w = *r.table(root, "workload", "workload", true);
    r.known_keys(w, "workload",
                 {"source", "build", "command", "sbatch_script", "args", "binary", "binary_env", "env",
                  "keep_job_files"});
    auto source = r.str(w, "source", "workload", true);
    c.workload.source = resolve(c.dir, *source);
    if (!fs::is_directory(c.workload.source))
        throw Error("workload source '" + c.workload.source.string() + "' is not a directory",
                    r.at_key(w, "source"),
                    "the path (relative to the contract) of the workload's source tree");
    if (const toml::node* b = w.get("build")) {
        if (!b->is_array())
            r.fail(*b, "'workload.build' is a " + Reader::type(*b),
                   "an array of commands (arrays of strings)");
        for (const auto& cmd : *b->as_array()) {
            if (!cmd.is_array() || cmd.as_array()->empty())
                r.fail(cmd, "a build command is not a non-empty array", "[\"program\", \"arg\", ...]");
            std::vector<std::string> argv;
            for (const auto& a : *cmd.as_array()) {
                if (!a.is_string()) r.fail(a, "a build command argument is a " + Reader::type(a), "a string");
                argv.push_back(a.as_string()->get());
            }
            c.workload.build.push_back(std::move(argv));
        }
    }
    c.workload.command = r.strings(w, "command", "workload");
    if (auto s = r.str(w, "sbatch_script", "workload")) {
        c.workload.sbatch_script = resolve(c.dir, *s);
        if (!fs::is_regular_file(c.workload.sbatch_script))
            throw Error("sbatch_script '" + c.workload.sbatch_script.string() + "' does not exist",
                        r.at_key(w, "sbatch_script"), "an existing batch script (relative to the contract)");
    }
    if (c.workload.command.empty() == c.workload.sbatch_script.empty())
        throw Error("the workload needs exactly one of 'command' and 'sbatch_script'", r.at(w),
                    "command = [\"{build}/prog\", ...] or sbatch_script = \"path\"");
    c.workload.args = r.strings(w, "args", "workload");
    for (const auto& a : c.workload.args)
        if (a.find('\0') != std::string::npos)
            throw Error("an element of 'workload.args' has a NUL byte", r.at_key(w, "args"),
                        "text arguments");
    c.workload.binary = r.str(w, "binary", "workload").value_or("");
    c.workload.binary_env = r.str(w, "binary_env", "workload").value_or("");
    if (!c.workload.binary_env.empty() && !valid_env_name(c.workload.binary_env))
        throw Error("'" + c.workload.binary_env + "' is not an environment variable name",
                    r.at_key(w, "binary_env"), "letters, digits and _");
    if (!c.workload.binary_env.empty() && c.workload.binary.empty())
        throw Error("binary_env is set but binary is not", r.at_key(w, "binary_env"),
                    "binary = \"{build}/prog\"");
    if (const toml::table* env = r.table(w, "env", "workload.env", false)) {
        for (auto&& [k, v] : *env) {
            std::string name(k.str());
            if (!valid_env_name(name))
                throw Error("'" + name + "' is not an environment variable name", r.at(k.source()),
                            "letters, digits and _");
            if (v.is_string())
                c.workload.env[name] = v.as_string()->get();
            else if (v.is_integer())
                c.workload.env[name] = std::to_string(v.as_integer()->get());
            else if (v.is_boolean())
                c.workload.env[name] = v.as_boolean()->get() ? "1" : "0";
            else
                r.fail(v, "workload.env." + name + " is a " + Reader::type(v),
                       "a string, integer or boolean");
        }
    }
    if (auto s = r.str(w, "keep_job_files", "workload")) {
        const auto mode = keep_job_files_names.parse(*s);
        if (!mode)
            throw Error("unknown workload.keep_job_files '" + *s + "'", r.at_key(w, "keep_job_files"),
                        keep_job_files_names.list());
        c.workload.keep_job_files = *mode;
    }
}

} // namespace

long long modeled_memory_limit_bytes(const Resources& r) {
    return r.gpu_mem_bytes > 0 ? r.gpu_mem_bytes : r.mem_bytes;
}

const std::string& modeled_memory_limit_text(const Resources& r) {
    return r.gpu_mem_bytes > 0 ? r.gpu_mem : r.mem;
}

namespace {

void read_resources(const Reader& r, const toml::table& root, Contract& c) {
    const toml::table& t = *r.table(root, "resources", "resources", true);
    r.known_keys(t, "resources",
                 {"partition", "nodes", "ntasks_per_node", "cpus_per_task", "mem", "time_limit",
                  "max_concurrent", "sbatch_args", "peak_flops", "gpu_mem"});
    auto& res = c.resources;
    res.partition = r.str(t, "partition", "resources").value_or("");
    res.nodes = r.count(t, "nodes", "resources", false, 1).value_or(1);
    res.ntasks_per_node = r.count(t, "ntasks_per_node", "resources", false, 1).value_or(1);
    if (auto v = r.count(t, "cpus_per_task", "resources", false, 1)) res.cpus_per_task = *v;
    res.mem = *r.str(t, "mem", "resources", true);
    try {
        res.mem_bytes = parse_memory(res.mem);
    } catch (const Error& e) {
        throw Error(e.problem(), r.at_key(t, "mem"),
                    "a Slurm memory size per node such as \"2000M\" or \"4G\"");
    }
    if (auto g = r.str(t, "gpu_mem", "resources")) {
        res.gpu_mem = *g;
        try {
            res.gpu_mem_bytes = parse_memory(res.gpu_mem);
        } catch (const Error& e) {
            throw Error(e.problem(), r.at_key(t, "gpu_mem"), "the memory of one GPU such as \"80G\"");
        }
    }
    res.time_limit = *r.str(t, "time_limit", "resources", true);
    try {
        res.time_limit_s = parse_time(res.time_limit);
    } catch (const Error& e) {
        throw Error(e.problem(), r.at_key(t, "time_limit"),
                    "a Slurm time such as \"10\" (minutes) or \"00:05:00\"");
    }
    res.max_concurrent = r.count(t, "max_concurrent", "resources", false, 1).value_or(1);
    res.sbatch_args = r.strings(t, "sbatch_args", "resources");
    if (auto p = r.number(t, "peak_flops", "resources")) {
        if (!(*p > 0)) r.fail(*t.get("peak_flops"), "'resources.peak_flops' is not positive", "FLOP/s > 0");
        res.peak_flops = *p;
    }
}

space::Value read_value(const Reader& r, const toml::node& n, const space::Knob& k, const std::string& what) {
    switch (k.kind) {
    case space::KnobKind::Integer:
    case space::KnobKind::Pow2:
        if (!n.is_integer()) r.fail(n, what + " is a " + Reader::type(n), "an integer");
        return n.as_integer()->get();
    case space::KnobKind::Choice:
        if (!n.is_string()) r.fail(n, what + " is a " + Reader::type(n), "a string (one of the choices)");
        return n.as_string()->get();
    case space::KnobKind::Bool:
        if (!n.is_boolean()) r.fail(n, what + " is a " + Reader::type(n), "true or false");
        return n.as_boolean()->get();
    }
    return 0LL;
}

// The sbatch options the orchestrator sets itself (the array, its output, the memory and time limits the
// campaign measures against, the node count its costs are counted in) or that would change what a trial
// is; a knob may not tune them.
bool orchestrator_owned_option(const std::string& option) {
    static const std::set<std::string> owned{"--array",       "--output",
                                             "--error",       "--job-name",
                                             "--mem",         "--mem-per-cpu",
                                             "--mem-per-gpu", "--time",
                                             "--time-min",    "--nodes",
                                             "--partition",   "--hold",
                                             "--parsable",    "--chdir",
                                             "--export",      "--export-file",
                                             "--wrap",        "--dependency",
                                             "--requeue",     "--no-requeue",
                                             "--infrarsi",    "--test-only",
                                             "--wait",        "--input",
                                             "--open-mode",   "--kill-on-invalid-dep",
                                             "--begin",       "--deadline",
                                             "--signal"};
    return owned.count(option) > 0;
}

bool valid_long_option(const std::string& s) {
    if (s.size() < 3 || s.rfind("--", 0) != 0 || !std::islower(static_cast<unsigned char>(s[2])))
        return false;
    return std::all_of(s.begin() + 2, s.end(), [](char ch) {
        return std::islower(static_cast<unsigned char>(ch)) || std::isdigit(static_cast<unsigned char>(ch)) ||
               ch == '-';
    });
}

// Exactly one of env, arg and sbatch_option says how the value reaches the job.
void read_delivery(const Reader& r, const toml::table& t, const std::string& path, space::Knob& k,
                   std::set<std::string>& deliveries) {
    const auto env = r.str(t, "env", path);
    // arg: one argv element ("--batch_size={}") or several (["-b", "{}"]).
    std::optional<std::vector<std::string>> arg;
    if (const toml::node* n = t.get("arg"); n && n->is_array())
        arg = r.strings(t, "arg", path);
    else if (auto one = r.str(t, "arg", path))
        arg = std::vector<std::string>{*one};
    const auto option = r.str(t, "sbatch_option", path);
    if (int(env.has_value()) + int(arg.has_value()) + int(option.has_value()) != 1)
        throw Error("knob '" + k.name + "' needs exactly one of 'env', 'arg' and 'sbatch_option'", r.at(t),
                    "env = \"NAME\", arg = \"--flag={}\" or sbatch_option = \"--cpus-per-task\"");
    if (env) {
        k.delivery = space::Delivery::Env;
        k.env = *env;
        if (!valid_env_name(k.env))
            throw Error("'" + k.env + "' is not an environment variable name", r.at_key(t, "env"),
                        "letters, digits and _");
        if (!deliveries.insert("env " + k.env).second)
            throw Error("environment variable " + k.env + " is set by two knobs", r.at_key(t, "env"),
                        "one knob per variable");
    } else if (arg) {
        k.delivery = space::Delivery::Arg;
        k.arg = *arg;
        const std::string shown = fmt::format("{}", fmt::join(k.arg, " "));
        const bool hole = std::any_of(k.arg.begin(), k.arg.end(),
                                      [](const std::string& a) { return a.find("{}") != std::string::npos; });
        if (k.arg.empty() || std::any_of(k.arg.begin(), k.arg.end(), [](const std::string& a) {
                return a.empty() || a.find('\0') != std::string::npos;
            }))
            throw Error("knob '" + k.name + "' has an empty argument template", r.at_key(t, "arg"),
                        "one argument, with {} where the value goes: \"--batch_size={}\" (or [\"-b\", "
                        "\"{}\"])");
        if (!hole && k.kind != space::KnobKind::Bool)
            throw Error("the argument template '" + shown + "' of knob '" + k.name + "' has no {}",
                        r.at_key(t, "arg"),
                        "{} where the value goes (\"--batch_size={}\"); only a bool knob may be a bare flag");
    } else {
        k.delivery = space::Delivery::SbatchOption;
        k.sbatch_option = *option;
        if (!valid_long_option(k.sbatch_option))
            throw Error("'" + k.sbatch_option + "' is not a long sbatch option", r.at_key(t, "sbatch_option"),
                        "the option's long name without a value, such as \"--ntasks-per-node\"");
        if (orchestrator_owned_option(k.sbatch_option))
            throw Error("sbatch option " + k.sbatch_option + " cannot be a knob: the campaign sets it",
                        r.at_key(t, "sbatch_option"),
                        "an option of the trial's resources or placement, such as --ntasks-per-node, "
                        "--cpus-per-task or --gpus-per-node (the memory and time limits are [resources])");
        if (!deliveries.insert("option " + k.sbatch_option).second)
            throw Error("sbatch option " + k.sbatch_option + " is set by two knobs",
                        r.at_key(t, "sbatch_option"), "one knob per option");
    }
}

void read_knobs(const Reader& r, const toml::table& root, Contract& c) {
    const toml::table* knobs = r.table(root, "knobs", "knobs", false);
    if (!knobs) return;
    std::set<std::string> deliveries; // each variable and each sbatch option carries one knob
    // TOML++ iterates a table by key; the knobs keep the order they are written in (their arguments and
    // options are given in that order).
    std::vector<std::pair<std::uint32_t, space::Knob>> declared;
    for (auto&& [key, node] : *knobs) {
        if (key.str() == "include") {
            c.knob_presets = r.strings(*knobs, "include", "knobs");
            continue;
        }
        space::Knob k;
        k.name = std::string(key.str());
        const std::string path = "knobs." + k.name;
        if (!node.is_table())
            r.fail(node, "'" + path + "' is a " + Reader::type(node), "a table with kind = ...");
        const toml::table& t = *node.as_table();
        r.known_keys(t, path,
                     {"kind", "min", "max", "step", "values", "env", "arg", "sbatch_option", "baseline",
                      "description", "unset"});
        std::string kind = *r.str(t, "kind", path, true);
        if (const auto parsed = space::knob_kind_names.parse(kind))
            k.kind = *parsed;
        else
            throw Error("unknown knob kind '" + kind + "'", r.at_key(t, "kind"),
                        "integer, pow2, choice or bool");
        if (k.kind == space::KnobKind::Integer || k.kind == space::KnobKind::Pow2) {
            k.min = *r.integer(t, "min", path, true, k.kind == space::KnobKind::Pow2 ? 1 : LLONG_MIN);
            k.max = *r.integer(t, "max", path, true);
            k.step = r.integer(t, "step", path, false, 1).value_or(1);
            if (k.max < k.min)
                throw Error(fmt::format("max {} is below min {}", k.max, k.min), r.at_key(t, "max"),
                            "max >= min");
            if (k.kind == space::KnobKind::Pow2 && k.size() == 0)
                throw Error(fmt::format("no power of two lies in [{}, {}]", k.min, k.max), r.at(t),
                            "a range holding a power of two");
        }
        if (k.kind == space::KnobKind::Choice) {
            k.choices = r.strings(t, "values", path);
            if (k.choices.size() < 1)
                throw Error("choice knob '" + k.name + "' has no values", r.at(t),
                            "values = [\"a\", \"b\", ...]");
        }
        read_delivery(r, t, path, k, deliveries);
        const toml::node* b = t.get("baseline");
        if (!b)
            throw Error("knob '" + k.name + "' has no baseline", r.at(t),
                        "baseline = the value the job uses today");
        k.baseline = read_value(r, *b, k, "'" + path + ".baseline'");
        if (!k.allows(k.baseline))
            r.fail(*b,
                   "baseline " + space::to_string(k.baseline) + " of knob '" + k.name +
                       "' is outside its domain",
                   "a value in the knob's range (powers of two for pow2, one of values for choice)");
        if (auto unset = r.str(t, "unset", path)) {
            if (k.kind != space::KnobKind::Choice || k.delivery != space::Delivery::Env ||
                std::find(k.choices.begin(), k.choices.end(), *unset) == k.choices.end())
                throw Error("'" + path + ".unset' is '" + *unset + "'", r.at_key(t, "unset"),
                            "one of the values of a choice knob delivered by env: the value that leaves the "
                            "variable unset");
            k.unset_choice = *unset;
        }
        declared.emplace_back(key.source().begin.line, std::move(k));
    }
    std::stable_sort(declared.begin(), declared.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [line, k] : declared)
        c.space.knobs.push_back(std::move(k));
    // Presets after the declared knobs; a declared knob of the same name or variable replaces the preset's.
    std::set<std::string> included;
    for (const auto& name : c.knob_presets) {
        const auto preset = space::preset_knobs(name);
        if (!preset)
            throw Error("unknown knob preset '" + name + "'", r.at_key(*knobs, "include"),
                        space::preset_names());
        for (const auto& k : *preset) {
            if (c.space.knob(k.name) || deliveries.count("env " + k.env) || !included.insert(k.name).second)
                continue;
            if (c.workload.env.count(k.env))
                throw Error("preset '" + name + "' tunes " + k.env + ", which [workload.env] fixes",
                            r.at_key(*knobs, "include"),
                            "the variable in one place: a knob [knobs." + k.name +
                                "] with the fixed value "
                                "as its baseline, or no preset");
            deliveries.insert("env " + k.env);
            c.space.knobs.push_back(k);
        }
    }
    // A knob's option given again in [resources].sbatch_args would leave sbatch to pick one of the two.
    for (const auto& k : c.space.knobs) {
        if (k.delivery != space::Delivery::SbatchOption) continue;
        for (const auto& a : c.resources.sbatch_args)
            if (a == k.sbatch_option || a.rfind(k.sbatch_option + "=", 0) == 0)
                throw Error("sbatch option " + k.sbatch_option + " is both the knob '" + k.name +
                                "' and in resources.sbatch_args",
                            r.at(*knobs), "the option in one place: the knob");
    }
}

void read_constants_and_constraints(const Reader& r, const toml::table& root, Contract& c) {
    if (const toml::table* consts = r.table(root, "constants", "constants", false)) {
        for (auto&& [key, node] : *consts) {
            std::string name(key.str());
            if (!node.is_integer())
                r.fail(node, "constant '" + name + "' is a " + Reader::type(node), "an integer");
            if (c.space.knob(name))
                throw Error("'" + name + "' is both a knob and a constant", r.at(key.source()),
                            "distinct names");
            c.space.constants[name] = node.as_integer()->get();
        }
    }
    const toml::node* cons = root.get("constraints");
    if (!cons) return;
    if (!cons->is_array_of_tables())
        r.fail(*cons, "'constraints' is not an array of tables",
               "[[constraints]] product = [...] equals = ...");
    for (const auto& node : *cons->as_array()) {
        const toml::table& t = *node.as_table();
        r.known_keys(t, "constraints", {"product", "equals", "at_most"});
        space::Constraint con;
        con.factors = r.strings(t, "product", "constraints");
        if (con.factors.empty())
            throw Error("a constraint has no product", r.at(t), "product = [\"a\", \"b\"]");
        auto numeric_name = [&](const std::string& n) {
            const space::Knob* k = c.space.knob(n);
            return (k && k->kind != space::KnobKind::Choice) || c.space.constants.count(n);
        };
        for (const auto& f : con.factors)
            if (!numeric_name(f))
                throw Error("constraint names '" + f + "', which is no numeric knob or constant",
                            r.at_key(t, "product"),
                            "names from [knobs] (integer, pow2, bool) or [constants]");
        const toml::node* rhs = t.get("equals");
        con.kind = space::Constraint::Kind::ProductEquals;
        if (!rhs) {
            rhs = t.get("at_most");
            con.kind = space::Constraint::Kind::ProductAtMost;
        }
        if (!rhs || (t.get("equals") && t.get("at_most")))
            throw Error("a constraint needs exactly one of 'equals' and 'at_most'", r.at(t),
                        "equals = N or at_most = N");
        if (rhs->is_integer())
            con.rhs_value = rhs->as_integer()->get();
        else if (rhs->is_string()) {
            con.rhs_name = rhs->as_string()->get();
            if (!numeric_name(con.rhs_name))
                r.fail(*rhs, "constraint names '" + con.rhs_name + "', which is no numeric knob or constant",
                       "a name from [knobs] or [constants], or an integer");
        } else
            r.fail(*rhs, "a constraint's right side is a " + Reader::type(*rhs), "an integer or a name");
        std::string lhs;
        for (const auto& f : con.factors)
            lhs += (lhs.empty() ? "" : " * ") + f;
        con.text = lhs + (con.kind == space::Constraint::Kind::ProductEquals ? " == " : " <= ") +
                   (con.rhs_name.empty() ? std::to_string(con.rhs_value) : con.rhs_name);
        c.space.constraints.push_back(std::move(con));
    }
    if (auto v = c.space.violation(c.space.baseline().knobs); !v.empty())
        throw Error("the baseline settings violate the constraint " + v, r.at(*cons),
                    "constraints the baseline satisfies");
}

void read_patches(const Reader& r, const toml::table& root, Contract& c) {
    const toml::table* t = r.table(root, "patches", "patches", false);
    if (!t) return;
    r.known_keys(*t, "patches", {"catalog", "candidates", "editable", "protected"});
    if (auto cat = r.str(*t, "catalog", "patches")) {
        c.patch_catalog = resolve(c.dir, *cat);
        if (!fs::is_regular_file(c.patch_catalog))
            throw Error("patch catalog '" + c.patch_catalog.string() + "' does not exist",
                        r.at_key(*t, "catalog"), "a catalog.toml (relative to the contract)");
    }
    c.patch_candidates = r.strings(*t, "candidates", "patches");
    c.editable = r.strings(*t, "editable", "patches");
    c.protected_files = r.strings(*t, "protected", "patches");
    for (const auto& p : c.protected_files)
        if (!fs::is_regular_file(c.workload.source / p))
            throw Error("protected file '" + p + "' does not exist in the workload source",
                        r.at_key(*t, "protected"), "paths relative to " + c.workload.source.string());
    if (!c.patch_catalog.empty() && c.editable.empty())
        throw Error("patches are given but no editable scope", r.at(*t),
                    "editable = [\"src/kernels/*\", ...]");
}

// [agent]: command (argv), name, goal, calls, call_time_limit (a Slurm time), max_patches_per_call,
// token_budget. An agent writes patches, so the contract must say where they may go ([patches] editable).
void read_agent(const Reader& r, const toml::table& root, Contract& c) {
    const toml::table* t = r.table(root, "agent", "agent", false);
    if (!t) return;
    r.known_keys(
        *t, "agent",
        {"command", "name", "goal", "calls", "call_time_limit", "max_patches_per_call", "token_budget"});
    auto& a = c.agent;
    // Without a command the section keeps the user's goal for a later agent (a draft's) and calls nothing.
    a.command = substitute(r.strings(*t, "command", "agent"), {{"contract_dir", c.dir.string()}});
    if (!a.command.empty() && a.command[0].empty())
        throw Error("[agent] command's program is empty", r.at_key(*t, "command"),
                    "command = [\"path/to/agent\", \"--flag\"]");
    a.name = r.str(*t, "name", "agent")
                 .value_or(a.command.empty() ? "agent" : fs::path(a.command[0]).filename().string());
    if (a.name.empty() || a.name.size() > 64 || !std::all_of(a.name.begin(), a.name.end(), [](char ch) {
            return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.';
        }))
        throw Error("'agent.name' is '" + a.name + "'", r.at_key(*t, "name"),
                    "up to 64 letters, digits, '-', '_' or '.'");
    a.goal = r.str(*t, "goal", "agent").value_or("");
    if (a.goal.size() > 4096)
        throw Error("'agent.goal' is longer than 4096 bytes", r.at_key(*t, "goal"), "a short request");
    a.calls = r.count(*t, "calls", "agent", false, 1).value_or(4);
    if (a.calls > 1000)
        throw Error(fmt::format("'agent.calls' is {}", a.calls), r.at_key(*t, "calls"), "at most 1000");
    if (auto s = r.str(*t, "call_time_limit", "agent")) {
        try {
            a.call_time_limit_s = parse_time(*s);
        } catch (const Error& e) {
            throw Error("'agent.call_time_limit': " + e.problem(), r.at_key(*t, "call_time_limit"),
                        "a Slurm time (\"10:00\", \"1:00:00\")");
        }
    }
    a.max_patches_per_call = r.count(*t, "max_patches_per_call", "agent", false, 1).value_or(4);
    if (a.max_patches_per_call > 100)
        throw Error(fmt::format("'agent.max_patches_per_call' is {}", a.max_patches_per_call),
                    r.at_key(*t, "max_patches_per_call"), "at most 100");
    a.token_budget = r.integer(*t, "token_budget", "agent", false, 0).value_or(0);
    if (a.enabled() && c.editable.empty())
        throw Error("an agent is given but no editable scope", r.at(*t),
                    "[patches] editable = [\"src/*\", ...]: the paths its patches may touch");
}

// [metrics]: format = "nanogpt" | "megatron" | "hf-trainer" | "torchtitan" | "key-value" | "regex" |
// "infrarsi"; pattern, step_time_unit and memory_unit for "regex"; rank = N for one rank's lines.
void read_metrics(const Reader& r, const toml::table& root, Contract& c) {
    auto& m = c.metrics;
    m.step_prefix = c.invariants.step_prefix;
    m.summary_prefix = c.invariants.summary_prefix;
    const toml::table* t = r.table(root, "metrics", "metrics", false);
    if (!t) return;
    r.known_keys(
        *t, "metrics",
        {"format", "pattern", "step_time_unit", "memory_unit", "rank", "exclude_steps", "exclude_pattern"});
    const std::string name = r.str(*t, "format", "metrics").value_or("infrarsi");
    const auto kind = measure::log_format_names.parse(name);
    if (!kind)
        throw Error("unknown log format '" + name + "'", r.at_key(*t, "format"),
                    measure::log_format_names.list());
    m.kind = *kind;
    m.pattern = r.str(*t, "pattern", "metrics").value_or("");
    if (!m.pattern.empty() && m.kind != measure::LogFormatKind::Regex)
        throw Error("a pattern is only read with format = \"regex\"", r.at_key(*t, "pattern"),
                    "format = \"regex\" or no pattern");
    if (auto u = r.str(*t, "step_time_unit", "metrics")) {
        const auto s = measure::seconds_per_unit(*u);
        if (!s) throw Error("unknown time unit '" + *u + "'", r.at_key(*t, "step_time_unit"), "s, ms or us");
        m.step_time_unit_s = *s;
    }
    if (auto u = r.str(*t, "memory_unit", "metrics")) {
        const auto b = measure::bytes_per_unit(*u);
        if (!b)
            throw Error("unknown memory unit '" + *u + "'", r.at_key(*t, "memory_unit"),
                        "B, KiB, MiB, GiB, TiB");
        m.memory_unit_bytes = *b;
    }
    if (auto rank = r.count(*t, "rank", "metrics", false, 0)) m.rank = *rank;
    if (const toml::node* ex = t->get("exclude_steps")) {
        if (!ex->is_array())
            r.fail(*ex, "'metrics.exclude_steps' is a " + Reader::type(*ex), "an array of step numbers");
        for (const auto& e : *ex->as_array()) {
            if (!e.is_integer() || e.as_integer()->get() < 0 || e.as_integer()->get() > INT_MAX)
                r.fail(e, "an element of 'metrics.exclude_steps' is not a step number", "integers >= 0");
            m.exclude_steps.push_back(static_cast<int>(e.as_integer()->get()));
        }
    }
    m.exclude_pattern = r.str(*t, "exclude_pattern", "metrics").value_or("");
    measure::check(m, r.at(*t));
}

void read_invariants(const Reader& r, const toml::table& root, Contract& c) {
    const toml::table& t = *r.table(root, "invariants", "invariants", true);
    r.known_keys(t, "invariants",
                 {"steps", "steps_env", "seed", "seed_env", "seed_arg", "warmup_steps", "step_prefix",
                  "summary_prefix", "loss_tolerance", "loss_mode", "loss_last_k", "equivalence_tolerance"});
    auto& inv = c.invariants;
    inv.steps = *r.count(t, "steps", "invariants", true, 1);
    inv.steps_env = r.str(t, "steps_env", "invariants").value_or("");
    inv.seed = r.integer(t, "seed", "invariants").value_or(0);
    inv.seed_env = r.str(t, "seed_env", "invariants").value_or("");
    inv.warmup_steps = r.count(t, "warmup_steps", "invariants", false, 0).value_or(0);
    if (inv.warmup_steps >= inv.steps)
        throw Error(
            fmt::format("warmup_steps {} leaves no steady-state step of {}", inv.warmup_steps, inv.steps),
            r.at_key(t, "warmup_steps"), "warmup_steps < steps (at least 3 measured steps are advisable)");
    inv.step_prefix = r.str(t, "step_prefix", "invariants").value_or(inv.step_prefix);
    inv.summary_prefix = r.str(t, "summary_prefix", "invariants").value_or(inv.summary_prefix);
    std::string mode = r.str(t, "loss_mode", "invariants").value_or("last_k_mean");
    if (mode == "per_step")
        inv.loss_mode = LossMode::PerStep;
    else if (mode == "last_k_mean")
        inv.loss_mode = LossMode::LastKMean;
    else if (mode == "final_eval")
        inv.loss_mode = LossMode::FinalEval;
    else
        throw Error("unknown loss_mode '" + mode + "'", r.at_key(t, "loss_mode"),
                    "per_step, last_k_mean or final_eval");
    // final_eval calibrates its tolerance from the seeds; loss_tolerance is only its floor there.
    inv.loss_tolerance = r.number(t, "loss_tolerance", "invariants")
                             .value_or(inv.loss_mode == LossMode::FinalEval ? 0.001 : inv.loss_tolerance);
    if (!(inv.loss_tolerance > 0 && inv.loss_tolerance < 1))
        throw Error(fmt::format("loss_tolerance {} is out of range", inv.loss_tolerance),
                    r.at_key(t, "loss_tolerance"), "a relative tolerance in (0, 1), such as 0.02");
    // Patches apart from knobs: the same math, so the same losses step by step at a fresh seed. The default
    // leaves float32 reordering room: minigpt's real patches moved its losses by up to 5.6e-7 in 8 steps.
    constexpr double kDefaultEquivalenceTolerance = 1e-5;
    inv.equivalence_tolerance =
        r.number(t, "equivalence_tolerance", "invariants").value_or(kDefaultEquivalenceTolerance);
    if (!(inv.equivalence_tolerance >= 0 && inv.equivalence_tolerance < 1))
        throw Error(
            fmt::format("equivalence_tolerance {} is out of range", inv.equivalence_tolerance),
            r.at_key(t, "equivalence_tolerance"),
            "a relative tolerance in [0, 1): 1e-5 for deterministic CPU runs, about 1e-3 for GPU kernels "
            "that are not bitwise deterministic");
    inv.seed_arg = r.str(t, "seed_arg", "invariants").value_or("");
    if (!inv.seed_arg.empty() && inv.seed_arg.find("{}") == std::string::npos)
        throw Error("seed_arg '" + inv.seed_arg + "' has no {}", r.at_key(t, "seed_arg"),
                    "an argument with {} where the seed goes: \"--seed={}\"");
    if (inv.loss_mode == LossMode::FinalEval && inv.seed_env.empty() && inv.seed_arg.empty())
        throw Error(
            "loss_mode final_eval calibrates its tolerance from baseline runs at different seeds, and "
            "the job is told no seed",
            r.at_key(t, "loss_mode"), "seed_env = \"NAME\" or seed_arg = \"--seed={}\"");
    inv.loss_last_k = r.count(t, "loss_last_k", "invariants", false, 1).value_or(5);
    if (inv.loss_last_k > inv.steps)
        throw Error("loss_last_k exceeds steps", r.at_key(t, "loss_last_k"), "loss_last_k <= steps");
    for (const auto& [name, v] : {std::pair{inv.steps_env, 0}, std::pair{inv.seed_env, 0}}) {
        (void)v;
        if (!name.empty() && !valid_env_name(name))
            throw Error("'" + name + "' is not an environment variable name", r.at(t),
                        "letters, digits and _");
    }
}

void read_budget(const Reader& r, const toml::table& root, Contract& c) {
    const toml::table& t = *r.table(root, "budget", "budget", true);
    r.known_keys(t, "budget", {"trials", "node_hours", "wall_time", "batch_size"});
    c.budget.trials = *r.count(t, "trials", "budget", true, 1);
    c.budget.node_hours = r.number(t, "node_hours", "budget").value_or(0);
    if (auto w = r.str(t, "wall_time", "budget")) {
        try {
            c.budget.wall_time_s = static_cast<double>(parse_time(*w));
        } catch (const Error& e) {
            throw Error(e.problem(), r.at_key(t, "wall_time"), "a time such as \"00:15:00\"");
        }
    }
    c.budget.batch_size = r.count(t, "batch_size", "budget", false, 1).value_or(4);
}

void read_repeats(const Reader& r, const toml::table& root, Contract& c) {
    const toml::table* t = r.table(root, "repeats", "repeats", false);
    if (!t) return;
    r.known_keys(*t, "repeats", {"doctor", "verify", "verify_top"});
    c.repeats.doctor = r.count(*t, "doctor", "repeats", false, 2).value_or(5);
    c.repeats.verify = r.count(*t, "verify", "repeats", false, 2).value_or(3);
    c.repeats.verify_top = r.count(*t, "verify_top", "repeats", false, 0).value_or(2);
}

// [verify]: the promotion rule's threshold, error and cap (verify/sequential.hpp).
void read_verify(const Reader& r, const toml::table& root, Contract& c) {
    const toml::table* t = r.table(root, "verify", "verify", false);
    if (!t) return;
    r.known_keys(*t, "verify", {"min_speedup", "alpha", "max_pairs"});
    if (auto m = r.number(*t, "min_speedup", "verify")) {
        if (!(*m >= 0 && *m < 1))
            throw Error(fmt::format("'verify.min_speedup' is {}", *m), r.at_key(*t, "min_speedup"),
                        "a relative gain in [0, 1), e.g. 0.03 for 3%");
        c.verify.min_speedup = *m;
    }
    if (auto a = r.number(*t, "alpha", "verify")) {
        if (!(*a > 0 && *a <= 0.2))
            throw Error(fmt::format("'verify.alpha' is {}", *a), r.at_key(*t, "alpha"),
                        "a one-sided error in (0, 0.2], e.g. 0.01");
        c.verify.alpha = *a;
    }
    if (auto n = r.count(*t, "max_pairs", "verify", false, 4)) {
        if (*n % 2 != 0 || *n > 1000)
            throw Error(fmt::format("'verify.max_pairs' is {}", *n), r.at_key(*t, "max_pairs"),
                        "an even number of pairs from 4 to 1000 (blocks of two, one in each order)");
        c.verify.max_pairs = *n;
    }
}

// [memory]: the prior of the memory model: a command that prints an estimate, or a transformer's dimensions.
void read_memory(const Reader& r, const toml::table& root, Contract& c) {
    const toml::table* m = r.table(root, "memory", "memory", false);
    if (!m) return;
    r.known_keys(*m, "memory", {"estimate_command", "transformer"});
    c.memory_estimate = r.strings(*m, "estimate_command", "memory");
    const toml::table* t = r.table(*m, "transformer", "memory.transformer", false);
    if (!t) return;
    const std::string path = "memory.transformer";
    if (!c.memory_estimate.empty())
        throw Error("both [memory] estimate_command and [memory.transformer]", r.at(*t),
                    "one memory prior: the command, or the model's dimensions");
    r.known_keys(*t, path,
                 {"parameters", "layers", "hidden", "heads", "seq_len", "vocab", "activation_bytes",
                  "parameter_bytes", "optimizer_bytes", "runtime", "zero_stage", "micro_batch",
                  "ranks_knob"});
    TransformerMemoryPrior p;
    auto dim = [&](const char* key, bool required) {
        const auto v = r.integer(*t, key, path, required, 1);
        if (v && *v > (1LL << 24))
            throw Error(fmt::format("'{}.{}' is {}", path, key, *v), r.at_key(*t, key), "at most 2^24");
        return static_cast<int>(v.value_or(0));
    };
    p.layers = dim("layers", true);
    p.hidden = dim("hidden", true);
    p.heads = dim("heads", true);
    p.seq_len = dim("seq_len", true);
    p.vocab = dim("vocab", true);
    if (auto v = r.number(*t, "parameters", path)) {
        if (!(*v > 0 && *v < 1e15))
            throw Error(fmt::format("'{}.parameters' is {}", path, *v), r.at_key(*t, "parameters"),
                        "a positive count below 1e15");
        p.parameters = *v;
    }
    auto bytes = [&](const char* key, int fallback, std::initializer_list<int> allowed) {
        const auto v = r.integer(*t, key, path, false, 0);
        if (!v) return fallback;
        if (std::find(allowed.begin(), allowed.end(), *v) == allowed.end())
            throw Error(fmt::format("'{}.{}' is {}", path, key, *v), r.at_key(*t, key),
                        "bytes per value: 1, 2, 4 (8, 12 or 16 for optimizer_bytes)");
        return static_cast<int>(*v);
    };
    p.activation_bytes = bytes("activation_bytes", 2, {1, 2, 4});
    p.parameter_bytes = bytes("parameter_bytes", 2, {1, 2, 4});
    p.optimizer_bytes = bytes("optimizer_bytes", 12, {0, 4, 8, 12, 16});
    if (auto rt = r.str(*t, "runtime", path)) p.runtime_bytes = parse_memory(*rt);
    if (auto z = r.integer(*t, "zero_stage", path, false, 0)) {
        if (*z > 3)
            throw Error(fmt::format("'{}.zero_stage' is {}", path, *z), r.at_key(*t, "zero_stage"), "0 to 3");
        p.zero_stage = static_cast<int>(*z);
    }
    p.micro_batch = dim("micro_batch", false);
    if (p.micro_batch == 0) p.micro_batch = 1;
    if (auto k = r.str(*t, "ranks_knob", path)) {
        const auto* knob = c.space.knob(*k);
        if (!knob || (knob->kind != space::KnobKind::Integer && knob->kind != space::KnobKind::Pow2))
            throw Error(fmt::format("'{}.ranks_knob' names '{}'", path, *k), r.at_key(*t, "ranks_knob"),
                        "the name of an integer or pow2 knob");
        p.ranks_knob = *k;
    }
    c.memory_transformer = p;
}

void read_nccl(const Reader& r, const toml::table& root, Contract& c) {
    if (const toml::table* t = r.table(root, "nccl", "nccl", false)) {
        r.known_keys(*t, "nccl", {"used", "fallback"});
        c.nccl.used = r.boolean(*t, "used", "nccl").value_or(false);
        const std::string fallback = r.str(*t, "fallback", "nccl").value_or("stop");
        if (fallback != "stop" && fallback != "warn")
            throw Error("unknown nccl.fallback '" + fallback + "'", r.at_key(*t, "fallback"),
                        "stop (the doctor ends the campaign) or warn (it logs and goes on)");
        c.nccl.stop_on_fallback = fallback == "stop";
    }
}

} // namespace

bool uses_nccl(const Contract& c) {
    if (c.nccl.used) return true;
    for (const auto& k : c.space.knobs)
        if (k.delivery == space::Delivery::Env && k.env.rfind("NCCL_", 0) == 0) return true;
    return false;
}

long long parse_memory(const std::string& text) {
    std::size_t i = 0;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])))
        ++i;
    if (i == 0)
        throw Error("memory size '" + text + "' has no number", "", "digits with an optional K, M, G or T");
    std::string unit = text.substr(i);
    long long mult = 1LL << 20;
    if (unit == "K" || unit == "k")
        mult = 1LL << 10;
    else if (unit.empty() || unit == "M" || unit == "m")
        mult = 1LL << 20;
    else if (unit == "G" || unit == "g")
        mult = 1LL << 30;
    else if (unit == "T" || unit == "t")
        mult = 1LL << 40;
    else
        throw Error("memory size '" + text + "' has an unknown unit", "", "K, M, G or T");
    // In range before multiplying: "10000000000T" must not wrap into a small size.
    auto n = parse_integer<long long>(std::string_view(text).substr(0, i), 0, LLONG_MAX / mult);
    if (!n) throw Error("memory size '" + text + "' is too large", "", "at most 8 EiB");
    if (*n <= 0) throw Error("memory size '" + text + "' is not positive", "", "a positive size");
    return *n * mult;
}

long long parse_time(const std::string& text) {
    const char* forms = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS";
    // Each field at most 10^8 (190 years in minutes): the sum cannot overflow.
    auto num = [&](const std::string& s) {
        if (s.empty() || !std::all_of(s.begin(), s.end(),
                                      [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); }))
            throw Error("time '" + text + "' is malformed", "", forms);
        auto v = parse_integer<long long>(s, 0, 100'000'000);
        if (!v) throw Error("time '" + text + "' has a field out of range", "", "fields of at most 10^8");
        return *v;
    };
    std::vector<std::string> parts;
    const auto dash = text.find('-');
    const std::string rest = dash == std::string::npos ? text : text.substr(dash + 1);
    std::size_t start = 0;
    while (true) {
        auto colon = rest.find(':', start);
        parts.push_back(rest.substr(start, colon - start));
        if (colon == std::string::npos) break;
        start = colon + 1;
    }
    if (parts.size() > 3) throw Error("time '" + text + "' is malformed", "", forms);
    long long s = 0;
    if (dash != std::string::npos) {
        // As Slurm reads it: a day count makes the next field hours, even when the count is 0 ("0-12" is
        // twelve hours). D-HH, D-HH:MM, D-HH:MM:SS.
        s = num(text.substr(0, dash)) * 86400 + num(parts[0]) * 3600;
        if (parts.size() > 1) s += num(parts[1]) * 60;
        if (parts.size() > 2) s += num(parts[2]);
    } else if (parts.size() == 1) {
        s = num(parts[0]) * 60;
    } else if (parts.size() == 2) {
        s = num(parts[0]) * 60 + num(parts[1]);
    } else {
        s = num(parts[0]) * 3600 + num(parts[1]) * 60 + num(parts[2]);
    }
    if (s <= 0) throw Error("time '" + text + "' is zero", "", "a positive time");
    return s;
}

std::vector<std::string> substitute(const std::vector<std::string>& argv,
                                    const std::map<std::string, std::string>& vars) {
    std::vector<std::string> out;
    for (std::string a : argv) {
        for (const auto& [k, v] : vars) {
            const std::string token = "{" + k + "}";
            for (std::size_t pos = a.find(token); pos != std::string::npos;
                 pos = a.find(token, pos + v.size()))
                a.replace(pos, token.size(), v);
        }
        out.push_back(std::move(a));
    }
    return out;
}

namespace {
// Every value a draft left to fill in ("FILL-IN", contract/draft.hpp), alone or inside a string (an sbatch
// option's value), with its line and key: all of them at once, not one per `init`. The tree's depth is
// bounded by check_toml_limits before it is parsed.
void collect_placeholders(const toml::node& n, const std::string& path, std::vector<std::string>& out) {
    if (const auto* t = n.as_table()) {
        for (const auto& [k, v] : *t)
            collect_placeholders(v, path.empty() ? std::string(k.str()) : path + "." + std::string(k.str()),
                                 out);
    } else if (const auto* a = n.as_array()) {
        for (const auto& e : *a)
            collect_placeholders(e, path, out);
    } else if (const auto* str = n.as_string()) {
        if (str->get().find(draft_placeholder) != std::string::npos)
            out.push_back(fmt::format("line {} ({})", n.source().begin.line, path));
    }
}
} // namespace

Contract load(const fs::path& file) {
    std::error_code ec;
    if (!fs::is_regular_file(fs::absolute(file, ec)))
        throw Error("contract file does not exist", file.string(), "a TOML contract file");
    return load_text(read_regular_file(fs::absolute(file, ec).string(), {.max_bytes = kMaxContractBytes}),
                     file);
}

Contract load_text(const std::string& text, const fs::path& file) {
    Contract c;
    std::error_code ec;
    c.file = fs::absolute(file, ec).lexically_normal();
    c.dir = c.file.parent_path();
    Reader r(c.file.string());
    toml::table root;
    check_toml_limits(text, c.file.string(), {.max_bytes = kMaxContractBytes});
    try {
        root = toml::parse(text, c.file.string());
    } catch (const toml::parse_error& e) {
        throw Error(std::string("TOML syntax error: ") + std::string(e.description()), r.at(e.source()),
                    "valid TOML (https://toml.io)");
    }
    std::vector<std::string> to_fill;
    collect_placeholders(root, "", to_fill);
    if (!to_fill.empty()) {
        throw Error(fmt::format("{} value(s) still to fill in: {}", to_fill.size(), fmt::join(to_fill, ", ")),
                    c.file.string(),
                    fmt::format("the values the draft marked \"{}\" (its CHECK comments say what each is)",
                                draft_placeholder));
    }
    // Every section's first error at once, not one a run: a section that others read (the knobs for the
    // constraints and the memory model, the workload for the patches) is not read past when it failed.
    std::vector<Error> errors;
    auto section = [&](auto&& read) {
        try {
            read();
            return true;
        } catch (const Error& e) {
            errors.push_back(e);
            return false;
        }
    };
    section([&] {
        r.known_keys(root, "(top level)",
                     {"name", "workload", "resources", "knobs", "constants", "constraints", "patches",
                      "invariants", "metrics", "budget", "repeats", "verify", "memory", "nccl", "agent"});
        c.name = r.str(root, "name", "(top level)").value_or(c.file.stem().string());
    });
    const bool workload = section([&] { read_workload(r, root, c); });
    section([&] { read_resources(r, root, c); });
    const bool knobs = section([&] { read_knobs(r, root, c); });
    if (knobs) section([&] { read_constants_and_constraints(r, root, c); });
    if (workload) section([&] { read_patches(r, root, c); });
    section([&] { read_invariants(r, root, c); });
    section([&] { read_metrics(r, root, c); });
    section([&] { read_budget(r, root, c); });
    section([&] { read_repeats(r, root, c); });
    section([&] { read_verify(r, root, c); });
    if (knobs) section([&] { read_memory(r, root, c); });
    section([&] { read_nccl(r, root, c); });
    section([&] { read_agent(r, root, c); });
    if (errors.size() == 1) throw errors.front();
    if (!errors.empty()) {
        std::vector<std::string> each;
        for (const auto& e : errors)
            each.emplace_back(e.what());
        throw Error(fmt::format("{} errors:\n  {}", errors.size(), fmt::join(each, "\n  ")), c.file.string(),
                    "each fixed (one line each above, with its place)");
    }
    return c;
}

} // namespace infrarsi::contract
