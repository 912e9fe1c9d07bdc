#pragma once
// How to read a job's steps from its own output: the project's JSON lines (`INFRARSI_STEP {json}`), the log
// line of a framework people use (nanoGPT, Megatron-LM with Megatron-DeepSpeed and GPT-NeoX, the Hugging Face
// Trainer, torchtitan, llm.c, litgpt, OLMo, key=value prints), or a user's regular expression with named
// groups. The contract's [metrics] section picks one
// (docs/contract.md); the trial wrapper parses the log with it (trial/exec.cpp) and so does ingest when the
// wrapper died with the job. Each built-in format is tested on captured lines in tests/fixtures/logs/.
#include "measure/steps.hpp"
#include "util/enum_names.hpp"

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace infrarsi::measure {

// In the order detection tries them: on a tie the earlier (more specific) one wins, key-value last.
enum class LogFormatKind {
    Infrarsi,
    NanoGpt,
    Megatron,
    HfTrainer,
    Torchtitan,
    LlmC,
    Litgpt,
    Olmo,
    KeyValue,
    Regex
};
inline constexpr util::EnumNames<LogFormatKind, 10> log_format_names{
    {{{LogFormatKind::Infrarsi, "infrarsi"},
      {LogFormatKind::NanoGpt, "nanogpt"},
      {LogFormatKind::Megatron, "megatron"},
      {LogFormatKind::HfTrainer, "hf-trainer"},
      {LogFormatKind::Torchtitan, "torchtitan"},
      {LogFormatKind::LlmC, "llm.c"},
      {LogFormatKind::Litgpt, "litgpt"},
      {LogFormatKind::Olmo, "olmo"},
      {LogFormatKind::KeyValue, "key-value"},
      {LogFormatKind::Regex, "regex"}}}};

struct LogFormat {
    LogFormatKind kind = LogFormatKind::Infrarsi;
    // infrarsi: the prefixes of step and summary lines.
    std::string step_prefix = "INFRARSI_STEP";
    std::string summary_prefix = "INFRARSI_SUMMARY";
    // regex: a PCRE2 pattern with named groups: loss (required), step (else lines are numbered in order),
    // step_time (in step_time_unit, or in the unit the line prints in a step_time_unit group: s, ms, us),
    // tokens_per_s, memory (the device memory peak the job reports, in
    // memory_unit; the host's comes from the scheduler), mfu (a fraction) or mfu_pct (a percentage), and
    // eval_loss (a line where it takes part is an evaluation, not a step; `(?<loss>...)|(?<eval_loss>...)`).
    std::string pattern;
    double step_time_unit_s = 1.0;
    double memory_unit_bytes = 1.0;
    // Only the lines of this rank, as torchrun ("[rank1]:", "[default1]:") or `srun --label` ("1: ") tag
    // them; untagged lines always count. nullopt: every line.
    std::optional<int> rank;
    // Left out of timing (their losses still count): these step numbers, and a step whose line, or a line
    // printed since the previous step line, matches exclude_pattern (a checkpoint's "saving checkpoint").
    // A step after an evaluation line of the format is left out without being named.
    std::vector<int> exclude_steps;
    std::string exclude_pattern;
    bool operator==(const LogFormat&) const = default;
};

// "ms" -> 0.001 (s, ms, us); "GiB" -> 2^30 (B, KiB/KB, MiB/MB, GiB/GB, TiB/TB; KB and the rest as 1024-based,
// as PyTorch and nvidia-smi print them). nullopt for an unknown unit.
std::optional<double> seconds_per_unit(std::string_view unit);
std::optional<double> bytes_per_unit(std::string_view unit);

// Checks a format: a regex compiles and has a loss group, units are positive. Throws infrarsi::Error.
void check(const LogFormat& f, const std::string& where);
nlohmann::json to_json(const LogFormat& f);
LogFormat log_format_from_json(const nlohmann::json& j, const std::string& where);
// For people: "nanogpt", "regex /iter (?<step>.../", "infrarsi (INFRARSI_STEP)".
std::string describe(const LogFormat& f);

// The steps in `text`, and the evaluation losses. A step number seen twice keeps its first line (every rank
// printing the same line).
// `line_times` (seconds since the job started, one per line of `text`, as the trial wrapper records them)
// gives a step time to formats that print none: the time since the previous step line, per step.
StepLog parse_log(std::string_view text, const LogFormat& f, const std::vector<double>* line_times = nullptr);

// A sample of a job's output read with a format: the steps it gives, and the lines that look like step lines
// (a step or iteration number and a loss on one line) that the format does not read, with the first of them:
// what `infrarsi init --from --sample-log` reports for the format it picks or is given.
struct SampleReading {
    std::size_t steps = 0;
    std::size_t unread = 0;
    std::string first_unread;
};
// `line_times`-less formats are read with one second between lines (a sample has no times).
SampleReading read_sample(std::string_view text, const LogFormat& f);
// The built-in format that reads the most steps (at least 2) of a sample, the earlier in the table on a tie;
// nullopt where none does.
std::optional<LogFormatKind> detect_format(std::string_view sample);

// A log's steps read one line at a time as the output arrives (the trial wrapper's way), in memory bounded by
// the steps kept, whatever the output's volume: parse_log is this over a whole text. A line is read up to
// kMaxReadLineBytes; at most kMaxStepsKept steps and evaluations are kept (a contract's steps are far
// fewer: more step lines than it has is a violation either way).
inline constexpr std::size_t kMaxReadLineBytes = 64u << 10;
inline constexpr std::size_t kMaxStepsKept = 1u << 16;
class LogReader {
  public:
    explicit LogReader(const LogFormat& f);
    ~LogReader();
    LogReader(const LogReader&) = delete;
    LogReader& operator=(const LogReader&) = delete;
    // One line, without its '\n' (cut to kMaxReadLineBytes here); `arrival`: when it arrived, seconds
    // since the job started (the wrapper's clock).
    void line(std::string_view line, std::optional<double> arrival);
    // Whether the last line given was one of the format's step or evaluation lines (read, or a repeat of a
    // step already read from another rank).
    bool last_line_read() const;
    const StepLog& log() const;
    StepLog take();

  private:
    struct State;
    std::unique_ptr<State> state_;
};

} // namespace infrarsi::measure
