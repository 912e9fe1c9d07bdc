#pragma once
// All of the plugin's state, in one struct (one instance per process that loads the plugin: srun, sbatch,
// each slurmstepd), and the per-context entry points the dispatcher (plugin.cpp) calls.
#include "config.hpp"

#include <optional>
#include <string>

extern "C" {
#include <slurm/spank.h>
}

namespace infrarsi::spank {

struct Context {
    Config config;
    std::optional<std::string> option_text; // --infrarsi's value as first given (copied: optarg is not ours)
    std::optional<Mode> option;             // parsed option_text
    std::string deferred_error; // from user_init, reported by task_init (user_init's never reach srun)
    // Trial evidence (a trial job's batch step): set in init_post_opt, started in task_post_fork (root, in
    // slurmstepd), written in task_exit.
    struct TrialRun {
        bool wanted = false;
        std::string job; // "JOB" or "ARRAYJOB_TASK"
        double start_epoch = 0, start_boot = 0;
        std::string cgroup; // the job's memory cgroup directory, empty when not found
        // The task's result.json and log.txt, from its manifest entry (read in user_init, as the user): their
        // digests go into the end record. Empty: not known, the record has none.
        std::string result_path, log_path;
        bool started = false;
    } trial_run;

    // Containment (stepd.cpp, trial/isolation.hpp): every step of a trial job runs in the private view.
    // Decided in init_post_opt (root): by the marker the job's batch step left in the spool, else by the
    // step's own environment; entered in task_init, in each task, as the job's user.
    struct Containment {
        bool wanted = false;
        bool required = false; // a task whose manifest cannot be read does not run (else: logged, runs)
        std::string manifest;
        uint32_t index = 0;
        bool marker_written = false; // by this (batch) step: removed when it ends
    } contain;

    Mode effective_mode() const { return option ? *option : Mode{config.default_mode, {}}; }
};

Context& context();

// options.cpp: --infrarsi, registered in every context that parses or receives it.
int register_options(spank_t sp);

// submit.cpp: sbatch/salloc, before the job exists (runs as the submitting user): tune mode's script and
// contract. -1 refuses the submission.
int submit_tune(const Mode& mode);

// stepd.cpp: slurmstepd (root), per step and node.
int stepd_init_post_opt(spank_t sp, Context& ctx);  // record mode's node record, tune mode's request
int stepd_user_init(spank_t sp, Context& ctx);      // trial mode's environment (privileges dropped)
int stepd_task_init(spank_t sp, Context& ctx);      // reports errors kept from user_init
int stepd_task_post_fork(spank_t sp, Context& ctx); // trial evidence: the task's start (root)
int stepd_task_exit(spank_t sp, Context& ctx);      // trial evidence: its end, exit and memory peak (root)
int stepd_contain_init(spank_t sp, Context& ctx);   // containment: is this step a trial's (root)
int stepd_contain_task(spank_t sp, Context& ctx);   // containment: each task enters the view (the user)
int stepd_contain_exit(spank_t sp, Context& ctx);   // containment: the batch step removes its marker (root)

} // namespace infrarsi::spank
