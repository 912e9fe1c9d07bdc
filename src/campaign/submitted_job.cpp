// The submitted job as the doctor's first run. A campaign started from a tune request (tune_intake.cpp)
// knows the job the user submitted with `sbatch --infrarsi=tune`: it ran the baseline as the user runs it.
// It becomes a batch of kind "submitted" with one doctor trial and the job's own id, awaited through Slurm
// whichever scheduler the campaign's trials use. When it has ended, its output (the job's StdOut, as Slurm
// named it while the job was known) is copied into the trial's log.txt and a result.json is written from
// its Slurm record, so ingest reads it like any trial's.
#include "campaign/doctor_stage.hpp"

#include "measure/log_format.hpp"
#include "slurm/client.hpp"
#include "trial/result.hpp"
#include "util/atomic_file.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"

#include <fmt/core.h>

#include <sys/stat.h>
#include <unistd.h>

namespace infrarsi::campaign {

namespace fs = std::filesystem;

using store::TrialKind;
using store::TrialRow;

namespace {
// At most this much of the job's output is read: a job's step lines are at its start.
constexpr std::size_t kMaxSubmittedOutput = 64u << 20;
} // namespace

std::optional<std::int64_t> DoctorStage::adopt_submitted_job(const RunOptions& o) {
    const auto job = c_.store.meta("tune_job_id");
    if (!job || c_.store.campaign_run().submitted_job) return std::nullopt; // not a tune campaign, or decided
    auto not_adopted = [&](const std::string& why) -> std::optional<std::int64_t> {
        c_.store.set_submitted_job("not adopted: " + why);
        host_.say(o, fmt::format("doctor: the submitted job {} is not a baseline run: {}", *job, why));
        return std::nullopt;
    };
    slurm::Client client;
    std::string why;
    if (!client.reachable(&why)) return not_adopted("Slurm does not answer (" + why + ")");
    const auto output = client.output_file(*job);
    if (!output) return not_adopted("Slurm no longer knows the job or where its output went");

    store::Transaction tx(c_.store.db());
    const auto batch_id = c_.store.add_batch(store::BatchKind::Submitted, "");
    const fs::path tdir = c_.dir / "batches" / std::to_string(batch_id) / "0";
    fs::create_directories(tdir);
    TrialRow row;
    row.batch_id = batch_id;
    row.kind = TrialKind::Doctor;
    const auto baseline = c_.contract.space.baseline();
    row.candidate = baseline.to_json();
    row.candidate_key = baseline.key();
    row.reason = fmt::format("the submitted job {} (sbatch --infrarsi=tune), run as the user runs it", *job);
    row.array_index = 0;
    row.result_path = (tdir / "result.json").string();
    row.id = c_.store.add_trial(row);
    store::ArrayRow array;
    array.tasks = 1;
    c_.store.add_array(batch_id, array);
    c_.store.set_submitted_job("adopted", *output);
    tx.commit();
    // In their own transactions; a crash before them leaves the batch planned, which BatchRunner::submit
    // completes.
    c_.store.set_array_submitted(batch_id, 0, *job);
    c_.store.set_batch_submitted(batch_id);
    host_.say(o, fmt::format("doctor: the submitted job {} is the first baseline run (its output: {})", *job,
                             *output));
    return batch_id;
}

void DoctorStage::take_submitted_output(const TrialRow& t, const slurm::JobRecord& rec) {
    const fs::path result = t.result_path, log = result.parent_path() / "log.txt";
    if (fs::exists(result)) return; // taken already (a restart between this and the ingest's commit)
    const std::string output = c_.store.campaign_run().submitted_job_output.value_or("");
    std::string text;
    try {
        // The job's own file, read by its own user: the campaign runs as the user who submitted the job.
        struct stat st {};
        if (::lstat(output.c_str(), &st) == 0 && st.st_uid != ::geteuid())
            throw Error(fmt::format("{} is owned by uid {}, not by this campaign's uid {}", output, st.st_uid,
                                    ::geteuid()));
        text = read_regular_file(output, {.max_bytes = kMaxSubmittedOutput, .follow_symlink = false});
    } catch (const Error& e) {
        c_.store.log(
            fmt::format("trial {}: the submitted job's output could not be read: {}", t.id, e.what()));
    }
    write_file_atomically(log, text);
    trial::Result r;
    r.trial_id = std::to_string(t.id);
    r.index = 0;
    r.exit_code = rec.exit_code;
    r.signal = rec.exit_signal;
    r.wall_s = rec.elapsed_s;
    r.log = log.string();
    // The job ran as many steps as the user asked; the campaign's trials run invariants.steps.
    r.steps = measure::parse_log(text, c_.contract.metrics);
    if (static_cast<int>(r.steps.steps.size()) > c_.contract.invariants.steps)
        r.steps.steps.resize(static_cast<std::size_t>(c_.contract.invariants.steps));
    r.slurm = {{"SLURM_JOB_ID", rec.job_id}, {"SLURMD_NODENAME", rec.node_list}};
    trial::write_result(result, r);
}

scheduler::Scheduler& DoctorStage::slurm_for_submitted_job() {
    if (!submitted_job_scheduler_) submitted_job_scheduler_ = scheduler::slurm_scheduler();
    return *submitted_job_scheduler_;
}

} // namespace infrarsi::campaign
