#pragma once
// The doctor stage, one part of a campaign (doctor_stage.cpp, submitted_job.cpp, nccl_check.cpp): run the
// baseline `repeats.doctor` times (the job a user submitted with --infrarsi=tune as the first run), turn the
// runs into the typed Baseline every later stage uses (step time, cold start, phases, noise and minimum
// detectable effect, reference losses, MFU), find the slow nodes, and pause a campaign whose noise stays too
// high to promote a real gain. It sees its Context (the campaign's directory, contract and store, and the
// batch runner its batches run through) and asks the rest of the campaign through DoctorStage::Host.
#include "campaign/batch_runner.hpp"
#include "campaign/run_options.hpp"
#include "contract/contract.hpp"
#include "node/allocation_record.hpp"
#include "scheduler/scheduler.hpp"
#include "store/campaign_store.hpp"
#include "verify/verify.hpp"

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::campaign {

// The doctor's verdict on the baseline's noise: noisy when its minimum detectable effect is above `limit`,
// max(kNoisyMde, min_speedup): no gain of a usual size (most tuning wins are 10-30%) could be promoted.
inline constexpr double kNoisyMde = 0.25;
struct NoiseCheck {
    bool noisy = false;
    double limit = 0;
    std::string why; // for people, when noisy
};
NoiseCheck check_noise(const store::Baseline& d, double min_speedup);

class DoctorStage {
  public:
    struct Context {
        std::filesystem::path dir;
        const contract::Contract& contract;
        store::CampaignStore& store;
        BatchRunner& batches;
    };
    class Host {
      public:
        virtual bool stopping(const RunOptions& o) = 0;
        virtual void say(const RunOptions& o, const std::string& msg) = 0;

      protected:
        ~Host() = default;
    };

    // Registers the doctor's batch kinds with the batch runner.
    DoctorStage(Context c, Host& host);

    // Runs (or re-attaches to) the doctor's batches; no-op when done. After it: a baseline too noisy to
    // promote a real gain is re-measured once, one job at a time; still too noisy, the campaign pauses
    // (paused()) unless RunOptions::accept_noise.
    void run(const RunOptions& o);
    // Why the campaign is paused, or nullopt; `infrarsi run --accept-noise` goes on.
    std::optional<std::string> paused();
    // Empty, or a warning for people when the doctor's noise leaves only very large speed-ups promotable.
    std::string noise_warning();
    double mde();                           // the baseline's minimum detectable effect; 5% before the doctor
    std::vector<double> reference_losses(); // the baseline's losses step by step, which a trial's follow
    // The doctor's nodes whose GPUs are more than 1.5x slower than the median node's (node::slow_gpu_nodes),
    // kept in the campaign and left out of every later array; nodes_to_avoid: those of them to keep this
    // campaign's jobs off now (scheduler::nodes_to_avoid over the partition's nodes).
    std::vector<std::string> slow_nodes();
    std::vector<std::string> nodes_to_avoid(scheduler::Scheduler& sched);
    // The job submitted with --infrarsi=tune (submitted_job.cpp): its output into its trial's log.txt, its
    // Slurm record into result.json, so ingest reads it like any trial's; and the Slurm it is awaited
    // through whatever runs the trials.
    void take_submitted_output(const store::TrialRow& t, const slurm::JobRecord& rec);
    scheduler::Scheduler& slurm_for_submitted_job();

  private:
    // The baseline from the doctor's runs (`remeasure`: from that re-measurement batch's runs alone).
    void finish(std::optional<std::int64_t> remeasure = std::nullopt);
    std::vector<Task> baseline_tasks(int adopted, const std::string& why) const; // its repeats
    void pause_if_noisy(const RunOptions& o); // run's last step, described there
    // nccl_check.cpp: the baseline's NCCL transports against the nodes' NICs, for a job that uses NCCL;
    // throws (or logs, with [nccl] fallback = "warn") when NCCL fell back to a slower transport.
    void check_nccl_transport(const std::vector<store::TrialRow>& doctor_runs);
    // The job submitted with --infrarsi=tune as the doctor's first run: its batch, made now, or nullopt (not
    // a tune campaign, adopted before, or Slurm no longer knows it: said why).
    std::optional<std::int64_t> adopt_submitted_job(const RunOptions& o);
    // The MFU denominator from a calibration of the doctor's hardware: the plugin's allocation records of
    // its runs, or this host's for the local scheduler; nullopt when there is none.
    std::optional<verify::PeakFlops> calibration_peak(const std::vector<store::TrialRow>& doctor_runs);
    // The plugin's records of these runs' allocations (Slurm with a spool; empty otherwise).
    std::vector<node::AllocationRecord> allocation_records(const std::vector<store::TrialRow>& runs);
    void find_slow_nodes(const std::vector<store::TrialRow>& doctor_runs);

    Context c_;
    Host& host_;
    std::unique_ptr<scheduler::Scheduler> submitted_job_scheduler_;
};

} // namespace infrarsi::campaign
