#pragma once
// The doctor's result: the baseline every later trial is compared with, typed. Stored as JSON in the
// campaign store (table doctor); the report prints the same keys (without the reference losses).
#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::store {

struct Baseline {
    int repeats = 0;   // doctor runs
    int completed = 0; // of which measured every step
    nlohmann::json runs =
        nlohmann::json::array();          // per run: trial, node, outcome, step_s, cold_step_s, detail
    double median_step_s = 0;             // steady-state step time, median over the runs
    double cold_step_s = 0;               // warm-up step time, median over the runs
    double cold_overhead = 0;             // cold_step_s / median_step_s
    double cv_between = 0;                // relative spread of the runs' medians (the noise that matters)
    double cv_within = 0;                 // median relative spread of steps within a run
    double minimum_detectable_effect = 0; // relative, at comparison_repeats runs per arm
    int comparison_repeats = 0;
    std::map<std::string, double> phases; // median seconds per step phase
    double tokens_per_s = 0;
    std::optional<double> mfu;
    // MFU's one denominator (peak FLOP/s of a trial's allocation) and where it came from ("contract", or the
    // doctor's measurement), and the baseline's model FLOPs per step: every MFU the report prints is
    // model_flops_per_step / step time / peak_flops with these two, so MFU ratios equal speed-ups.
    std::optional<double> peak_flops, model_flops_per_step;
    std::string peak_flops_source;
    // The peak is the one the job's own MFU figure implies (its model FLOPs / its step time / its MFU): an
    // assumption of the job (nanoGPT's is an A100's 312 TFLOP/s whatever it runs on), not a measurement of
    // this hardware; an MFU over it is the job's claim, and the report says so.
    bool peak_flops_by_job = false;
    std::optional<double> peak_memory_bytes;
    std::vector<double> reference_losses; // per step: what the loss invariant compares with
    std::vector<double> eval_losses; // final evaluation loss per completed run (final_eval: one seed each)
};

nlohmann::json to_json(const Baseline& b);
// Throws infrarsi::Error naming the first missing or mistyped key.
Baseline baseline_from_json(const nlohmann::json& j);

} // namespace infrarsi::store
