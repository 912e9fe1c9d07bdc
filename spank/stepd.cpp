// slurmstepd (remote context, root): record mode's per-node record, tune mode's request, trial mode's
// environment and the containment of every step of a trial job. What runs as root reads nothing a user
// names; the manifest is read in user_init, where slurmstepd has dropped to the job's user, and in each
// task's task_init (containment), where the task runs as the user, so the user's own permissions apply.
#include "context.hpp"
#include "node_identity.hpp"
#include "spool.hpp"
#include "submit_args.hpp"
#include "trial/evidence.hpp"
#include "trial/isolation.hpp"
#include "trial/manifest.hpp"
#include "trial/memory_peak.hpp"
#include "trial/result.hpp"
#include "trial/tune_request.hpp"

#include "node/allocation_record.hpp"
#include "node/calibration.hpp"
#include "node/topology.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"
#include "util/file_digest.hpp"
#include "util/number.hpp"
#include "util/privilege.hpp"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <infrarsi/build_info.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <pwd.h>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace infrarsi::spank {
namespace {

constexpr uint32_t kBatchStep = 0xfffffffb; // SLURM_BATCH_SCRIPT (slurm.h)
constexpr uint32_t kNoVal = 0xfffffffe;     // NO_VAL: Slurm's "not an array task"
constexpr int kTrialSettingsExit = 97;      // a trial task whose manifest entry could not be applied
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
    if (ctx.config.gpu == GpuProbe::yes ||
        (ctx.config.gpu == GpuProbe::automatic && node::has_nvidia_device_files())) {
        node::GpuProbeOptions g;
        g.budget = ctx.config.gpu_calibration;
        g.library_dirs = ctx.config.cuda_library_dirs;
        // In a forked child killed at its budget: CUDA must not start in slurmstepd itself.
        r.gpu = node::probe_gpus_bounded(g);
        // The node's GPUs together, where the site asks and there is more than one to reduce over.
        if (ctx.config.nccl_allreduce && r.gpu->status == node::GpuProbeStatus::ok &&
            r.gpu->gpus.size() > 1) {
            node::NcclProbeOptions n;
            n.budget = ctx.config.nccl_allreduce_budget;
            n.library_dirs = ctx.config.cuda_library_dirs;
            r.nccl_allreduce = node::probe_nccl_allreduce_node(n);
        }
    }
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
    // Root's, readable by the job's group (its user's daemon reads it), not by others: it names their files.
    gid_t gid = 0;
    spank_get_item(sp, S_JOB_GID, &gid);
    if (write_new_file(ctx.config.spool + "/tune", std::to_string(r.job_id) + ".json", j.dump(2) + "\n", 0640,
                       gid))
        slurm_info("infrarsi: tune request for job %u written to %s/tune", r.job_id,
                   ctx.config.spool.c_str());
}

double clock_s(clockid_t id) {
    timespec ts{};
    ::clock_gettime(id, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The job as the orchestrator names it: "ARRAYJOB_TASK" for an array task, else "JOB".
std::string job_name_of(spank_t sp) {
    if (auto task = array_task(sp))
        return std::to_string(item_u32(sp, S_JOB_ARRAY_ID)) + "_" + std::to_string(*task);
    return std::to_string(item_u32(sp, S_JOB_ID));
}

} // namespace

int stepd_init_post_opt(spank_t sp, Context& ctx) {
    Mode mode = ctx.effective_mode();
    if (mode.kind == ModeKind::off) return 0;
    // Trial evidence for a trial job's batch step: --infrarsi=trial, or a job the orchestrator submitted
    // (its manifest in the environment) under the site's record mode. A user who sets the variable only gets
    // a record of their own job.
    if (item_u32(sp, S_JOB_STEPID) == kBatchStep &&
        (mode.kind == ModeKind::trial || !job_env(sp, "INFRARSI_MANIFEST").empty())) {
        ctx.trial_run.wanted = true;
        ctx.trial_run.job = job_name_of(sp);
    }

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

// The task's result.json and log.txt, for the end record's digests (a trial job's batch step only).
void keep_trial_files(Context& ctx, const trial::Manifest& m, uint32_t index) {
    if (!ctx.trial_run.wanted) return;
    const auto& task = m.task(index);
    ctx.trial_run.result_path = task.result;
    ctx.trial_run.log_path = task.log;
}

int stepd_user_init(spank_t sp, Context& ctx) {
    if (ctx.effective_mode().kind != ModeKind::trial) {
        // Record mode's evidence of a job the orchestrator submitted: its files too, where its manifest reads
        // (as the user: privileges are dropped here); record mode never fails a job.
        if (ctx.trial_run.wanted) try {
                const std::string path = job_env(sp, "INFRARSI_MANIFEST");
                keep_trial_files(ctx, trial::read_manifest(path), array_task(sp).value_or(0));
            } catch (const std::exception& e) {
                slurm_verbose("infrarsi: trial evidence without file digests: %s", e.what());
            }
        return 0;
    }
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
    keep_trial_files(ctx, m, index);
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
    if (ctx.effective_mode().kind == ModeKind::trial) {
        // A trial that did not get its settings must not run the script's defaults (the baseline) and end
        // COMPLETED: under `optional` Slurm ignores the -1 below, so the task ends here, in its own process
        // (task_init runs in the forked task before exec), saying why on its stderr.
        std::fprintf(stderr, "infrarsi: trial not run: %s\n", ctx.deferred_error.c_str());
        std::fflush(stderr);
        ::_exit(kTrialSettingsExit);
    }
    return -1;
}

int stepd_task_post_fork(spank_t sp, Context& ctx) {
    auto& run = ctx.trial_run;
    if (!run.wanted || run.started) return 0;
    run.started = true;
    run.start_epoch = clock_s(CLOCK_REALTIME);
    run.start_boot = clock_s(CLOCK_BOOTTIME);
    pid_t pid = 0;
    if (spank_get_item(sp, S_TASK_PID, &pid) == ESPANK_SUCCESS && pid > 0) {
        // The task's cgroup now, while it runs (proctrack/cgroup has placed it): its job_<id> ancestor.
        std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
        const std::string text((std::istreambuf_iterator<char>(in)), {});
        if (auto dir = trial::job_cgroup_dir(text, "/sys/fs/cgroup")) run.cgroup = dir->string();
    }
    return 0;
}

int stepd_task_exit(spank_t sp, Context& ctx) {
    auto& run = ctx.trial_run;
    if (!run.wanted || !run.started) return 0;
    run.wanted = false; // one record per batch step
    trial::TrialEvidence e;
    e.source = "plugin";
    e.job = run.job;
    e.node = this_node();
    e.start_epoch = run.start_epoch;
    e.end_epoch = clock_s(CLOCK_REALTIME);
    e.elapsed_s = clock_s(CLOCK_BOOTTIME) - run.start_boot;
    int status = 0;
    if (spank_get_item(sp, S_TASK_EXIT_STATUS, &status) == ESPANK_SUCCESS) {
        e.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
        e.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    }
    if (!run.cgroup.empty()) e.memory_peak_bytes = trial::cgroup_peak_bytes(run.cgroup);
    // What decides promotion, as it is now that the task has ended: read in a child dropped to the job's
    // user (root never opens a user's file), bounded in size and time (a FIFO or a huge file cannot hold
    // slurmstepd). A job that outlives the trial and rewrites them is found out at ingest.
    if (!run.result_path.empty() && !run.log_path.empty()) {
        uid_t uid = 0;
        gid_t gid = 0;
        if (spank_get_item(sp, S_JOB_UID, &uid) == ESPANK_SUCCESS &&
            spank_get_item(sp, S_JOB_GID, &gid) == ESPANK_SUCCESS) {
            Account account{uid, gid, "", "/"};
            if (auto a = lookup_account(uid)) account = Account{uid, gid, a->name, a->home};
            const auto d = digest_files_as(
                account,
                {{run.result_path, trial::kMaxResultBytes}, {run.log_path, trial::kMaxDigestLogBytes}},
                trial::kDigestTimeout);
            e.result_file = d[0];
            e.log_file = d[1];
        }
    }
    const std::string& spool = ctx.config.spool;
    ensure_safe_dir(spool);
    ensure_safe_dir(spool + "/trials");
    const std::string dir = trial::evidence_dir(spool, run.job).string();
    ensure_safe_dir(dir);
    const auto name = trial::evidence_file_prefix(run.job) +
                      std::to_string(static_cast<long long>(run.start_boot * 1e9)) + ".json";
    gid_t gid = 0; // root's, readable by the job's group (its orchestrator), not by every user
    spank_get_item(sp, S_JOB_GID, &gid);
    write_new_file(dir, name, trial::to_json(e).dump() + "\n", 0640, gid);
    slurm_verbose("infrarsi: trial evidence for job %s: %.3f s, exit %d signal %d", run.job.c_str(),
                  e.elapsed_s, e.exit_code, e.signal);
    return 0;
}

namespace {

constexpr int kTrialNotContainedExit = 98; // a trial task that could not enter its private view

// The batch step's marker for its job's later steps: "<array index>\n<manifest path>\n", root's, 0600.
std::string contain_marker_dir(const Context& ctx) {
    return ctx.config.spool + "/contain";
}

// The marker of job `job`, when the batch step left one: only a root-owned regular file nobody else may
// write, in the safe spool, counts (nothing a user planted decides how a job's steps run).
std::optional<std::pair<uint32_t, std::string>> read_contain_marker(const Context& ctx, uint32_t job) {
    const std::string dir = contain_marker_dir(ctx);
    const std::string path = dir + "/" + std::to_string(job);
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return std::nullopt;
    try {
        ensure_safe_dir(ctx.config.spool);
        ensure_safe_dir(dir);
        if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 022))
            throw Error("not a marker the plugin wrote (owner, type or mode)", path);
    } catch (const std::exception& e) {
        // Where others could have planted it, it decides nothing (nor could the batch step have written it).
        slurm_error("infrarsi: job %u: containment marker ignored: %s", job, e.what());
        return std::nullopt;
    }
    const std::string text = read_regular_file(path, {8192, false});
    const auto nl = text.find('\n');
    const auto index = parse_integer<uint32_t>(text.substr(0, nl));
    std::string manifest = nl == std::string::npos ? "" : text.substr(nl + 1);
    if (!manifest.empty() && manifest.back() == '\n') manifest.pop_back();
    if (!index || !valid_path_value(manifest)) throw Error("malformed containment marker", path);
    return std::pair{*index, manifest};
}

} // namespace

int stepd_contain_init(spank_t sp, Context& ctx) {
    auto& c = ctx.contain;
    const Mode mode = ctx.effective_mode();
    const uint32_t job = item_u32(sp, S_JOB_ID);
    const bool batch = item_u32(sp, S_JOB_STEPID) == kBatchStep;
    const std::string env_manifest = job_env(sp, "INFRARSI_MANIFEST");
    try {
        if (!batch) {
            // A later step of a trial job (srun, srun --overlap): contained whatever its own environment or
            // --infrarsi says, which its user may have cleared.
            if (auto marker = read_contain_marker(ctx, job)) {
                c = {true, true, marker->second, marker->first};
                return 0;
            }
        }
    } catch (const std::exception& e) {
        c = {true, true, {}, 0};
        slurm_error("infrarsi: job %u: containment marker: %s", job, e.what());
        return 0;
    }
    // A trial job as the evidence counts one (stepd_init_post_opt): --infrarsi=trial, or the manifest the
    // orchestrator submits under the site's record mode.
    const bool trial = mode.kind == ModeKind::trial || (mode.kind != ModeKind::off && !env_manifest.empty());
    if (!trial || env_manifest.empty()) return 0;
    c = {true, mode.kind == ModeKind::trial, env_manifest, array_task(sp).value_or(0)};
    if (!batch) return 0;
    // For the job's later steps, whose environment is the user's to clear.
    try {
        ensure_safe_dir(ctx.config.spool);
        ensure_safe_dir(contain_marker_dir(ctx));
        c.marker_written = write_new_file(contain_marker_dir(ctx), std::to_string(job),
                                          std::to_string(c.index) + "\n" + env_manifest + "\n", 0600);
    } catch (const std::exception& e) {
        // Its later steps are then contained only while they keep the variables: a trial-mode job must not
        // run so (task_init refuses it); under record mode it is logged.
        slurm_error("infrarsi: job %u: containment marker not written: %s", job, e.what());
        if (c.required) ctx.deferred_error = std::string("containment marker not written: ") + e.what();
    }
    return 0;
}

int stepd_contain_task(spank_t sp, Context& ctx) {
    const auto& c = ctx.contain;
    if (!c.wanted) return 0;
    // A trial task that cannot be contained never runs: it ends here, before the job's program, saying why on
    // its stderr (under `optional` Slurm would ignore an error return).
    auto refuse = [&](const std::string& why) {
        std::fprintf(stderr, "infrarsi: trial step not run: it cannot be contained: %s\n", why.c_str());
        std::fflush(stderr);
        ::_exit(kTrialNotContainedExit);
    };
    std::optional<trial::Manifest> m;
    try {
        if (c.manifest.empty()) throw Error("no manifest for this job's steps");
        m = trial::read_manifest(c.manifest);
        m->task(c.index); // throws when it has no entry for this task
    } catch (const std::exception& e) {
        if (c.required) refuse(e.what());
        // Record mode with a stray INFRARSI_MANIFEST: not a trial we can tell; the job runs.
        slurm_error("infrarsi: step not contained: %s", e.what());
        return 0;
    }
    try {
        // As the job's user now (slurmstepd has switched to it for the task): the user's own permissions
        // apply to everything the plan reads and to the namespace (an unprivileged user namespace).
        trial::ContainmentSite site;
        struct passwd pw {
        }, *found = nullptr;
        char buf[4096];
        if (getpwuid_r(::getuid(), &pw, buf, sizeof buf, &found) == 0 && found && found->pw_dir)
            site.home = found->pw_dir;
        site.bank = trial::bank_files([&](const char* name) { return job_env(sp, name); }, site.home);
        for (const auto& r : ctx.config.campaign_roots)
            site.roots.emplace_back(r);
        site.spool = ctx.config.spool;
        if (const auto bin = job_env(sp, "INFRARSI_BIN"); !bin.empty() && bin[0] == '/')
            site.inputs.emplace_back(bin);
        const auto iso = trial::contain(c.manifest, m->task(c.index), site);
        if (!iso) return 0; // a manifest written by hand, outside any campaign: nothing to hide
        // A campaign's trial: run contained or not at all.
        if (!iso->in_place) refuse(iso->detail);
        slurm_verbose("infrarsi: job %u step %u contained: %s", item_u32(sp, S_JOB_ID),
                      item_u32(sp, S_JOB_STEPID), iso->detail.c_str());
    } catch (const std::exception& e) {
        refuse(e.what());
    }
    return 0;
}

int stepd_contain_exit(spank_t sp, Context& ctx) {
    if (!ctx.contain.marker_written) return 0;
    ctx.contain.marker_written = false;
    const std::string path = contain_marker_dir(ctx) + "/" + std::to_string(item_u32(sp, S_JOB_ID));
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) throw Error(std::strerror(errno), path);
    return 0;
}

} // namespace infrarsi::spank
