// Jobs a trial submits itself: the user's jobs submitted while a trial's job ran that the campaign did not
// submit (an sbatch or salloc from inside the workload runs outside the trial's private view, with the
// user's full access). Seen from what Slurm alone writes about each job (slurm/user_jobs.hpp: id, submit
// time, state; squeue, and accounting where it works), so a job that clears its environment is seen too.
// Recorded with the trial (Measurements::self_submitted_jobs) and shown in the report as a warning on it.
//
// A warning, not a violation: the attribution is by user and time only, and the user's own jobs of the same
// moment (another campaign, an interactive job) look the same; what a detached job could change of this
// trial's evidence is fixed where the job's uid cannot reach it (the plugin's end-of-task record), so the
// report names the jobs for a person to judge instead of failing trials for what the user did elsewhere.
#include "campaign/batch_runner.hpp"

#include "slurm/user_jobs.hpp"
#include "util/error.hpp"

#include <fmt/format.h>

namespace infrarsi::campaign {

std::vector<slurm::UserJob> BatchRunner::jobs_not_ours(const scheduler::Scheduler& sched,
                                                       std::int64_t batch_id) {
    const auto b = c_.store.batch(batch_id);
    if (b.submitted <= 0) return {};
    // Every job this campaign submitted, any batch (arrays' ids; the tune job the user submitted).
    std::vector<std::string> own;
    for (const auto& x : c_.store.batches()) {
        for (const auto& a : c_.store.arrays(x.id))
            if (!a.job_id.empty()) own.push_back(a.job_id);
        for (std::size_t p = 0; p < x.job_id.size();) {
            const auto comma = x.job_id.find(',', p);
            own.push_back(x.job_id.substr(p, comma == std::string::npos ? std::string::npos : comma - p));
            p = comma == std::string::npos ? x.job_id.size() : comma + 1;
        }
    }
    try {
        // Slurm's submit times have whole seconds.
        const double from = b.submitted - 1;
        return slurm::jobs_not_submitted_by(sched.jobs_submitted_since(from), own, from,
                                            store::now_seconds() + 1);
    } catch (const Error& e) {
        c_.store.log(
            fmt::format("batch {}: the user's other jobs could not be listed: {}", batch_id, e.what()));
        return {};
    }
}

std::vector<trial::SelfSubmittedJob> BatchRunner::self_submitted_during(const slurm::JobRecord& rec) const {
    std::vector<trial::SelfSubmittedJob> out;
    const auto start = slurm::slurm_time_epoch(rec.start_time);
    if (!start) return out;
    const double end = slurm::slurm_time_epoch(rec.end_time).value_or(store::now_seconds());
    for (const auto& j : user_jobs_)
        if (j.submitted_epoch >= *start - 1 && j.submitted_epoch <= end + 1)
            out.push_back({j.job_id, j.state, j.submitted});
    return out;
}

} // namespace infrarsi::campaign
