#include "contract/draft.hpp"

#include "contract/knob_discovery.hpp"

#include "util/error.hpp"
#include "util/fd.hpp"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <set>

namespace infrarsi::contract {
namespace {

namespace fs = std::filesystem;

// A TOML basic string.
std::string q(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        if (static_cast<unsigned char>(c) < 0x20) {
            out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
            continue;
        }
        out += c;
    }
    return out + "\"";
}

// The draft, line by line; "check" lines carry the comment the user must read.
class Writer {
  public:
    // A line, or a value's comment, holds words of the script: one of its control characters (a newline in a
    // quoted argument) would end the comment and put the rest into the TOML.
    void line(const std::string& s = {}) { text_ += one_line(s) + "\n"; }
    void kv(const std::string& key, const std::string& value, const std::string& comment = {}) {
        text_ += key + " = " + value + (comment.empty() ? "" : "   # " + one_line(comment)) + "\n";
    }
    void check(const std::string& key, const std::string& value, const std::string& why) {
        kv(key, value, "CHECK: " + why);
        ++checks_;
    }
    // A comment line the user must read.
    void check_line(const std::string& why) {
        line("# CHECK: " + why);
        ++checks_;
    }
    void fill(const std::string& key, const std::string& why) { fill_in(key, q(draft_placeholder), why); }
    // A value with the placeholder inside it (`["--gpus-per-node=FILL-IN"]`).
    void fill_in(const std::string& key, const std::string& value, const std::string& why) {
        kv(key, value, "CHECK: fill in: " + why);
        ++checks_;
        ++placeholders_;
    }
    Draft done(std::vector<std::string> notes) {
        return Draft{text_, checks_, placeholders_, std::move(notes)};
    }

  private:
    static std::string one_line(std::string s) {
        for (auto& c : s)
            if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
        return s;
    }
    std::string text_;
    int checks_ = 0, placeholders_ = 0;
};

// A launcher option whose value comes from Slurm ($SLURM_NTASKS_PER_NODE, ${SLURM_GPUS_ON_NODE:-8}): the
// sbatch option that sets it.
std::optional<std::string> slurm_source(const std::string& value) {
    static const std::vector<std::pair<const char*, const char*>> from{
        {"SLURM_NTASKS_PER_NODE", "--ntasks-per-node"},
        {"SLURM_GPUS_ON_NODE", "--gpus-per-node"},
        {"SLURM_GPUS_PER_NODE", "--gpus-per-node"},
        {"SLURM_CPUS_PER_TASK", "--cpus-per-task"}};
    for (const auto& [var, opt] : from)
        if (value.find(std::string("$") + var) != std::string::npos ||
            value.find(std::string("${") + var) != std::string::npos)
            return std::string(opt);
    return std::nullopt;
}

// The number of GPUs per node the #SBATCH lines ask for (--gpus-per-node, --gres=gpu[:type]:N, --gpus).
std::optional<std::string> gpus_per_node(const BatchScript& s) {
    if (auto it = s.sbatch.find("gpus-per-node"); it != s.sbatch.end()) return it->second;
    if (auto it = s.sbatch.find("gres"); it != s.sbatch.end() && it->second.rfind("gpu", 0) == 0) {
        const auto colon = it->second.rfind(':');
        return colon == std::string::npos ? "1" : it->second.substr(colon + 1);
    }
    if (auto it = s.sbatch.find("gpus"); it != s.sbatch.end()) return it->second;
    return std::nullopt;
}

// What the draft does with each #SBATCH option sbatch would read. Resource: read into [resources] (or the
// GPUs into sbatch_args as --gpus-per-node). Carried: every trial needs it as the script has it (where it may
// run, whose allocation it is), so it goes into sbatch_args as written. Campaign: the campaign sets it per
// trial itself (its name, output, arrays, environment), so the script's value is left out, and the draft says
// why. Anything else is left out too, named, for the user to carry by hand if every trial needs it.
enum class SbatchUse { Resource, Carried, Campaign };
struct SbatchOption {
    SbatchUse use;
    const char* why; // for a Campaign option: why the campaign's own value replaces the script's
};
const std::map<std::string, SbatchOption>& sbatch_options() {
    static const std::map<std::string, SbatchOption> table{
        {"nodes", {SbatchUse::Resource, ""}},
        {"ntasks-per-node", {SbatchUse::Resource, ""}},
        {"cpus-per-task", {SbatchUse::Resource, ""}},
        {"partition", {SbatchUse::Resource, ""}},
        {"mem", {SbatchUse::Resource, ""}},
        {"time", {SbatchUse::Resource, ""}},
        {"gpus-per-node", {SbatchUse::Resource, ""}},
        {"gpus", {SbatchUse::Resource, ""}},
        {"gres", {SbatchUse::Resource, ""}},
        {"account", {SbatchUse::Carried, ""}},
        {"qos", {SbatchUse::Carried, ""}},
        {"constraint", {SbatchUse::Carried, ""}},
        {"reservation", {SbatchUse::Carried, ""}},
        {"exclusive", {SbatchUse::Carried, ""}},
        {"gpus-per-task", {SbatchUse::Carried, ""}},
        {"cpus-per-gpu", {SbatchUse::Carried, ""}},
        {"mem-per-gpu", {SbatchUse::Carried, ""}},
        {"mem-per-cpu", {SbatchUse::Carried, ""}},
        {"ntasks", {SbatchUse::Carried, ""}},
        {"ntasks-per-gpu", {SbatchUse::Carried, ""}},
        {"gpu-bind", {SbatchUse::Carried, ""}},
        {"gpu-freq", {SbatchUse::Carried, ""}},
        {"cpu-freq", {SbatchUse::Carried, ""}},
        {"hint", {SbatchUse::Carried, ""}},
        {"threads-per-core", {SbatchUse::Carried, ""}},
        {"cores-per-socket", {SbatchUse::Carried, ""}},
        {"sockets-per-node", {SbatchUse::Carried, ""}},
        {"distribution", {SbatchUse::Carried, ""}},
        {"switches", {SbatchUse::Carried, ""}},
        {"network", {SbatchUse::Carried, ""}},
        {"licenses", {SbatchUse::Carried, ""}},
        {"clusters", {SbatchUse::Carried, ""}},
        {"wckey", {SbatchUse::Carried, ""}},
        {"nodelist", {SbatchUse::Carried, ""}},
        {"exclude", {SbatchUse::Carried, ""}},
        {"contiguous", {SbatchUse::Carried, ""}},
        {"oversubscribe", {SbatchUse::Carried, ""}},
        {"mincpus", {SbatchUse::Carried, ""}},
        {"tmp", {SbatchUse::Carried, ""}},
        {"tres-per-task", {SbatchUse::Carried, ""}},
        {"job-name", {SbatchUse::Campaign, "each trial's job is named by the campaign"}},
        {"output", {SbatchUse::Campaign, "the campaign keeps each trial's output in its batch directory"}},
        {"error", {SbatchUse::Campaign, "the campaign keeps each trial's output in its batch directory"}},
        {"input", {SbatchUse::Campaign, "a trial reads no standard input"}},
        {"open-mode", {SbatchUse::Campaign, "the campaign keeps each trial's output in its batch directory"}},
        {"array", {SbatchUse::Campaign, "the campaign submits its own job arrays, one task a trial"}},
        {"dependency", {SbatchUse::Campaign, "the campaign orders its own batches"}},
        {"chdir", {SbatchUse::Campaign, "each trial runs in its own sandbox of the tree"}},
        {"mail-type", {SbatchUse::Campaign, "a campaign runs many trials: one mail each"}},
        {"mail-user", {SbatchUse::Campaign, "a campaign runs many trials: one mail each"}},
        {"requeue", {SbatchUse::Campaign, "the campaign re-queues what a node failure ended, itself"}},
        {"no-requeue", {SbatchUse::Campaign, "the campaign re-queues what a node failure ended, itself"}},
        {"export", {SbatchUse::Campaign, "the campaign sets each trial's environment"}},
        {"signal", {SbatchUse::Campaign, "a trial runs a short, fixed number of steps"}},
        {"time-min", {SbatchUse::Campaign, "a trial runs a short, fixed number of steps"}},
        {"begin", {SbatchUse::Campaign, "the campaign decides when its trials run"}},
        {"hold", {SbatchUse::Campaign, "the campaign decides when its trials run"}},
        {"priority", {SbatchUse::Campaign, "the campaign decides when its trials run"}},
        {"nice", {SbatchUse::Campaign, "the campaign decides when its trials run"}},
        {"parsable", {SbatchUse::Campaign, "an option of sbatch's own output, not of the job"}},
        {"wait", {SbatchUse::Campaign, "an option of sbatch's own output, not of the job"}},
    };
    return table;
}

// `p` relative to `dir` when they are close (the contract beside the script, or a folder or two away), else
// absolute.
std::string relative_to(const fs::path& p, const fs::path& dir) {
    std::error_code ec;
    auto rel = fs::relative(fs::weakly_canonical(p, ec), fs::weakly_canonical(dir, ec), ec);
    int up = 0;
    for (const auto& part : rel)
        if (part == "..") ++up;
    if (ec || rel.empty() || up > 2) return fs::absolute(p).lexically_normal().string();
    return rel.string();
}

// One draft being written, section by section in the order contract.cpp reads them: the script read, the
// options, the writer and the notes for the terminal, and what one section finds that a later one uses.
struct Drafting {
    Drafting(const DraftOptions& options, const BatchScript& script) : o(options), s(script) {}
    const DraftOptions& o;
    const BatchScript& s;
    Writer w;
    std::vector<std::string> notes;
    // [workload]: the script's step count and log interval, and the steps a trial runs.
    const ProgramArg* steps = nullptr;
    const ProgramArg* interval = nullptr;
    long long trial_steps = 20;
    // [resources]
    int nodes = 1, ntasks = 1;
    std::optional<int> cpus;
    std::optional<std::string> gpus;  // GPUs per node the #SBATCH lines ask for
    std::optional<std::string> nproc; // the launcher's --nproc_per_node
    bool gpus_knob = false;           // the GPUs per node are a knob (the launcher takes them from Slurm)
    // [knobs.*]: the global batch's factors, the knobs' names, the GPUs of one run.
    struct Product {
        std::vector<std::string> factors;
        long long value = 1;
    } batch;
    std::set<std::string> knob_names;
    std::optional<long long> run_gpus;
    KnobDiscovery found;
    // [metrics]: the format given or detected, and what it read of the sample.
    std::optional<measure::LogFormatKind> chosen;
    std::optional<measure::SampleReading> sampled;

    std::optional<std::string> sbatch(const char* name) const {
        auto it = s.sbatch.find(name);
        if (it == s.sbatch.end()) return std::nullopt;
        return it->second;
    }
    std::string sbatch_where(const char* name) const {
        return fmt::format("#SBATCH --{}, line {}", name, s.sbatch_line.at(name));
    }
};

std::string quoted_list(const std::vector<std::string>& names) {
    std::vector<std::string> quoted;
    for (const auto& n : names)
        quoted.push_back(q(n));
    return fmt::format("[{}]", fmt::join(quoted, ", "));
}

void draft_header(Drafting& d) {
    const auto& s = d.s;
    d.w.line(
        fmt::format("# Drafted by `infrarsi init --from {}` from the script's #SBATCH lines and its launch",
                    d.o.script.filename().string()));
    d.w.line(fmt::format("# (line {}: {} {}). Read every line marked CHECK; fill in every \"{}\"; then run",
                         s.launch_line, s.launcher, fs::path(s.program).filename().string(),
                         draft_placeholder));
    d.w.line("#   infrarsi init THIS_FILE --dir CAMPAIGN_DIR");
    d.w.line("# Keys: docs/contract.md.");
    d.w.kv("name", q(d.o.script.stem().string()));
    d.w.line();
}

// The traps a reader of the script can see, each a CHECK line.
void draft_script_traps(Drafting& d) {
    const auto& s = d.s;
    auto& w = d.w;
    auto& notes = d.notes;
    if (!s.other_launch_lines.empty()) {
        const std::string lines = fmt::format("{}", fmt::join(s.other_launch_lines, ", "));
        w.check_line(
            fmt::format("the script launches a program on line(s) {} too; the draft took line {} ({} "
                        "{}) as the training: every trial runs the whole script, the others too",
                        lines, s.launch_line, s.launcher, s.program));
        notes.push_back(fmt::format("more than one launch: line {} taken as the training, also line(s) {}",
                                    s.launch_line, lines));
    }
    if (s.launch_in_loop) {
        w.check_line(
            fmt::format("the launch (line {}) is inside a loop: several trainings in one job, and each "
                        "trial would run them all; keep one in the script a trial runs",
                        s.launch_line));
        notes.push_back("the launch is inside a loop: several trainings in one job");
    }
    if (!s.stdout_redirect.empty()) {
        w.check_line(
            fmt::format("the launch (line {}) sends its output to {}, not to the job's output: trials "
                        "would read no step line; remove the redirection (or use `| tee {}`)",
                        s.launch_line, s.stdout_redirect, s.stdout_redirect));
        notes.push_back("the training's output is redirected to " + s.stdout_redirect +
                        ": trials read the job's output");
    }
    if (!s.positional_lines.empty()) {
        const std::string lines = fmt::format("{}", fmt::join(s.positional_lines, ", "));
        w.check_line(
            fmt::format("the script reads its own arguments ($1..$9, line(s) {}): the args and knobs "
                        "a trial appends would land there; give them as knobs of another kind, or "
                        "read them by name",
                        lines));
        notes.push_back("the script reads positional arguments ($1..): appended arguments would shift them");
    }
    if (!s.fixed_port.empty()) {
        w.check_line(fmt::format("a fixed rendezvous port {} (line {}): two trials on one node at once would "
                                 "collide; derive it from the job, e.g. $((29500 + SLURM_JOB_ID % 1000))",
                                 s.fixed_port, s.fixed_port_line));
        notes.push_back("a fixed rendezvous port " + s.fixed_port + ": trials sharing a node would collide");
    }
    if (!s.absolute_cd.empty()) {
        w.check_line(
            fmt::format("the script changes into {} (line {}) before the launch: every trial would run "
                        "the code there, not its sandbox's patched copy; change into the script's own "
                        "directory instead (cd \"$(dirname \"$0\")\")",
                        s.absolute_cd, s.absolute_cd_line));
        notes.push_back("the script changes into " + s.absolute_cd +
                        ": trials would run that tree, not their sandbox");
    }
    if (!s.forwards_arguments) {
        notes.push_back(fmt::format("the launch on line {} does not pass the script's arguments on (\"$@\"): "
                                    "knobs and args given as arguments cannot reach {}; add \"$@\" after its "
                                    "arguments",
                                    s.launch_line, s.program));
        w.line(
            fmt::format("# CHECK: the launch (line {}) does not pass \"$@\" to {}: add it, or the knobs and "
                        "args below never reach the program",
                        s.launch_line, s.program));
    }
}

// [workload]: the script, run in each trial's sandbox, with the arguments that make a trial short.
void draft_workload(Drafting& d) {
    const auto& s = d.s;
    auto& w = d.w;
    w.line("[workload]");
    const fs::path out_dir = fs::absolute(d.o.output).parent_path();
    const fs::path script_dir = fs::absolute(d.o.script).parent_path();
    w.check("source", q(relative_to(script_dir, out_dir)),
            "the tree copied into every trial's sandbox, locked at init: the code only (no job output, "
            "data, checkpoints or campaigns: a change stops the campaign)");
    w.kv("sbatch_script", q(relative_to(d.o.script, out_dir)),
         "run with bash inside each trial's allocation; its #SBATCH lines are replaced by [resources]");
    d.steps = argument_with_role(s, Role::Steps);
    const ProgramArg* steps = d.steps;
    // A step line every N steps (N > 1): a short trial would print few or none; every trial prints each.
    d.interval = argument_with_role(s, Role::LogInterval);
    const ProgramArg* interval = d.interval;
    const bool sparse_log = interval && !interval->flag && plain_integer(interval->value).value_or(1) > 1;
    // A trial runs 20 steps, or the script's own count when that is shorter (a longer trial only costs).
    d.trial_steps =
        steps && plain_integer(steps->value) ? std::min<long long>(20, *plain_integer(steps->value)) : 20;
    const long long trial_steps = d.trial_steps;
    const bool short_run = steps && !steps->flag && plain_integer(steps->value).value_or(21) > trial_steps;
    std::vector<std::string> args;
    if (short_run) args.push_back(q(steps->name + "=" + std::to_string(trial_steps)));
    if (sparse_log) args.push_back(q(interval->name + "=1"));
    if (!args.empty()) {
        std::string why = "appended to the script's arguments:";
        if (short_run)
            why += fmt::format(" a short run of each trial (the script runs {} steps)", steps->value);
        if (sparse_log)
            why +=
                fmt::format("{} a step line every step (the script prints one every {}: a trial of 20 steps "
                            "would measure {})",
                            short_run ? ";" : "", interval->value,
                            trial_steps / plain_integer(interval->value).value_or(1));
        w.check("args", fmt::format("[{}]", fmt::join(args, ", ")), why);
    }
    draft_script_traps(d);
    w.line();
}

// Every #SBATCH option accounted for: carried into sbatch_args as written, or named as left out with why.
void draft_sbatch_args(Drafting& d) {
    const auto& s = d.s;
    auto& w = d.w;
    auto& notes = d.notes;
    const auto& gpus = d.gpus;
    const bool gpus_knob = d.gpus_knob;
    std::vector<std::string> sbatch_args;
    if (gpus && !gpus_knob) sbatch_args.push_back("--gpus-per-node=" + *gpus);
    std::vector<std::string> carried, left_out;
    for (const auto& [name, value] : s.sbatch) {
        const std::string at = fmt::format("--{} (line {})", name, s.sbatch_line.at(name));
        const auto it = sbatch_options().find(name);
        if (name == "gres" && value.rfind("gpu", 0) != 0) { // a non-GPU resource (a license, local disk)
            sbatch_args.push_back("--gres=" + value);
            continue;
        }
        if (it == sbatch_options().end()) {
            left_out.push_back(
                at + ": not an option the draft knows; add it to sbatch_args if every trial needs it");
        } else if (it->second.use == SbatchUse::Carried) {
            sbatch_args.push_back(value.empty() ? "--" + name : "--" + name + "=" + value);
            carried.push_back(at);
        } else if (it->second.use == SbatchUse::Campaign) {
            left_out.push_back(at + ": " + it->second.why);
        }
    }
    // The GPUs, asked for as --gres=gpu:N or --gpus=N, reach every trial as --gpus-per-node.
    for (const char* name : {"gres", "gpus"})
        if (const auto it = s.sbatch.find(name);
            it != s.sbatch.end() && gpus && !gpus_knob &&
            (std::string(name) == "gpus" || it->second.rfind("gpu", 0) == 0))
            w.line(fmt::format("# #SBATCH --{}={} (line {}) is carried as --gpus-per-node={}", name,
                               it->second, s.sbatch_line.at(name), *gpus));
    if (!sbatch_args.empty()) {
        std::string list;
        for (const auto& a : sbatch_args)
            list += (list.empty() ? "" : ", ") + q(a);
        w.check("sbatch_args", "[" + list + "]",
                carried.empty() ? "further sbatch options of every trial"
                                : "further sbatch options of every trial, as the script's #SBATCH lines have "
                                  "them (where a trial may run, whose allocation it is)");
    }
    if (s.sbatch.empty()) {
        // No #SBATCH line at all (the options come from a wrapper, or the command line): nothing says how
        // many nodes or GPUs a trial needs, and a silent 1 node without a GPU would time every trial wrongly.
        w.fill("nodes", "the script has no #SBATCH lines: the nodes one run of the job needs");
        w.fill_in("sbatch_args", "[\"--gpus-per-node=" + std::string(draft_placeholder) + "\"]",
                  "the GPUs per node one run needs (or remove this line: a CPU job)");
        notes.push_back("the script has no #SBATCH lines: fill in nodes, the GPUs per node and mem in "
                        "[resources] (the draft cannot know them)");
    }
    for (const auto& l : left_out)
        w.line("# not carried from #SBATCH " + l);
    // The options the campaign sets itself are routine (named in the draft); one the draft does not know is
    // the user's to decide.
    std::size_t unknown = 0;
    for (const auto& [name, value] : s.sbatch)
        if (!sbatch_options().count(name) && name != "gres") ++unknown;
    if (unknown > 0)
        notes.push_back(
            fmt::format("{} #SBATCH option(s) the draft does not know, not carried into the trials "
                        "(named in the draft: add each to sbatch_args if every trial needs it)",
                        unknown));
}

// [resources]: from the #SBATCH lines; the memory limit and the time a trial needs are the user's to check.
void draft_resources(Drafting& d) {
    const auto& s = d.s;
    auto& w = d.w;
    w.line("[resources]");
    const auto sbatch = [&](const char* name) { return d.sbatch(name); };
    const auto sbatch_where = [&](const char* name) { return d.sbatch_where(name); };
    if (auto v = sbatch("nodes"); v && plain_integer(*v)) {
        d.nodes = static_cast<int>(*plain_integer(*v));
        w.kv("nodes", *v, "from " + sbatch_where("nodes"));
    }
    if (auto v = sbatch("ntasks-per-node"); v && plain_integer(*v)) {
        d.ntasks = static_cast<int>(*plain_integer(*v));
        w.kv("ntasks_per_node", *v, "from " + sbatch_where("ntasks-per-node"));
    }
    if (auto v = sbatch("cpus-per-task"); v && plain_integer(*v)) {
        d.cpus = static_cast<int>(*plain_integer(*v));
        w.kv("cpus_per_task", *v, "from " + sbatch_where("cpus-per-task"));
    }
    if (auto v = sbatch("partition")) w.kv("partition", q(*v), "from " + sbatch_where("partition"));
    if (auto v = sbatch("mem"); v && *v != "0")
        w.check("mem", q(*v),
                "the memory limit per node every candidate must fit under (from " + sbatch_where("mem") +
                    ")");
    else
        w.fill("mem", "the memory limit per node, e.g. \"64G\" (the script sets no --mem, or --mem=0: the "
                      "whole node)");
    w.check("time_limit", q("10"),
            fmt::format("per trial, which runs only the short run above{}",
                        sbatch("time")
                            ? " (" + sbatch_where("time") + " asks " + *sbatch("time") + " for its full run)"
                            : ""));
    d.gpus = gpus_per_node(s);
    d.nproc = s.launcher_option("--nproc_per_node");
    d.gpus_knob = d.nproc && slurm_source(*d.nproc) == "--gpus-per-node";
    draft_sbatch_args(d);
    w.line();
}

// One suggested knob's table.
void draft_knob(Drafting& d, const SuggestedKnob& k) {
    auto& w = d.w;
    w.line(fmt::format("[knobs.{}]   # {}", k.name, fmt::format("{}: {}", k.what, k.from)));
    d.knob_names.insert(k.name);
    for (const auto& e : k.edits)
        w.check_line(e);
    switch (k.kind) {
    case SuggestedKind::Integer:
    case SuggestedKind::Pow2:
        w.kv("kind", q(k.kind == SuggestedKind::Pow2 ? "pow2" : "integer"));
        w.check("min", std::to_string(k.min), "the smallest value worth trying");
        w.check("max", std::to_string(k.max), "the largest value worth trying");
        break;
    case SuggestedKind::Choice: {
        w.kv("kind", q("choice"));
        std::vector<std::string> quoted;
        for (const auto& v : k.values)
            quoted.push_back(q(v));
        w.check("values", fmt::format("[{}]", fmt::join(quoted, ", ")),
                k.values_from.empty() ? std::string("the values the program accepts")
                                      : "the values the program accepts: " + k.values_from);
        break;
    }
    case SuggestedKind::Flag:
        w.kv("kind", q("bool"));
        break;
    }
    if (!k.env.empty()) {
        w.kv("env", q(k.env));
        if (!k.unset.empty()) w.kv("unset", q(k.unset), "this value leaves the variable out");
    } else {
        std::vector<std::string> quoted;
        for (const auto& a : k.arg)
            quoted.push_back(q(a));
        w.kv("arg", k.arg.size() == 1 ? quoted[0] : fmt::format("[{}]", fmt::join(quoted, ", ")));
    }
    if (k.kind == SuggestedKind::Integer || k.kind == SuggestedKind::Pow2)
        w.kv("baseline", std::to_string(k.baseline_number), "what the script runs with today");
    else if (k.kind == SuggestedKind::Flag)
        w.kv("baseline", "true", "the script passes the flag today");
    else
        w.kv("baseline", q(k.baseline), "what the script runs with today");
    w.line();
    if ((k.role == Role::MicroBatch || k.role == Role::Accumulation) &&
        (k.kind == SuggestedKind::Integer || k.kind == SuggestedKind::Pow2)) {
        d.batch.factors.push_back(k.name);
        d.batch.value *= k.baseline_number;
    }
}

// Ranks (or GPUs) per node: a knob when the launcher takes them from Slurm's allocation.
void draft_ranks_per_node(Drafting& d) {
    const auto& s = d.s;
    auto& w = d.w;
    const auto& nproc = d.nproc;
    if (!nproc) return;
    if (auto opt = slurm_source(*nproc)) {
        const bool gpu = *opt == "--gpus-per-node";
        const std::string name = gpu ? "gpus_per_node" : "ranks_per_node";
        const int base = gpu ? static_cast<int>(plain_integer(d.gpus.value_or("1")).value_or(1)) : d.ntasks;
        w.line(fmt::format("[knobs.{}]   # {}", name,
                           fmt::format("{} --nproc_per_node={}", s.launcher, *nproc)));
        d.knob_names.insert(name);
        w.kv("kind", q("integer"));
        w.check("min", "1", "the fewest ranks per node worth trying");
        w.check("max", std::to_string(std::max(base, gpu ? base : d.cpus.value_or(1) * d.ntasks)),
                gpu ? "the GPUs of a node" : "the most ranks per node worth trying");
        w.kv("sbatch_option", q(*opt), "each trial is submitted with this option set to the value");
        w.kv("baseline", std::to_string(base));
        w.line();
        d.batch.factors.push_back(name);
        d.batch.value *= base;
    } else {
        w.line(
            fmt::format("# {} --nproc_per_node={} is fixed in the script: to tune the ranks per node, write "
                        "--nproc_per_node=$SLURM_NTASKS_PER_NODE",
                        s.launcher, *nproc));
        w.line("# (or $SLURM_GPUS_ON_NODE) there and add a knob with sbatch_option = "
               "\"--ntasks-per-node\".");
        w.line();
    }
}

// [knobs] and [knobs.*]: the presets the script's environment names and the knobs its arguments suggest.
void draft_knobs(Drafting& d) {
    auto& w = d.w;
    // GPUs of one run, for the parallel sizes' bound.
    std::optional<long long> node_gpus;
    if (d.gpus && plain_integer(*d.gpus))
        node_gpus = *plain_integer(*d.gpus);
    else if (d.nproc && plain_integer(*d.nproc)) // torchrun --nproc_per_node=8: a process a GPU
        node_gpus = *plain_integer(*d.nproc);
    if (node_gpus) d.run_gpus = d.nodes * *node_gpus;
    d.found = discover_knobs(
        d.s, {d.run_gpus, node_gpus, d.cpus ? std::optional<long long>(*d.cpus) : std::nullopt});
    if (!d.found.presets.empty()) {
        w.line("[knobs]");
        w.check("include", quoted_list(d.found.presets),
                "the knob presets of the NCCL variables the script exports (docs/contract.md, presets)");
        w.line();
    }
    for (const auto& k : d.found.knobs)
        draft_knob(d, k);
    draft_ranks_per_node(d);
}

// What [constants] and [[constraints]] say: the global batch fixed (two factors of it are knobs), the
// parallel sizes bounded by the GPUs of a run.
struct Bounds {
    bool fixed_batch = false;
    bool bounded_parallel = false;
    bool one_fits = false;        // one parallel factor, whose largest value fits: no bound needed
    long long parallel_today = 1; // the product of the script's own parallel sizes
};

Bounds bounds_of(const Drafting& d) {
    const auto& found = d.found;
    const auto& run_gpus = d.run_gpus;
    Bounds b;
    b.fixed_batch = d.batch.factors.size() >= 2 && d.knob_names.count("micro_batch");
    for (const auto& k : found.knobs)
        if (std::find(found.parallel_factors.begin(), found.parallel_factors.end(), k.name) !=
            found.parallel_factors.end())
            b.parallel_today *= k.baseline_number;
    b.one_fits = found.parallel_factors.size() == 1 && run_gpus &&
                 std::all_of(found.knobs.begin(), found.knobs.end(), [&](const SuggestedKnob& k) {
                     return k.name != found.parallel_factors[0] || k.max <= *run_gpus;
                 });
    b.bounded_parallel =
        !found.parallel_factors.empty() && run_gpus && b.parallel_today <= *run_gpus && !b.one_fits;
    return b;
}

void draft_constants(Drafting& d, const Bounds& b) {
    auto& w = d.w;
    if (!b.fixed_batch && !b.bounded_parallel) return;
    w.line("[constants]");
    if (b.fixed_batch) {
        long long global = d.batch.value;
        if (d.nodes > 1) {
            w.kv("nodes", std::to_string(d.nodes));
            d.batch.factors.push_back("nodes");
            global *= d.nodes;
        }
        w.check("global_batch", std::to_string(global),
                "micro-batch x accumulation x ranks as the script runs: kept by every candidate");
    }
    if (b.bounded_parallel) w.kv("gpus", std::to_string(*d.run_gpus), "nodes x GPUs per node of one run");
    w.line();
}

void draft_constraints(Drafting& d, const Bounds& b) {
    auto& w = d.w;
    const auto& found = d.found;
    const auto& run_gpus = d.run_gpus;
    if (b.fixed_batch) {
        w.line("[[constraints]]");
        w.kv("product", quoted_list(d.batch.factors));
        w.kv("equals", q("global_batch"));
        w.line();
    } else if (const ProgramArg* global_arg = argument_with_role(d.s, Role::GlobalBatch);
               d.knob_names.count("micro_batch") && global_arg) {
        w.line(fmt::format("# {} {} fixes the global batch: the program derives the accumulation steps.",
                           global_arg->name, global_arg->value));
        w.line();
    }
    if (b.bounded_parallel) {
        w.line("[[constraints]]");
        w.kv("product", quoted_list(found.parallel_factors));
        w.check(
            "at_most", q("gpus"),
            "the parallel sizes multiply into the GPUs of a run; the program also asserts that they divide "
            "the heads, layers and batch: check the largest values above");
        w.line();
    } else if (!b.one_fits && !found.parallel_factors.empty() && run_gpus) {
        w.check_line(
            fmt::format("the script's own parallel sizes ({}: {}) need more GPUs than a run has ({}): "
                        "fix them, then add [[constraints]] product = [...] at_most gpus",
                        fmt::join(found.parallel_factors, " x "), b.parallel_today, *run_gpus));
        d.notes.push_back(fmt::format("the script's parallel sizes multiply to {} GPUs, a run has {}",
                                      b.parallel_today, *run_gpus));
        w.line();
    } else if (!found.parallel_factors.empty() && !run_gpus) {
        w.check_line(
            "the parallel sizes must multiply into at most the GPUs of a run: add [constants] gpus and "
            "a [[constraints]] product at_most gpus once the GPUs are filled in");
        w.line();
    }
}

// [constants] and [[constraints]]: the global batch stays what the script trains with; the tensor x
// pipeline x context parallel sizes stay within the GPUs of one run (powers of two: their product then
// divides the GPUs, the rest is data parallel).
void draft_constants_and_constraints(Drafting& d) {
    const Bounds b = bounds_of(d);
    draft_constants(d, b);
    draft_constraints(d, b);
}

// [metrics]: the format given or detected, always checked against the sample when there is one.
void draft_metrics(Drafting& d) {
    const auto& o = d.o;
    auto& w = d.w;
    auto& notes = d.notes;
    w.line("[metrics]");
    d.chosen = o.format;
    if (!d.chosen && !o.sample_log.empty()) d.chosen = measure::detect_format(o.sample_log);
    const auto& chosen = d.chosen;
    if (!o.sample_log.empty()) {
        measure::LogFormat f; // the project's own lines when no format reads it: every step-like line unread
        if (chosen) f.kind = *chosen;
        d.sampled = measure::read_sample(o.sample_log, f);
    }
    const auto& sampled = d.sampled;
    const std::string format_name = chosen ? std::string(measure::log_format_names.name(*chosen)) : "";
    if (o.format && !sampled) {
        w.check("format", q(format_name), "given with --format");
    } else if (o.format && sampled->steps == 0) {
        w.check("format", q(format_name),
                fmt::format("given with --format, but it reads no step line of {}", o.sample_log_name));
        notes.push_back(fmt::format("--format {} reads no step line of {}: trials would measure nothing; "
                                    "check the format, or leave --format out to detect it",
                                    format_name, o.sample_log_name));
    } else if (chosen && sampled) {
        w.check("format", q(format_name),
                fmt::format("{} {} step lines of {} this way",
                            o.format ? "given with --format: read" : "read", sampled->steps,
                            o.sample_log_name));
    } else if (sampled) {
        w.fill("format", fmt::format("no built-in format reads step lines in {}: {}, or \"regex\" with a "
                                     "pattern",
                                     o.sample_log_name, measure::log_format_names.list()));
    } else {
        w.fill("format", "how the job prints a step: " + measure::log_format_names.list() +
                             " (or give --sample-log FILE)");
    }
    if (sampled && sampled->unread > 0) {
        const std::string unread = fmt::format(
            "{} line{} of {} look{} like step lines but {} not read{}, the first: \"{}\"", sampled->unread,
            sampled->unread == 1 ? "" : "s", o.sample_log_name, sampled->unread == 1 ? "s" : "",
            chosen ? "the format does" : "are", chosen ? " them" : "", sampled->first_unread);
        w.check_line(unread);
        notes.push_back(unread);
    }
    w.line();
}

// [invariants]: the step lines a trial prints, the warm-up, the seed and the loss rule.
void draft_invariants(Drafting& d) {
    const auto& s = d.s;
    auto& w = d.w;
    const auto* steps = d.steps;
    const auto& sampled = d.sampled;
    const long long trial_steps = d.trial_steps;
    w.line("[invariants]");
    // The sample says how many step lines the script's own step count prints: nanoGPT prints iter 0 to
    // iter max_iters, one more than max_iters (13 lines for --max_iters=12).
    long long extra = 0;
    if (sampled && sampled->steps > 0 && steps && plain_integer(steps->value)) {
        const long long more = static_cast<long long>(sampled->steps) - *plain_integer(steps->value);
        if (more == 0 || more == 1) extra = more;
    }
    if (steps && !steps->flag)
        w.check(
            "steps", std::to_string(trial_steps + extra),
            extra ? fmt::format("the step lines a trial prints with the args above (the sample printed {} "
                                "for {}={})",
                                sampled->steps, steps->name, steps->value)
            : steps->name == "--max_iters"
                ? fmt::format("the step lines a trial prints with the args above; nanoGPT's train.py prints "
                              "iter 0 to iter {}: {} lines (a --sample-log tells)",
                              trial_steps, trial_steps + 1)
                : std::string("the step lines a trial prints with the args above"));
    else
        w.fill("steps", "the step lines a trial prints (the script sets no step count draft knows)");
    w.kv("warmup_steps", "3", "left out of the timing: start-up, first allocations");
    if (const ProgramArg* seed = argument_with_role(s, Role::Seed); seed && plain_integer(seed->value))
        w.kv("seed", seed->value, "the script's " + seed->name);
    if (sampled && d.chosen == measure::LogFormatKind::NanoGpt)
        w.check("loss_mode", q("last_k_mean"),
                "nanoGPT draws a random batch per micro-step: a micro-batch knob trains on other samples, "
                "use final_eval with a seed (docs/contract.md, which loss mode)");
    else
        w.kv("loss_mode", q("last_k_mean"));
    w.check("loss_tolerance", "0.02", "how far a candidate's loss may stray from the baseline's");
    w.kv("loss_last_k", "5");
    w.line();
}

// [budget] and [repeats]: defaults the user checks.
void draft_budget_and_repeats(Drafting& d) {
    auto& w = d.w;
    w.line("[budget]");
    w.check("trials", "12", "search trials");
    w.kv("batch_size", "4");
    w.check("wall_time", q("04:00:00"), "the whole campaign");
    w.line();
    w.line("[repeats]");
    w.kv("doctor", "5", "baseline runs: the noise floor (the default)");
    w.kv("verify", "3", "A/B pairs a promoted candidate must win (the default)");
    w.kv("verify_top", "2", "search candidates verified (the default)");
}

// [patches] and [agent] (docs/agent.md), when the user named a goal or an agent: the user's request in their
// words; the agent writes patches within the editable scope, which only the user can name.
void draft_agent(Drafting& d) {
    const auto& o = d.o;
    auto& w = d.w;
    if (o.goal.empty() && o.agent_command.empty()) return;
    w.line();
    w.line("[patches]");
    w.check_line("the files an agent's patches may change, relative to [workload] source");
    w.kv("editable", "[\"*.py\"]");
    w.line();
    w.line("[agent]");
    if (o.agent_command.empty()) {
        w.check_line(
            "command = [\"/path/to/agent\"]: a site's agent (docs/agent.md); none: no agent is called");
    } else {
        std::string argv;
        for (const auto& a : o.agent_command)
            argv += (argv.empty() ? "" : ", ") + q(a);
        w.kv("command", "[" + argv + "]");
    }
    if (!o.goal.empty()) w.kv("goal", q(o.goal));
    w.kv("calls", "4");
    w.kv("call_time_limit", q("10:00"));
}

} // namespace

Draft draft_contract(const DraftOptions& o) {
    const std::string where = o.script.string();
    const std::string text = read_regular_file(o.script.string());
    const BatchScript s = read_batch_script(text, where);
    if (s.launch_line == 0)
        throw Error("found no launch of a training program in the script", where,
                    "a line that runs torchrun, python, deepspeed, accelerate launch or srun");
    Drafting d(o, s);
    draft_header(d);
    draft_workload(d);
    draft_resources(d);
    draft_knobs(d);
    draft_constants_and_constraints(d);
    draft_metrics(d);
    draft_invariants(d);
    draft_budget_and_repeats(d);
    draft_agent(d);
    if (d.found.knobs.empty() && !d.steps && !d.interval)
        d.notes.push_back(fmt::format("no argument of {} is one the draft knows: add knobs by hand "
                                      "(docs/contract.md)",
                                      s.program));
    return d.w.done(std::move(d.notes));
}

void write_draft(const fs::path& file, const Draft& d) {
    UniqueFd fd(::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644));
    if (!fd) {
        if (errno == EEXIST)
            throw Error("the file exists", file.string(), "a new file for the draft (--output FILE)");
        throw Error(std::string("cannot create the draft: ") + std::strerror(errno), file.string());
    }
    write_all(fd.get(), d.text, file.string());
}

} // namespace infrarsi::contract
