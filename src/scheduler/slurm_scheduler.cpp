// The Slurm backend: slurm::Client, with the campaign's submission conventions (held, then released; no
// Slurm requeue unless the contract asks for it).
#include "scheduler/scheduler.hpp"
#include "slurm/client.hpp"
#include "slurm/plugstack.hpp"
#include "util/error.hpp"
#include "util/process.hpp"

#include <fmt/format.h>

#include <cstdlib>

namespace infrarsi::scheduler {
namespace {

class SlurmScheduler final : public Scheduler {
  public:
    std::string name() const override { return "slurm"; }
    bool reachable(std::string* why) const override { return client_.reachable(why); }

    std::string submit_held(const ArrayJob& job) override {
        // A previous process may have died between sbatch and recording the job id: its job is still held
        // (never released), so it is cancelled by name. Nothing of it ran.
        run_process({"scancel", "--name", job.name, "--state", "PENDING"});
        slurm::SubmitRequest r;
        r.script = job.script.string();
        r.job_name = job.name;
        r.partition = job.partition;
        r.nodes = job.nodes;
        r.ntasks_per_node = job.ntasks_per_node;
        r.cpus_per_task = job.cpus_per_task;
        r.mem = job.mem;
        r.time_limit = job.time_limit;
        r.array =
            fmt::format("{}-{}%{}", job.first_index, job.first_index + job.tasks - 1, job.max_concurrent);
        r.output = job.output;
        r.workdir = job.workdir.string();
        r.env = job.env;
        r.extra_args = job.sbatch_args;
        if (!job.after.empty()) r.extra_args.push_back("--dependency=afterany:" + job.after);
        // A knob's option replaces the contract's resource of the same name (one value on sbatch's line).
        for (const auto& o : job.options) {
            if (o.rfind("--ntasks-per-node=", 0) == 0) r.ntasks_per_node.reset();
            if (o.rfind("--cpus-per-task=", 0) == 0) r.cpus_per_task.reset();
            r.extra_args.push_back(o);
        }
        for (const auto& o : job.placement)
            r.extra_args.push_back(o);
        r.hold = true;
        // The orchestrator owns re-queueing: a trial whose node fails ends NODE_FAIL, is recorded
        // node_failure (not counted) and goes into the next batch at once. Slurm's own requeue would re-run
        // the same array task only after its requeue delay (BeginTime, two minutes in 22.05) and hide the
        // failure. A contract that passes --requeue in sbatch_args gets Slurm's requeue; the task's last run
        // is then the one recorded.
        r.requeue = false;
        return client_.submit(r);
    }

    void release(const std::string& job_id) override { client_.release(job_id); }

    std::vector<slurm::JobRecord> wait(const std::string& job_id, std::chrono::seconds timeout,
                                       std::chrono::milliseconds poll) override {
        return client_.wait(job_id, timeout, poll);
    }

    void cancel(const std::string& job_id) override { client_.cancel(job_id); }

    std::vector<slurm::UserJob> jobs_submitted_since(double since_epoch) const override {
        return slurm::user_jobs_submitted_since(since_epoch, client_.accounting_works());
    }

    std::vector<std::string> nodes(const std::string& partition) const override {
        std::vector<std::string> argv = {"sinfo", "-h", "-N", "-o", "%N %t"};
        if (!partition.empty()) argv.push_back("--partition=" + partition);
        const auto r = run_process(argv);
        return r.ok() ? slurm::parse_sinfo_nodes(r.out) : std::vector<std::string>{};
    }

    slurm::SpoolDiscovery plugin_spool(const std::string& given) const override {
        if (!given.empty()) return {given, "--spool"};
        const char* env = std::getenv(slurm::kSpoolEnv);
        std::map<std::string, std::string> config;
        try {
            config = client_.config();
        } catch (const Error& e) {
            if (!env || !*env) return {"", e.what()};
        }
        return slurm::discover_plugin_spool(given, env ? env : "", config);
    }

  private:
    slurm::Client client_;
};

} // namespace

std::unique_ptr<Scheduler> slurm_scheduler() {
    return std::make_unique<SlurmScheduler>();
}

} // namespace infrarsi::scheduler
