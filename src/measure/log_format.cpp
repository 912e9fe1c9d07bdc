#include "measure/log_format.hpp"

#include "measure/line_pattern.hpp"
#include "util/error.hpp"
#include "util/json_field.hpp"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>

namespace infrarsi::measure {
namespace {

// A number as frameworks print them: 1.5, .5, 1e-3, 8.123456E+00, nan, inf, 1,165 (commas are dropped).
#define NUM R"((?:[-+]?(?:[0-9][0-9,]*\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|nan|inf))"

struct Builtin {
    const char* pattern;
    double step_time_unit_s;
    double memory_unit_bytes;
    const char* eval_pattern = nullptr; // a line with the evaluation loss: groups eval_loss and maybe step
};

// The built-in formats, each as its framework prints a training step (tests/fixtures/logs/README.md says
// where each fixture line comes from):
//   nanoGPT train.py:     iter 10: loss 4.2153, time 31.72ms, mfu 12.34%
//   Megatron-LM (and Megatron-DeepSpeed, GPT-NeoX, which print it in ms or in s, and "lm loss" or "lm_loss"):
//                         [...] iteration       10/     100 | consumed samples: ... | elapsed time per
//                         iteration (ms): 1234.5 | ... | lm loss: 8.123456E+00 | ...
//   Hugging Face Trainer: {'loss': 2.3456, 'grad_norm': 1.2, 'learning_rate': 4.9e-05, 'epoch': 0.01}, or as
//                         transformers prints it since floats are formatted: {'loss': '2.346', ...}
//   torchtitan:           step:  1  loss: 12.2240  grad_norm: ...  memory: 42.61GiB(44.86%)  tps: 1,165
//                         tflops: 67.46  mfu: 21.62%
//   llm.c:                step 3: train loss 4.677779 (took 1234.5 ms)            (train_gpt2.c)
//                         step    3/74 | loss 7.123456 (+0.00z)| norm ... | 123.45 ms | 40.1% bf16 MFU |
//                         123456 tok/s                                             (train_gpt2.cu)
//   litgpt:               Epoch 1 | iter 8 step 2 | loss train: 10.412, val: n/a | iter time: 123.45 ms
//   (step) OLMo:                 a block: [step=10/739328,epoch=0] then indented name=value lines (below)
// and their evaluation lines:
//   nanoGPT:              step 50: train loss 2.4989, val loss 2.5071
//   Megatron-LM:          validation loss at iteration 3 | lm loss value: 1.090000E+01 | lm loss PPL: ...
//                         (GPT-NeoX: validation results at iteration 3 | lm_loss value: ...)
//   Hugging Face Trainer: {'eval_loss': 2.7, 'eval_runtime': 1.2, ..., 'epoch': 0.16}
//   llm.c:                val loss 4.512345
std::optional<Builtin> builtin(LogFormatKind kind) {
    switch (kind) {
    case LogFormatKind::NanoGpt:
        return Builtin{R"(^iter (?<step>\d+): loss (?<loss>)" NUM R"(), time (?<step_time>)" NUM
                       R"()ms(?:, mfu (?<mfu_pct>)" NUM R"()%)?)",
                       1e-3, 1.0,
                       R"(^step (?<step>\d+): train loss )" NUM R"(, val loss (?<eval_loss>)" NUM ")"};
    case LogFormatKind::Megatron:
        return Builtin{R"(\biteration\s+(?<step>\d+)\s*/\s*\d+\s*\|.*?elapsed time per iteration )"
                       R"(\((?<step_time_unit>ms|s)\):\s*(?<step_time>)" NUM
                       R"().*?\|\s*lm[ _]loss:\s*(?<loss>)" NUM R"())",
                       1e-3, 1.0,
                       R"(\bvalidation (?:loss|results) at (?:iteration (?<step>\d+)|.*?)\s*\|\s*)"
                       R"(lm[ _]loss value:\s*(?<eval_loss>)" NUM ")"};
    case LogFormatKind::HfTrainer:
        return Builtin{R"(^\{'loss': '?(?<loss>)" NUM R"()'?,.*'epoch': '?)" NUM R"('?\}\s*$)", 1.0, 1.0,
                       R"(^\{'eval_loss': '?(?<eval_loss>)" NUM R"()'?,.*'epoch': '?)" NUM R"('?\}\s*$)"};
    case LogFormatKind::Torchtitan:
        return Builtin{R"(\bstep:\s*(?<step>\d+)\s+loss:\s*(?<loss>)" NUM
                       R"()(?:.*?\bmemory:\s*(?<memory>)" NUM R"()GiB)?(?:.*?\btps:\s*(?<tokens_per_s>)" NUM
                       R"())?(?:.*?\bmfu:\s*(?<mfu_pct>)" NUM R"()%)?)",
                       1.0, double(1ull << 30)};
    case LogFormatKind::LlmC:
        // train_gpt2.c's line, or train_gpt2.cu's (the step printed one-based, the z-scores in brackets).
        return Builtin{R"(^step\s+(?<step>\d+)(?::\s+train loss\s+|/\d+ \| loss\s+)(?<loss>)" NUM
                       R"()(?: \(took |.*?\| )(?<step_time>)" NUM R"() ms\b)"
                       R"((?:.*?(?<mfu_pct>)" NUM R"()% bf16 MFU)?(?:.*?(?<tokens_per_s>)" NUM R"() tok/s)?)",
                       1e-3, 1.0, R"(^val loss\s+(?<eval_loss>)" NUM ")"};
    case LogFormatKind::Litgpt:
        // A line per optimizer step ("(step)"); its iter time is the last micro-batch's alone, so the step's
        // time comes from the line times.
        return Builtin{R"(^Epoch \d+ \| iter \d+ step (?<step>\d+) \| loss train: (?<loss>)" NUM
                       R"(),.*\| iter time: )" NUM R"( ms \(step\))",
                       1.0, 1.0};
    case LogFormatKind::Olmo:
        // The block's header; its name=value lines are read by State::olmo_line.
        return Builtin{R"(\[step=(?<step>\d+)/\d+)", 1.0, 1.0};
    default:
        return std::nullopt;
    }
}

std::optional<double> number(std::string_view s) {
    std::string clean;
    for (char c : s)
        if (c != ',') clean += c;
    if (clean.empty()) return std::nullopt;
    char* end = nullptr;
    const double v = std::strtod(clean.c_str(), &end);
    if (end != clean.c_str() + clean.size()) return std::nullopt;
    return v;
}

std::string lower(std::string_view s) {
    std::string out(s);
    for (auto& c : out)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

// Terminal colours (torchtitan prints them): ESC [ ... final byte.
std::string strip_ansi(std::string_view line) {
    std::string out;
    out.reserve(line.size());
    for (std::size_t i = 0; i < line.size(); ++i) {
        if (line[i] == '\x1b' && i + 1 < line.size() && line[i + 1] == '[') {
            std::size_t j = i + 2;
            while (j < line.size() && !(line[j] >= 0x40 && line[j] <= 0x7e))
                ++j;
            i = j;
            continue;
        }
        out += line[i];
    }
    return out;
}

// torchrun's "[rank1]:" / "[default1]:" and srun --label's "1: " (right-aligned): the rank, and the line
// without the tag.
std::optional<int> take_rank_tag(std::string& line) {
    auto digits = [&](std::size_t from, std::size_t& to) {
        to = from;
        while (to < line.size() && to - from < 7 && std::isdigit(static_cast<unsigned char>(line[to])))
            ++to;
        return to > from;
    };
    std::size_t end = 0;
    for (const char* open : {"[rank", "[default"}) {
        const std::string_view o(open);
        if (line.compare(0, o.size(), o) == 0 && digits(o.size(), end) && line.compare(end, 2, "]:") == 0) {
            const int rank = std::atoi(line.c_str() + o.size());
            line.erase(0, end + 2);
            return rank;
        }
    }
    std::size_t start = 0;
    while (start < line.size() && start < 8 && line[start] == ' ')
        ++start;
    if (digits(start, end) && line.compare(end, 2, ": ") == 0) {
        const int rank = std::atoi(line.c_str() + start);
        line.erase(0, end + 2);
        return rank;
    }
    return std::nullopt;
}

// A value with its unit glued on ("31.7ms", "12.3GiB"): the number and the unit.
std::pair<std::optional<double>, std::string> split_unit(std::string_view v) {
    std::size_t i = v.size();
    while (i > 0 && (std::isalpha(static_cast<unsigned char>(v[i - 1])) || v[i - 1] == '%'))
        --i;
    return {number(v.substr(0, i)), std::string(v.substr(i))};
}

struct Fields {
    std::optional<double> step, loss, step_time_s, tokens_per_s, memory_bytes, mfu, eval_loss;
};

// key=value prints (Lightning's self.print, a plain print(f"step={i} loss={loss:.4f} ...")).
std::optional<Fields> key_value_fields(std::string_view line) {
    Fields f;
    std::size_t i = 0;
    while (i < line.size()) {
        while (i < line.size() && (line[i] == ' ' || line[i] == ',' || line[i] == '\t' || line[i] == '|'))
            ++i;
        std::size_t j = i;
        while (j < line.size() && line[j] != ' ' && line[j] != ',' && line[j] != '\t' && line[j] != '|')
            ++j;
        const std::string_view token = line.substr(i, j - i);
        i = j;
        const auto eq = token.find('=');
        if (eq == std::string_view::npos || eq == 0) continue;
        const std::string key = lower(token.substr(0, eq));
        const std::string_view value = token.substr(eq + 1);
        auto [v, unit] = split_unit(value);
        if (!v) continue;
        if (key == "step" || key == "iter" || key == "iteration" || key == "global_step") {
            f.step = v;
        } else if (key == "loss" || key == "train_loss" || key == "train/loss") {
            f.loss = v;
        } else if (key == "step_time" || key == "time" || key == "dt" || key == "iter_time" ||
                   key == "batch_time" || key.ends_with("_ms") || key.ends_with("_s")) {
            if (key.ends_with("_ms"))
                unit = unit.empty() ? "ms" : unit;
            else if (key.ends_with("_s") && key != "tokens_per_s")
                unit = unit.empty() ? "s" : unit;
            if (key == "tokens_per_s") {
                f.tokens_per_s = v;
                continue;
            }
            if (auto u = seconds_per_unit(unit.empty() ? "s" : unit)) f.step_time_s = *v * *u;
        } else if (key == "tokens_per_sec" || key == "tps" || key == "tok/s") {
            f.tokens_per_s = v;
        } else if (key == "memory" || key == "mem" || key == "peak_mem" || key == "max_mem") {
            if (auto u = bytes_per_unit(unit)) f.memory_bytes = *v * *u;
        } else if (key == "mfu") {
            f.mfu = (unit == "%" || *v > 1.0) ? *v / 100.0 : *v;
        } else if (key == "eval_loss" || key == "val_loss" || key == "val/loss" || key == "eval/loss" ||
                   key == "validation_loss") {
            f.eval_loss = v;
        }
    }
    if (!f.loss && !f.eval_loss) return std::nullopt;
    return f;
}

Fields pattern_fields(const std::map<std::string, std::string>& g, double time_unit, double memory_unit) {
    Fields out;
    auto get = [&](const char* name) -> std::optional<double> {
        auto it = g.find(name);
        return it == g.end() ? std::nullopt : number(it->second);
    };
    out.step = get("step");
    out.loss = get("loss");
    if (auto t = get("step_time")) {
        auto u = g.find("step_time_unit");
        const auto unit = u == g.end() ? std::optional(time_unit) : seconds_per_unit(u->second);
        if (unit) out.step_time_s = *t * *unit;
    }
    out.tokens_per_s = get("tokens_per_s");
    if (auto m = get("memory")) out.memory_bytes = *m * memory_unit;
    if (auto m = get("mfu")) out.mfu = *m;
    if (auto m = get("mfu_pct")) out.mfu = *m / 100.0;
    out.eval_loss = get("eval_loss");
    return out;
}

} // namespace

std::optional<double> seconds_per_unit(std::string_view unit) {
    const std::string u = lower(unit);
    if (u == "s" || u == "sec") return 1.0;
    if (u == "ms") return 1e-3;
    if (u == "us") return 1e-6;
    return std::nullopt;
}

std::optional<double> bytes_per_unit(std::string_view unit) {
    const std::string u = lower(unit);
    if (u == "b" || u == "bytes") return 1.0;
    if (u == "kib" || u == "kb" || u == "k") return 1024.0;
    if (u == "mib" || u == "mb" || u == "m") return 1024.0 * 1024;
    if (u == "gib" || u == "gb" || u == "g") return 1024.0 * 1024 * 1024;
    if (u == "tib" || u == "tb" || u == "t") return 1024.0 * 1024 * 1024 * 1024;
    return std::nullopt;
}

void check(const LogFormat& f, const std::string& where) {
    if (f.kind == LogFormatKind::Infrarsi && (f.step_prefix.empty() || f.summary_prefix.empty()))
        throw Error("step and summary prefixes must not be empty", where);
    if (f.kind == LogFormatKind::Regex) {
        if (f.pattern.empty())
            throw Error("format \"regex\" needs a pattern", where, "pattern = '...(?<loss>...)...'");
        const LinePattern p(f.pattern);
        if (!p.has_group("loss"))
            throw Error("the pattern has no (?<loss>...) group", where,
                        "named groups loss (required), step, step_time, tokens_per_s, memory, mfu, mfu_pct");
        static const std::set<std::string> known{"step",         "loss",   "step_time", "step_time_unit",
                                                 "tokens_per_s", "memory", "mfu",       "mfu_pct",
                                                 "eval_loss"};
        for (const auto& g : p.group_names())
            if (!known.count(g))
                throw Error("unknown group (?<" + g + ">...) in the pattern", where,
                            "step, loss, step_time, step_time_unit, tokens_per_s, memory, mfu, mfu_pct, "
                            "eval_loss");
    }
    if (!f.exclude_pattern.empty())
        LinePattern exclude(f.exclude_pattern); // throws where it does not compile
    for (int s : f.exclude_steps)
        if (s < 0)
            throw Error("an excluded step number is negative", where, "step numbers as the job prints them");
    if (!(f.step_time_unit_s > 0) || !(f.memory_unit_bytes > 0)) throw Error("units must be positive", where);
    if (f.rank && *f.rank < 0) throw Error("rank must be >= 0", where);
}

nlohmann::json to_json(const LogFormat& f) {
    nlohmann::json j = {{"format", log_format_names.name(f.kind)}};
    if (f.kind == LogFormatKind::Infrarsi) {
        j["step_prefix"] = f.step_prefix;
        j["summary_prefix"] = f.summary_prefix;
    }
    if (f.kind == LogFormatKind::Regex) {
        j["pattern"] = f.pattern;
        j["step_time_unit_s"] = f.step_time_unit_s;
        j["memory_unit_bytes"] = f.memory_unit_bytes;
    }
    if (f.rank) j["rank"] = *f.rank;
    if (!f.exclude_steps.empty()) j["exclude_steps"] = f.exclude_steps;
    if (!f.exclude_pattern.empty()) j["exclude_pattern"] = f.exclude_pattern;
    return j;
}

LogFormat log_format_from_json(const nlohmann::json& j, const std::string& where) {
    LogFormat f;
    const auto name = json_field<std::string>(j, "format", where);
    const auto kind = log_format_names.parse(name);
    if (!kind) throw Error("unknown log format '" + name + "'", where, log_format_names.list());
    f.kind = *kind;
    if (j.contains("step_prefix")) f.step_prefix = json_field<std::string>(j, "step_prefix", where);
    if (j.contains("summary_prefix")) f.summary_prefix = json_field<std::string>(j, "summary_prefix", where);
    if (j.contains("pattern")) f.pattern = json_field<std::string>(j, "pattern", where);
    if (j.contains("step_time_unit_s")) f.step_time_unit_s = json_field<double>(j, "step_time_unit_s", where);
    if (j.contains("memory_unit_bytes"))
        f.memory_unit_bytes = json_field<double>(j, "memory_unit_bytes", where);
    if (j.contains("rank")) f.rank = static_cast<int>(json_field<std::uint32_t>(j, "rank", where));
    if (j.contains("exclude_steps"))
        f.exclude_steps = json_field<std::vector<int>>(j, "exclude_steps", where);
    if (j.contains("exclude_pattern"))
        f.exclude_pattern = json_field<std::string>(j, "exclude_pattern", where);
    check(f, where);
    return f;
}

std::string describe(const LogFormat& f) {
    std::string s(log_format_names.name(f.kind));
    if (f.kind == LogFormatKind::Infrarsi) s += " (" + f.step_prefix + ")";
    if (f.kind == LogFormatKind::Regex) s += " /" + f.pattern + "/";
    if (f.rank) s += ", rank " + std::to_string(*f.rank) + " only";
    return s;
}

struct LogReader::State {
    explicit State(const LogFormat& f)
        : excluded(f.exclude_steps.begin(), f.exclude_steps.end()), rank(f.rank), kind(f.kind) {
        if (!f.exclude_pattern.empty()) exclude.emplace(f.exclude_pattern);
        if (f.kind == LogFormatKind::Infrarsi) {
            infrarsi.emplace(f.step_prefix, f.summary_prefix,
                             [this](const std::string& line) { return exclude && exclude->match(line); });
            return;
        }
        time_unit = f.step_time_unit_s;
        memory_unit = f.memory_unit_bytes;
        if (auto b = builtin(f.kind)) {
            pattern.emplace(b->pattern);
            if (b->eval_pattern) eval_pattern.emplace(b->eval_pattern);
            time_unit = b->step_time_unit_s;
            memory_unit = b->memory_unit_bytes;
        } else if (f.kind == LogFormatKind::Regex) {
            pattern.emplace(f.pattern);
        }
    }
    void framework_line(std::string_view raw, std::optional<double> now);
    void take_step(const Fields& fields, bool eval_line, std::optional<double> now);
    bool olmo_line(const std::string& line, std::optional<double> now);

    std::optional<LinePattern> exclude;
    std::set<int> excluded;
    std::optional<int> rank;
    LogFormatKind kind;
    std::optional<StepLineReader> infrarsi; // the project's own format
    bool last_infrarsi_read = false;
    // A framework's format or a user's pattern.
    std::optional<LinePattern> pattern, eval_pattern;
    double time_unit = 1.0, memory_unit = 1.0;
    StepLog log;
    std::set<int> seen;
    std::optional<double> previous_time;
    int previous_step = 0, ordinal = 0;
    bool exclude_next = false; // an evaluation or an excluded line since the previous step line
    bool read = false;         // the last line was one of the format's lines
    // OLMo: the block under way ([step=N/M] and its indented name=value lines), its fields so far, and
    // whether its step is read already (at its loss line, where the line has a time).
    std::optional<Fields> olmo_block;
    bool olmo_done = false;
};

// OLMo's log_metrics_to_console: "[step=10/739328,epoch=0]" and then, one a line, "    name=value" with
// train/CrossEntropyLoss (the loss), throughput/device/tokens_per_second and batches_per_second (the step
// time is its inverse where the line times give none), and the rest. A block's step is read at its loss line
// when the line has a time, else at its batches_per_second line. True: the line was the block's.
bool LogReader::State::olmo_line(const std::string& line, std::optional<double> now) {
    if (auto g = pattern->match(line)) {
        olmo_block = pattern_fields(*g, time_unit, memory_unit);
        olmo_done = false;
        return true;
    }
    if (!olmo_block || line.empty() || (line[0] != ' ' && line[0] != '\t')) {
        olmo_block.reset(); // the block ended
        return false;
    }
    const auto eq = line.find('=');
    if (eq == std::string::npos) return false;
    std::string name = line.substr(0, eq);
    name.erase(0, name.find_first_not_of(" \t"));
    const auto v = number(line.substr(eq + 1));
    if (!v) return true;
    auto& b = *olmo_block;
    if (name == "train/CrossEntropyLoss") {
        b.loss = v;
        if (now) {
            take_step(b, false, now);
            olmo_done = true;
        }
    } else if (name == "throughput/device/tokens_per_second") {
        b.tokens_per_s = v;
        if (olmo_done && !log.steps.empty() && log.steps.back().step == static_cast<int>(b.step.value_or(-1)))
            log.steps.back().tokens_per_s = *v;
    } else if (name == "throughput/device/batches_per_second" && *v > 0) {
        b.step_time_s = 1.0 / *v;
        if (!olmo_done && b.loss) {
            take_step(b, false, now);
            olmo_done = true;
        }
    }
    return true;
}

void LogReader::State::framework_line(std::string_view raw, std::optional<double> now) {
    read = false;
    std::string line = strip_ansi(raw.substr(0, std::min(raw.size(), kMaxLineBytes)));
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // A progress bar redraws itself with carriage returns: what follows the last one is what shows.
    if (const auto cr = line.rfind('\r'); cr != std::string::npos) line.erase(0, cr + 1);
    const auto line_rank = take_rank_tag(line);
    if (rank && line_rank && *line_rank != *rank) return;
    if (exclude && exclude->match(line)) exclude_next = true;
    if (kind == LogFormatKind::Olmo) {
        read = olmo_line(line, now);
        return;
    }

    std::optional<Fields> fields;
    bool eval_line = false; // the format's evaluation line
    if (eval_pattern)
        if (auto g = eval_pattern->match(line)) {
            fields = pattern_fields(*g, time_unit, memory_unit);
            eval_line = true;
        }
    if (!fields) {
        if (pattern) {
            if (auto g = pattern->match(line)) fields = pattern_fields(*g, time_unit, memory_unit);
        } else {
            fields = key_value_fields(line);
        }
    }
    if (!fields) return;
    read = true;
    take_step(*fields, eval_line, now);
}

void LogReader::State::take_step(const Fields& fields, bool eval_line, std::optional<double> now) {
    bool eval_after = false; // a step line that also reports an evaluation after it
    if (fields.eval_loss) {
        const int at = fields.step ? static_cast<int>(*fields.step) : previous_step;
        const EvalLoss e{at, *fields.eval_loss};
        const bool repeated =
            !log.evals.empty() && log.evals.back().step == e.step &&
            (log.evals.back().loss == e.loss || (std::isnan(e.loss) && std::isnan(log.evals.back().loss)));
        if (!repeated) log.evals.push_back(e); // every rank printed it: once
        if (eval_line || !fields.loss) {
            exclude_next = true; // it ran between two steps: the next step's time includes it
            return;
        }
        eval_after = true;
    }
    if (!fields.loss) return;
    const int step = fields.step ? static_cast<int>(*fields.step) : ++ordinal;
    if (seen.size() < kMaxStepsKept && !seen.insert(step).second)
        return; // every rank printed it: the first one counts
    StepSample s;
    s.step = step;
    s.loss = *fields.loss;
    s.timed = !exclude_next && !excluded.count(step);
    s.arrival_s = now;
    exclude_next = eval_after;
    if (fields.step_time_s) {
        s.step_time_s = *fields.step_time_s;
    } else if (now) {
        // The time since the previous step line (or since the job started), per step in between.
        const int steps = std::max(1, previous_time ? step - previous_step : 1);
        s.step_time_s = (*now - previous_time.value_or(0.0)) / steps;
    } else {
        previous_step = step;
        return; // no time anywhere: not a measured step
    }
    if (now) previous_time = now;
    previous_step = step;
    if (fields.tokens_per_s) s.tokens_per_s = *fields.tokens_per_s;
    if (fields.mfu && *fields.mfu >= 0) s.mfu = *fields.mfu; // nanoGPT prints -100% before it knows
    if (fields.memory_bytes) s.peak_device_bytes = *fields.memory_bytes;
    log.steps.push_back(std::move(s));
}

LogReader::LogReader(const LogFormat& f) : state_(std::make_unique<State>(f)) {}
LogReader::~LogReader() = default;

void LogReader::line(std::string_view line, std::optional<double> arrival) {
    line = line.substr(0, std::min(line.size(), kMaxReadLineBytes));
    auto& st = *state_;
    if (st.infrarsi) {
        auto& log = st.infrarsi->log();
        const std::size_t before = log.steps.size(), evals_before = log.evals.size();
        st.infrarsi->line(std::string(line), arrival);
        st.last_infrarsi_read = log.steps.size() != before || log.evals.size() != evals_before;
        for (std::size_t i = before; i < log.steps.size(); ++i)
            if (st.excluded.count(log.steps[i].step)) log.steps[i].timed = false;
        if (log.steps.size() > kMaxStepsKept) log.steps.resize(kMaxStepsKept);
        if (log.evals.size() > kMaxStepsKept) log.evals.resize(kMaxStepsKept);
        return;
    }
    st.framework_line(line, arrival);
    if (st.log.steps.size() > kMaxStepsKept) st.log.steps.resize(kMaxStepsKept);
    if (st.log.evals.size() > kMaxStepsKept) st.log.evals.resize(kMaxStepsKept);
}

bool LogReader::last_line_read() const {
    const auto& st = *state_;
    if (st.infrarsi) return st.last_infrarsi_read;
    return st.read;
}

const StepLog& LogReader::log() const {
    return state_->infrarsi ? state_->infrarsi->log() : state_->log;
}

StepLog LogReader::take() {
    return std::move(state_->infrarsi ? state_->infrarsi->log() : state_->log);
}

StepLog parse_log(std::string_view text, const LogFormat& f, const std::vector<double>* line_times) {
    LogReader reader(f);
    std::size_t line_no = 0;
    for (std::size_t pos = 0; pos < text.size(); ++line_no) {
        auto nl = text.find('\n', pos);
        if (nl == std::string_view::npos) nl = text.size();
        reader.line(text.substr(pos, nl - pos), line_times && line_no < line_times->size()
                                                    ? std::optional((*line_times)[line_no])
                                                    : std::nullopt);
        pos = nl + 1;
    }
    return reader.take();
}

SampleReading read_sample(std::string_view text, const LogFormat& f) {
    // A line that looks like a framework's step line: a step or iteration number and a loss.
    static const LinePattern step_like(
        R"((?i)\b(?:step|iter|iteration)\b[\s:=#]{0,12}\d.*\bloss|\bloss\b.*\b(?:step|iter|)"
        R"(iteration)\b[\s:=#]{0,12}\d)");
    LogReader reader(f);
    SampleReading out;
    double now = 0;
    for (std::size_t pos = 0; pos < text.size();) {
        auto nl = text.find('\n', pos);
        if (nl == std::string_view::npos) nl = text.size();
        const auto line = text.substr(pos, nl - pos);
        pos = nl + 1;
        reader.line(line, now += 1.0);
        if (reader.last_line_read()) continue;
        const std::string plain = strip_ansi(line.substr(0, std::min(line.size(), kMaxLineBytes)));
        if (!step_like.match(plain)) continue;
        if (out.unread++ == 0) out.first_unread = plain.substr(0, 200);
    }
    out.steps = reader.log().steps.size();
    return out;
}

std::optional<LogFormatKind> detect_format(std::string_view sample) {
    std::optional<LogFormatKind> best;
    std::size_t most = 1;
    for (const auto& [kind, name] : log_format_names.entries) {
        (void)name;
        if (kind == LogFormatKind::Regex) continue;
        LogFormat f;
        f.kind = kind;
        if (const auto steps = read_sample(sample, f).steps; steps > most) {
            best = kind;
            most = steps;
        }
    }
    return best;
}

#undef NUM

} // namespace infrarsi::measure
