#pragma once
// How one `infrarsi run` (or a daemon's worker) drives a campaign: its options, which every part of the
// campaign that runs batches or says something reads.
#include <atomic>
#include <chrono>
#include <functional>
#include <string>

namespace infrarsi::campaign {

struct RunOptions {
    bool verbose = true;
    std::string proposer = "model";
    // Where trials run: "slurm", "local" or "auto" (Slurm when it answers, else local). A campaign keeps the
    // scheduler its first batch ran on.
    std::string scheduler = "auto";
    std::chrono::milliseconds poll{1000};
    // How long a task the scheduler answers without (not queued, running or ended anywhere it looks) is
    // waited for before it is taken as lost: its trial ends cancelled and its candidate is re-queued
    // (scheduler/lost_tasks.hpp). Covers accounting written after the queue forgot the job.
    std::chrono::seconds lost_grace{120};
    // How long a scheduler that has run no batch of this campaign may not answer before `run` stops with an
    // error (no Slurm on this host); one that has is waited for as long as it takes (a restart).
    std::chrono::seconds first_answer_wait{60};
    bool verify = true; // run the verification stage after the search
    // Go on with a baseline whose noise leaves only large speed-ups promotable, instead of pausing
    // (check_noise, doctor_stage.hpp).
    bool accept_noise = false;
    std::string bank;  // experience bank file: seeds the search, receives the findings; empty: none
    std::string spool; // the plugin's spool, whose allocation records name the hardware; empty: this host
    const std::atomic<bool>* stop = nullptr; // set by a signal handler: finish the current step and return
    // Set: each event goes here (after the store's log) instead of a line on stdout (the live status line
    // of report/progress.hpp); only while verbose.
    std::function<void(const std::string&)> on_event;
};

} // namespace infrarsi::campaign
