// slurmstepd (remote context, root): record mode's per-node record, tune mode's request and trial mode's
// environment. What runs as root reads nothing a user names; the manifest is read in user_init, where
// slurmstepd has dropped to the job's user, so the user's own permissions apply to it.
#include "context.hpp"
#include "node_identity.hpp"
#include "spool.hpp"
#include "submit_args.hpp"
#include "trial/manifest.hpp"
#include "trial/tune_request.hpp"

#include "node/allocation_record.hpp"
#include "node/calibration.hpp"
#include "node/topology.hpp"
#include "util/error.hpp"

#include <chrono>
#include <infrarsi/build_info.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <pwd.h>
#include <string>
#include <unistd.h>

namespace infrarsi::spank {
namespace {

constexpr uint32_t kBatchStep = 0xfffffffb; // SLURM_BATCH_SCRIPT (slurm.h)
constexpr uint32_t kNoVal = 0xfffffffe;     // NO_VAL: Slurm's "not an array task"
// hwloc's load of the live machine takes well under a second on a node without OpenCL/GL components.
constexpr std::chrono::milliseconds kTopologyBudget{5000};

uint32_t item_u32(spank_t sp, spank_item_t item) {
    uint32_t v = 0;
    if (spank_get_item(sp, item, &v) != ESPANK_SUCCESS) return 0;
    return v;
}

std::string job_env(spank_t sp, const char* name) {
    char buf[4097];
    if (spank_getenv(sp, name, buf, sizeof buf) != ESPANK_SUCCESS) return {};
    return buf;
}

// The array task id, nullopt for a job that is not an array task (Slurm says NO_VAL, or leaves the array
// job id 0).
std::optional<uint32_t> array_task(spank_t sp) {
    uint32_t job = item_u32(sp, S_JOB_ARRAY_ID), task = item_u32(sp, S_JOB_ARRAY_TASK_ID);
    if (job == 0 || job == kNoVal || task == kNoVal || task == 0xffffffff) return std::nullopt;
    return task;
}

void write_record(spank_t sp, const Context& ctx, const Mode& mode) {
    using Clock = std::chrono::steady_clock;
    auto t0 = Clock::now();
    const uint32_t job = item_u32(sp, S_JOB_ID);
    const std::string node = this_node();
    const std::string& spool = ctx.config.spool;

    ensure_safe_dir(spool);
    ensure_safe_dir(spool + "/markers");
    // Once per node per allocation: the first step on this node claims it, later steps pay one open(2).
    if (!claim_marker(spool + "/markers/" + std::to_string(job) + "." + safe_component(node))) return;

    node::AllocationRecord r;
    r.job_id = job;
    if (auto task = array_task(sp)) {
        r.array_job_id = item_u32(sp, S_JOB_ARRAY_ID);
        r.array_task_id = *task;
    }
    r.step_id = item_u32(sp, S_JOB_STEPID);
    r.node = node;
    r.time = node::utc_now_iso8601();
    r.mode = mode.kind == ModeKind::tune ? "tune" : mode.kind == ModeKind::trial ? "trial" : "record";
    r.plugin_version = build::version;
    // In a child process, killed past its budget: a hung driver must not hold the job's start.
    r.topology = node::topology_from_live(kTopologyBudget);
    node::CalibrationOptions opts;
    opts.budget = ctx.config.calibration;
    opts.repeats = 5;
    // Small enough not to matter to a job's memory limit (slurmstepd shares the job's cgroup).
    opts.memory_bytes = 24u << 20;
    opts.nccl = ctx.config.nccl;
    r.calibration = node::calibrate(opts);
    r.record_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    node::append_record(spool + "/allocations.jsonl", r);
    slurm_verbose("infrarsi: recorded job %u on %s in %.0f ms", job, node.c_str(), r.record_ms);
}

void write_tune_request(spank_t sp, const Context& ctx) {
    trial::TuneRequest r;
    r.job_id = item_u32(sp, S_JOB_ID);
    uid_t uid = 0;
    spank_get_item(sp, S_JOB_UID, &uid);
    r.uid = uid;
    struct passwd pw {
    }, *found = nullptr;
    char buf[4096];
    if (getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found) r.user = found->pw_name;
    r.contract = job_env(sp, "INFRARSI_TUNE_CONTRACT");
    r.script = job_env(sp, "INFRARSI_TUNE_SCRIPT");
    r.submit_dir = job_env(sp, "SLURM_SUBMIT_DIR");
    r.job_name = job_env(sp, "SLURM_JOB_NAME");
    r.node = this_node();
    r.time = node::utc_now_iso8601();
    r.plugin_version = build::version;
    if (!valid_path_value(r.contract))
        throw Error("tune mode: the job has no valid INFRARSI_TUNE_CONTRACT (submitted with --export=NONE?)",
                    "job " + std::to_string(r.job_id), "sbatch --infrarsi=tune[:CONTRACT] with --export=ALL");
    if (!r.script.empty() && !valid_path_value(r.script)) r.script.clear();
    // Validate what we are about to hand over exactly as the orchestrator will.
    auto j = trial::to_json(r);
    trial::tune_request_from_json(j);

    ensure_safe_dir(ctx.config.spool);
    ensure_safe_dir(ctx.config.spool + "/tune");
    // A requeued job runs its batch step again: the first request stands.
    if (write_new_file(ctx.config.spool + "/tune", std::to_string(r.job_id) + ".json", j.dump(2) + "\n"))
        slurm_info("infrarsi: tune request for job %u written to %s/tune", r.job_id,
                   ctx.config.spool.c_str());
}

} // namespace

int stepd_init_post_opt(spank_t sp, Context& ctx) {
    Mode mode = ctx.effective_mode();
    if (mode.kind == ModeKind::off) return 0;

    // Record mode never fails a job: its own failures are logged and the job runs.
    try {
        write_record(sp, ctx, mode);
    } catch (const std::exception& e) {
        slurm_error("infrarsi: record skipped: %s", e.what());
    }

    if (mode.kind == ModeKind::tune && item_u32(sp, S_JOB_STEPID) == kBatchStep) {
        try {
            write_tune_request(sp, ctx);
        } catch (const std::exception& e) {
            // The user asked for a campaign: not starting one silently would be worse than saying so.
            ctx.deferred_error = e.what();
        }
    }
    return 0;
}

int stepd_user_init(spank_t sp, Context& ctx) {
    if (ctx.effective_mode().kind != ModeKind::trial) return 0;
    const uint32_t job = item_u32(sp, S_JOB_ID);
    const std::string where = "job " + std::to_string(job);
    const std::string path = job_env(sp, "INFRARSI_MANIFEST");
    if (path.empty())
        throw Error("--infrarsi=trial needs INFRARSI_MANIFEST in the job's environment", where,
                    "the batch manifest's absolute path, as the orchestrator submits it");
    // A non-array job is a batch of one: index 0.
    const uint32_t index = array_task(sp).value_or(0);
    const trial::Manifest m = trial::read_manifest(path);
    auto env = trial::trial_environment(m, index);
    for (const auto& [name, value] : env) {
        if (spank_setenv(sp, name.c_str(), value.c_str(), 1) != ESPANK_SUCCESS)
            throw Error("cannot set " + name + " in the job's environment", where);
    }
    slurm_verbose("infrarsi: trial %s (index %u) of campaign %s: %zu variables set",
                  env["INFRARSI_TRIAL_ID"].c_str(), index, m.campaign.c_str(), env.size());
    return 0;
}

int stepd_task_init(spank_t, Context& ctx) {
    if (ctx.deferred_error.empty()) return 0;
    slurm_error("infrarsi: %s", ctx.deferred_error.c_str());
    return -1;
}

} // namespace infrarsi::spank
