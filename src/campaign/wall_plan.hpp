#pragma once
// Wall-time planning, read by the search (whether another batch fits), verification (how many pairs fit)
// and ablation (how many rounds fit).
#include <string>

namespace infrarsi::campaign {

// What a campaign has used of its budget (Campaign::budget_use).
struct BudgetUse {
    int trials = 0;        // counted search trials (planned, running or finished)
    double node_hours = 0; // all trials
    double wall_s = 0;     // since the first run
    std::string exhausted; // which limit ended the search, empty while budget is left
};

// Wall-time planning. Verification runs after the search, one trial at a time, so the search must stop early
// enough to leave it room within the wall-time budget. A trial's wall time is estimated from the doctor's
// baseline (a verification pair is a baseline run and a faster candidate run, so twice the baseline's trial
// bounds it) plus the overhead observed per trial (scheduling, start-up, the wrapper).
struct TrialCostModel {
    double step_s = 0;      // the baseline's steady-state step time (doctor median)
    double cold_step_s = 0; // its cold-start step time (the warm-up steps)
    int steps = 0;          // the contract's invariants.steps
    int warmup_steps = 0;
    double overhead_s = 0;  // observed per trial beyond its steps
    double steps_s() const; // the steps of one trial
    double trial_s() const; // one trial running alone: steps + overhead
};

// Wall time of verifying `candidates` candidates with `pairs` interleaved A/B pairs each (2 trials a pair,
// one at a time; a re-check's pairs counted in `pairs`) and `equivalence_checks` of them with a patch set
// still to check (equivalence_stage.cpp: 2 trials each). 0 when there is nothing to run.
double verification_wall_s(const TrialCostModel& m, int candidates, int pairs, int equivalence_checks = 0);

// How many of `pairs` A/B pairs of one candidate fit in `wall_left_s` (0..pairs). All of them when the
// model has no estimate (trial_s() == 0).
int affordable_pairs(const TrialCostModel& m, double wall_left_s, int pairs);

// Whether the search may start another batch: the wall time used, that batch and the verification reserve
// must fit in the budget (budget_s <= 0: no wall-time limit).
struct SearchWallPlan {
    double next_batch_s = 0;     // estimated wall time of the next search batch
    double verify_reserve_s = 0; // verification_wall_s of the candidates it may have to verify
    int verify_candidates = 0;
    int equivalence_checks = 0; // of those, patch sets not checked yet
    int pairs = 0;              // A/B pairs planned a candidate, its re-check's included
    bool fits(double used_s, double budget_s) const {
        return budget_s <= 0 || used_s + next_batch_s + verify_reserve_s <= budget_s;
    }
};

} // namespace infrarsi::campaign
