#pragma once
// Step lines: the workload's rank 0 prints `PREFIX {json}` once per step (step, loss, step_time_s, phases,
// tokens, tokens_per_s, model_flops, mfu, peak_rss_bytes) and `SUMMARY_PREFIX {json}` at the end.
#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::measure {

struct StepSample {
    int step = 0;
    double loss = 0;
    double step_time_s = 0;
    std::map<std::string, double> phases; // forward_s, backward_s, comm_s, optimizer_s, data_s, ...
    double tokens = 0, tokens_per_s = 0, model_flops = 0;
    std::optional<double> mfu;
    std::optional<double> peak_rss_bytes;
    std::optional<double> peak_device_bytes; // the accelerator memory peak the job reports (a framework log's
                                             // "memory"); the host's peak comes from the scheduler's record
    // false: left out of the timing statistics (its loss still counts): a step the contract excludes by
    // number, or one whose time includes an evaluation or checkpoint (log_format.hpp, parse_log).
    bool timed = true;
    // When the trial wrapper received the step's line, in seconds since the workload started (its own clock,
    // which the workload cannot interpose); empty where the log was not read as it arrived.
    std::optional<double> arrival_s;
};

// An evaluation loss the job printed (nanoGPT's "val loss", HF's 'eval_loss', Megatron's validation line),
// at the step it followed. The last one is the final evaluation loss (loss_mode = "final_eval").
struct EvalLoss {
    int step = 0;
    double loss = 0;
    bool operator==(const EvalLoss&) const = default;
};

struct StepLog {
    std::vector<StepSample> steps;
    int malformed = 0; // prefixed lines that were not valid step JSON
    std::optional<nlohmann::json> summary;
    std::vector<EvalLoss> evals; // in the order printed
};

// Lines may carry text before the prefix (an MPI rank tag); lines without the prefix are ignored. A step's
// JSON may carry "eval_loss" (an evaluation after it). `excluder`, when given, is asked about every line: a
// step line it holds, or the first step line after one it holds, is left out of timing. `line_times`, when
// given, holds when each line arrived (the trial wrapper's clock): a step's arrival_s is its line's.
// The same, one line at a time (`line` without its '\n'), as the trial wrapper reads output as it arrives.
class StepLineReader {
  public:
    StepLineReader(std::string step_prefix, std::string summary_prefix,
                   std::function<bool(const std::string& line)> excluder = {});
    void line(const std::string& line, std::optional<double> arrival);
    StepLog& log() { return log_; }

  private:
    std::string step_prefix_, summary_prefix_;
    std::function<bool(const std::string&)> excluder_;
    bool exclude_next_ = false;
    StepLog log_;
};

StepLog parse_step_log(const std::string& text, const std::string& step_prefix,
                       const std::string& summary_prefix,
                       const std::function<bool(const std::string& line)>& excluder = {},
                       const std::vector<double>* line_times = nullptr);

nlohmann::json to_json(const StepSample& s);
StepSample step_from_json(const nlohmann::json& j); // throws nlohmann::json errors on missing keys

} // namespace infrarsi::measure
