#pragma once
// Noise calibration: the spread of the baseline across repeats (and nodes) gives the smallest relative
// speed-up a comparison with n repeats per arm can claim (the minimum detectable effect).
#include <string>
#include <vector>

namespace infrarsi::measure {

struct NoiseModel {
    int repeats = 0;
    double median_step_s = 0;             // across repeats' steady medians
    double cv_between = 0;                // relative spread of the repeats' medians (the noise that matters)
    double cv_within = 0;                 // median relative spread of steps within a repeat
    double minimum_detectable_effect = 0; // relative, e.g. 0.05 = 5 %
    int comparison_repeats = 0;           // n per arm the MDE is computed for
};

// MDE of a two-sample comparison with n runs per arm at alpha = 0.05 (two-sided), power 0.8:
// (z_0.975 + z_0.8) * cv * sqrt(2 / n) (e.g. Lehr's rule; Cohen 1988, ch. 2), never below `floor`.
double minimum_detectable_effect(double cv, int n, double floor = 0.01);

// repeat_medians: steady-state median step time of each repeat; within_cvs: each repeat's step-level CV.
NoiseModel calibrate(const std::vector<double>& repeat_medians, const std::vector<double>& within_cvs,
                     int comparison_repeats);

} // namespace infrarsi::measure
