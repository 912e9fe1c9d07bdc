// The `infrarsi` command: parses arguments and calls the core library. No logic lives here.
#include "agent/exec.hpp"
#include "bank/experience_bank.hpp"
#include "campaign/campaign.hpp"
#include "campaign/campaign_lock.hpp"
#include "campaign/experience.hpp"
#include "contract/draft.hpp"
#include "node/calibration.hpp"
#include "node/gpu.hpp"
#include "node/gpu_libraries.hpp"
#include "node/nccl_allreduce.hpp"
#include "node/topology.hpp"
#include "report/bank_report.hpp"
#include "report/campaign_list.hpp"
#include "report/html.hpp"
#include "report/node_report.hpp"
#include "report/progress.hpp"
#include "report/report.hpp"
#include "trial/classify_job.hpp"
#include "trial/exec.hpp"
#include "util/error.hpp"
#include "util/exit_codes.hpp"
#include "util/fd.hpp"
#include "util/privilege.hpp"

#include "infrarsi/build_info.hpp"

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <optional>
#include <unistd.h>

namespace {
std::atomic<bool> stop_requested{false};
void on_signal(int) {
    stop_requested = true;
}

using namespace infrarsi;

// Every subcommand's options; several share some: the campaign directory, --json, the run options.
struct Options {
    std::string dir = "campaign";
    bool as_json = false;
    campaign::RunOptions ro;
    bool quiet = false, no_verify = false, no_bank = false;
    int scheduler_wait = static_cast<int>(campaign::RunOptions{}.first_answer_wait.count());
    std::vector<std::string> log_formats; // the names from the format table: a format added there is accepted
    // init, and init --from (the draft)
    std::string contract_file, from_script, draft_format, sample_log, draft_output, draft_goal, draft_agent;
    bool watch = false;       // status
    report::HtmlOptions html; // report
    std::string list_root = ".";
    report::ApplyOptions ao;
    std::string target, git_repo; // apply
    std::string bank_path, bank_file, spool;
    bool node_gpu = false, node_nccl = false;
    int node_calibration_ms = 300, node_gpu_ms = 5000, nccl_ms = 10000, nccl_mib = 256;
    std::string nccl_rendezvous;
    std::string manifest; // trial-exec
    int index = 0;
    agent::CallSpec agent_call;
    long long agent_time_limit = 600;
    trial::ClassifyRequest classify_request;
    std::string classify_format;
};

// The subcommands, each set once parsed.
struct Commands {
    CLI::App *init, *doctor, *run, *verify, *status, *report, *list, *cancel, *apply;
    CLI::App *bank, *bank_ingest, *bank_export, *bank_import, *bank_show;
    CLI::App *node, *nccl, *trial_exec, *agent_exec, *classify;
};

void add_dir(CLI::App* s, Options& o) {
    s->add_option("--dir,-d", o.dir, "campaign directory")->capture_default_str();
}

CLI::App* add_init(CLI::App& app, Options& o) {
    auto* init =
        app.add_subcommand("init", "create a campaign from a contract: directory, store, locked hashes");
    init->add_option("contract", o.contract_file, "the contract (TOML)");
    add_dir(init, o);
    init->add_option("--from", o.from_script,
                     "draft a contract from this batch script instead (written to --output; nothing is "
                     "initialized)");
    init->add_option("--format", o.draft_format, "with --from: the job's log format")
        ->check(CLI::IsMember(o.log_formats));
    init->add_option("--sample-log", o.sample_log,
                     "with --from: a sample of the job's output, to guess the format");
    init->add_option("--goal", o.draft_goal,
                     "with --from: what you want, in your words, for the agent ([agent] goal)");
    init->add_option("--agent", o.draft_agent,
                     "with --from: the agent's program ([agent] command, docs/agent.md)");
    init->add_option("--output,-o", o.draft_output,
                     "with --from: the draft's file (default: the script's name with .contract.toml)");
    return init;
}

// doctor, run and verify: the commands that drive a campaign.
void add_drive(CLI::App& app, Options& o, Commands& c) {
    auto& ro = o.ro;
    c.doctor = app.add_subcommand("doctor", "run the baseline repeats: cold start, phases, noise, MDE");
    add_dir(c.doctor, o);
    c.run = app.add_subcommand("run", "run the campaign in the foreground until its budget ends (resumable)");
    add_dir(c.run, o);
    c.run->add_option("--proposer", ro.proposer, "candidate proposer")->capture_default_str();
    c.run
        ->add_option(
            "--scheduler", ro.scheduler,
            "where trials run: slurm, local (child processes on this machine) or auto (Slurm when it "
            "answers, else local); a campaign keeps the one its first batch used")
        ->check(CLI::IsMember({"auto", "slurm", "local"}))
        ->capture_default_str();
    c.run
        ->add_option("--scheduler-wait", o.scheduler_wait,
                     "seconds a scheduler that has run no batch of this campaign may not answer before run "
                     "stops with an error (one that has is waited for: a restart)")
        ->check(CLI::Range(0, 86400))
        ->capture_default_str();
    c.run->add_flag("--no-verify", o.no_verify, "stop after the search, before verification");
    c.run->add_flag("--accept-noise", ro.accept_noise,
                    "go on with a baseline too noisy to promote a gain of a usual size (the campaign pauses "
                    "there otherwise)");
    c.run->add_option("--bank", ro.bank,
                      "experience bank to seed from and record into (default: $INFRARSI_BANK, "
                      "else ~/.local/share/infrarsi/bank.sqlite; INFRARSI_BANK=off: none)");
    c.run->add_flag("--no-bank", o.no_bank, "neither seed from nor record into the experience bank");
    for (auto* s : {c.doctor, c.run})
        s->add_option("--spool", ro.spool,
                      "the plugin's spool directory (its allocation records name the hardware; its trial "
                      "evidence is what the trials' step times are checked against)");
    for (auto* s : {c.doctor, c.run})
        s->add_flag("--quiet,-q", o.quiet, "print nothing but errors");
    c.verify = app.add_subcommand("verify", "re-verify the best candidates against the baseline (A/B/A/B)");
    add_dir(c.verify, o);
}

// status, report and list: the commands that read.
void add_views(CLI::App& app, Options& o, Commands& c) {
    c.status = app.add_subcommand("status", "progress, best so far, running/pending/failed counts");
    add_dir(c.status, o);
    c.status->add_flag("--json", o.as_json, "machine-readable");
    c.status->add_flag(
        "--watch,-w", o.watch,
        "follow the campaign until it is done: a live status line on a terminal, else one line "
        "per event");
    c.report = app.add_subcommand("report", "baseline vs promoted, audit paths, failure costs, budget");
    add_dir(c.report, o);
    c.report->add_flag("--json", o.as_json, "machine-readable");
    c.report->add_option(
        "--html", o.html.file,
        "also write the report as one self-contained HTML file with its plots (needs gnuplot)");
    c.report->add_option(
        "--html-dir", o.html.audit_dir,
        "with --html: copy the audit files (diffs, trial results and logs) here and link them "
        "relatively, so the page and this folder can be moved together");
    c.report->add_option(
        "--table", o.html.table,
        "with --html: a recorded table (tests/bench/tables) whose best is drawn on the progress "
        "plots");
    c.list = app.add_subcommand(
        "list", "the campaigns under a directory, with state, trials, best result and who drives them");
    c.list
        ->add_option("root", o.list_root,
                     "the directory (its entries and theirs: a daemon's --root holds ROOT/USER/CAMPAIGN)")
        ->capture_default_str();
    c.list->add_flag("--json", o.as_json, "machine-readable");
}

CLI::App* add_cancel(CLI::App& app, Options& o) {
    auto* cancel = app.add_subcommand(
        "cancel",
        "stop a campaign for good: its running jobs cancelled, no process (infrarsid) drives it again");
    add_dir(cancel, o);
    cancel
        ->add_option("--scheduler", o.ro.scheduler,
                     "where its jobs run, when no process drives it (default: the one it ran on)")
        ->check(CLI::IsMember({"auto", "slurm", "local"}));
    return cancel;
}

CLI::App* add_apply(CLI::App& app, Options& o) {
    auto* apply =
        app.add_subcommand("apply", "write the promoted change: env file, sbatch snippet, patch series");
    add_dir(apply, o);
    apply->add_option("--to", o.target, "target directory")->required();
    apply->add_option("--git-branch", o.ao.git_branch,
                      "also commit the series on this new branch (needs --git-repo)");
    apply->add_option("--git-repo", o.git_repo, "the repository holding the workload tree");
    return apply;
}

void add_bank(CLI::App& app, Options& o, Commands& c) {
    c.bank =
        app.add_subcommand("bank", "the experience bank: findings keyed by hardware, shared across clusters");
    c.bank->require_subcommand(1);
    c.bank->add_option("--bank", o.bank_path,
                       "bank file (default: $INFRARSI_BANK, else ~/.local/share/infrarsi/bank.sqlite)");
    c.bank_ingest =
        c.bank->add_subcommand("ingest", "add a finished campaign's findings (and allocation records)");
    add_dir(c.bank_ingest, o);
    c.bank_ingest->add_option("--spool", o.spool,
                              "the plugin's spool: its allocation records name the hardware");
    c.bank_export = c.bank->add_subcommand("export", "write every entry, with provenance, to a file");
    c.bank_export->add_option("file", o.bank_file, "export file (JSON)")->required();
    c.bank_import = c.bank->add_subcommand("import", "merge an export from another cluster (idempotent)");
    c.bank_import->add_option("file", o.bank_file, "export file (JSON)")->required();
    c.bank_show =
        c.bank->add_subcommand("show", "what the bank knows, nearest hardware to this machine first");
    c.bank_show->add_flag("--json", o.as_json, "machine-readable");
    for (auto* s : {c.bank_ingest, c.bank_export, c.bank_import, c.bank_show})
        s->fallthrough(); // `infrarsi bank show --bank F` as well as `infrarsi bank --bank F show`
}

CLI::App* add_node(CLI::App& app, Options& o) {
    auto* node_cmd = app.add_subcommand(
        "node", "this node as the plugin records it: topology, CPU calibration, with --gpu the GPU probes");
    node_cmd->add_flag("--gpu", o.node_gpu,
                       "probe the GPUs too (CUDA runtime, cuBLAS, NVML loaded at run time; "
                       "INFRARSI_CUDA_LIBRARY_PATH=DIR:DIR searched first)");
    node_cmd->add_option("--calibration-ms", o.node_calibration_ms, "CPU calibration budget")
        ->capture_default_str()
        ->check(CLI::Range(0, 10000));
    node_cmd->add_option("--gpu-ms", o.node_gpu_ms, "GPU probe budget, CUDA's start-up included")
        ->capture_default_str()
        ->check(CLI::Range(0, 60000));
    node_cmd->add_flag("--nccl-allreduce", o.node_nccl,
                       "the node's GPUs in one NCCL all-reduce: bus bandwidth (libnccl loaded at run time)");
    node_cmd->add_option("--nccl-ms", o.nccl_ms, "the all-reduce probe's budget, NCCL's start-up included")
        ->capture_default_str()
        ->check(CLI::Range(0, 60000));
    node_cmd->add_flag("--json", o.as_json, "machine-readable");
    return node_cmd;
}

CLI::App* add_nccl_probe(CLI::App& app, Options& o) {
    auto* nccl_cmd = app.add_subcommand(
        "nccl-probe",
        "an allocation's GPUs in one NCCL all-reduce, one task per GPU under srun: rank 0 prints the "
        "bus bandwidth");
    nccl_cmd
        ->add_option("--rendezvous", o.nccl_rendezvous,
                     "a directory every task sees (a shared file system): rank 0 leaves NCCL's id there")
        ->required();
    nccl_cmd
        ->add_option("--budget-ms", o.nccl_ms, "the probe's budget, the wait for the other ranks included")
        ->capture_default_str()
        ->check(CLI::Range(1000, 600000));
    nccl_cmd->add_option("--mib", o.nccl_mib, "MiB per all-reduce (float32, the same on every rank)")
        ->capture_default_str()
        ->check(CLI::Range(1, 16384));
    nccl_cmd->add_flag("--json", o.as_json, "machine-readable");
    return nccl_cmd;
}

// trial-exec and agent-exec: what the campaign's jobs and its agent stage run.
void add_internal(CLI::App& app, Options& o, Commands& c) {
    c.trial_exec = app.add_subcommand(
        "trial-exec", "inside a trial job: run one manifest entry (used by sbatch/trial.sbatch)");
    c.trial_exec->add_option("--manifest", o.manifest, "batch manifest")->required();
    c.trial_exec->add_option("--index", o.index, "array index")->required();
    c.trial_exec->group(""); // internal

    auto& call = o.agent_call;
    c.agent_exec = app.add_subcommand(
        "agent-exec", "run one call of the campaign's agent, contained (used by the agent stage)");
    c.agent_exec->add_option("--campaign", call.campaign, "campaign directory")->required();
    c.agent_exec->add_option("--call-dir", call.call_dir, "the call's directory")->required();
    c.agent_exec->add_option("--tree", call.tree, "the read-only baseline tree")->required();
    c.agent_exec->add_option("--time-limit", o.agent_time_limit, "seconds")->check(CLI::Range(1LL, 86400LL));
    c.agent_exec->add_option("--max-output", call.max_output_bytes, "bytes of stdout and of stderr");
    c.agent_exec->add_option("command", call.command, "the agent's argv (after --)")->required();
    c.agent_exec->group(""); // internal
}

CLI::App* add_classify(CLI::App& app, Options& o) {
    auto& req = o.classify_request;
    auto* trial_cmd = app.add_subcommand("trial", "one job's outcome, as a campaign judges it");
    trial_cmd->require_subcommand(1);
    auto* classify = trial_cmd->add_subcommand(
        "classify",
        "print a finished job's outcome as JSON (ok, oom, timeout, node_failure, cancelled, crash, "
        "contract_violation), from its scheduler record, output files and result.json");
    auto* by_job = classify->add_option("--job", req.job, "a Slurm job id (JOB or JOB_INDEX)");
    classify
        ->add_option(
            "--record", req.record_file,
            "instead of --job: a record file (JSON: state, exit_code, signal, elapsed_s, max_rss_bytes)")
        ->excludes(by_job);
    classify->add_option("--output", req.files.outputs, "the job's output file (repeatable)");
    classify->add_option("--result", req.files.result,
                         "the trial wrapper's result.json (without it, none is expected)");
    classify->add_option("--steps", req.steps, "step lines the job must print");
    classify->add_option("--warmup-steps", req.files.warmup_steps,
                         "steps before the steady state (default 0)");
    classify->add_option("--mem", req.mem, "the memory limit it ran under (\"1400M\")");
    classify->add_option("--time-limit", req.time_limit, "the time limit it ran under");
    auto* classify_format_opt =
        classify
            ->add_option(
                "--format", o.classify_format,
                "how the output prints its steps, as the contract's [metrics] format (default infrarsi)")
            ->check(CLI::IsMember(o.log_formats));
    classify
        ->add_option("--pattern", req.files.format.pattern,
                     "with --format regex: the pattern (PCRE2, named groups, as [metrics] pattern)")
        ->needs(classify_format_opt);
    classify->parse_complete_callback([&o] {
        auto& req = o.classify_request;
        if (!o.classify_format.empty())
            req.files.format.kind = *measure::log_format_names.parse(o.classify_format); // IsMember
        const bool regex = req.files.format.kind == measure::LogFormatKind::Regex;
        if (regex == req.files.format.pattern.empty())
            throw CLI::ValidationError("--pattern", regex ? "--format regex needs --pattern"
                                                          : "--pattern goes with --format regex");
    });
    return classify;
}

int draft(const Options& o) {
    contract::DraftOptions d;
    d.script = o.from_script;
    d.output = o.draft_output.empty()
                   ? std::filesystem::path(o.from_script).replace_extension(".contract.toml")
                   : std::filesystem::path(o.draft_output);
    if (!o.draft_format.empty()) d.format = measure::log_format_names.parse(o.draft_format); // IsMember
    if (!o.sample_log.empty()) {
        d.sample_log = read_regular_file(o.sample_log, {16u << 20});
        d.sample_log_name = std::filesystem::path(o.sample_log).filename().string();
    }
    d.goal = o.draft_goal;
    if (!o.draft_agent.empty()) d.agent_command = {o.draft_agent};
    const auto draft = contract::draft_contract(d);
    contract::write_draft(d.output, draft);
    fmt::print("drafted {}: {} lines to check, {} values to fill in\n", d.output.string(), draft.checks,
               draft.placeholders);
    for (const auto& n : draft.notes)
        fmt::print("  note: {}\n", n);
    fmt::print("then: infrarsi init {} --dir CAMPAIGN_DIR\n", d.output.string());
    return 0;
}

int init(const Options& o) {
    if (o.contract_file.empty())
        throw Error("init needs a contract, or --from SCRIPT to draft one", "infrarsi init",
                    "infrarsi init CONTRACT --dir DIR, or infrarsi init --from job.sbatch");
    campaign::Campaign::init(o.contract_file, o.dir);
    campaign::Campaign c(o.dir);
    fmt::print("campaign {} initialized in {}\n", c.contract().name, c.dir().string());
    for (const auto& p : c.store().patches())
        if (!p.accepted) fmt::print("  patch {} refused: {}\n", p.id, p.reason);
    return 0;
}

int list(const Options& o) {
    const auto j = report::list_campaigns(o.list_root);
    fmt::print("{}", o.as_json ? j.dump(2) + "\n" : report::render_list(j));
    return 0;
}

int bank_command(Options& o, const Commands& cmd) {
    auto& bank_path = o.bank_path;
    const bool named = !bank_path.empty();
    if (bank_path.empty()) bank_path = bank::default_bank_path();
    if (bank_path.empty())
        throw Error("the experience bank is off", "INFRARSI_BANK=off", "--bank PATH or INFRARSI_BANK=PATH");
    // Only ingest and import write a bank: show and export of a bank that is not there create none
    // (a mistyped --bank is an error; the default bank not made yet is empty).
    if ((*cmd.bank_show || *cmd.bank_export) && !std::filesystem::exists(bank_path)) {
        if (named || *cmd.bank_export)
            throw Error("no experience bank here", bank_path,
                        "a bank a campaign or `infrarsi bank import` wrote (--bank, INFRARSI_BANK)");
        fmt::print("the experience bank {} is empty: no campaign has recorded into it yet\n", bank_path);
        return 0;
    }
    bank::ExperienceBank b(bank_path);
    if (*cmd.bank_export) {
        b.export_to(o.bank_file);
        fmt::print("exported {} hardware entries and {} findings to {}\n", b.hardware().size(),
                   b.findings().size(), o.bank_file);
    } else if (*cmd.bank_import) {
        auto r = b.import_from(o.bank_file);
        fmt::print("imported from {} ({}): {} new hardware entries, {} new findings, {} already known, "
                   "{} new noise records\n",
                   o.bank_file, r.origin, r.hardware_new, r.findings_new, r.findings_known, r.noise_new);
    } else if (*cmd.bank_ingest) {
        campaign::Campaign c(o.dir);
        auto r = campaign::ingest_into_bank(b, c.experience_view(), o.spool);
        fmt::print("campaign {}: {} findings added, {} already known\n", c.contract().name, r.added, r.known);
    } else if (*cmd.bank_show) {
        auto here = bank::HardwareKey{node::topology_from_live(), 0, bank::current_software_stack("")};
        auto j = report::describe_bank(b, here);
        fmt::print("{}\n", o.as_json ? j.dump(2) : report::render_bank(j));
    }
    return 0;
}

int node_command(const Options& o) {
    node::CalibrationOptions co;
    co.budget = std::chrono::milliseconds(o.node_calibration_ms);
    std::optional<node::GpuCalibration> gpu;
    if (o.node_gpu) {
        node::GpuProbeOptions go;
        go.budget = std::chrono::milliseconds(o.node_gpu_ms);
        go.library_dirs = node::cuda_library_dirs_from_env();
        gpu = node::probe_gpus(go);
    }
    std::optional<node::NcclAllreduce> allreduce;
    if (o.node_nccl) {
        node::NcclProbeOptions no;
        no.budget = std::chrono::milliseconds(o.nccl_ms);
        no.bytes = std::uint64_t(o.nccl_mib) << 20;
        no.library_dirs = node::cuda_library_dirs_from_env();
        allreduce = node::probe_nccl_allreduce_node(no);
    }
    auto j = report::describe_node(node::topology_from_live(), node::calibrate(co), gpu, allreduce);
    fmt::print("{}\n", o.as_json ? j.dump(2) : report::render_node(j));
    return 0;
}

int nccl_probe(const Options& o) {
    const auto rank = node::slurm_rank([](const char* name) { return std::getenv(name); });
    node::NcclProbeOptions no;
    no.budget = std::chrono::milliseconds(o.nccl_ms);
    no.bytes = std::uint64_t(o.nccl_mib) << 20;
    no.library_dirs = node::cuda_library_dirs_from_env();
    const auto r = node::probe_nccl_allreduce_rank(
        no, rank.place, std::filesystem::path(o.nccl_rendezvous) / rank.rendezvous_name);
    const auto j = node::to_json(r);
    // Rank 0 speaks for the communicator; another rank only when it failed.
    if (rank.place.rank == 0)
        fmt::print("{}", o.as_json ? j.dump(2) + "\n" : report::render_nccl_allreduce(j));
    else if (r.status != node::GpuProbeStatus::ok)
        fmt::print(stderr, "rank {}: {}", rank.place.rank, report::render_nccl_allreduce(j));
    return r.status == node::GpuProbeStatus::ok ? 0 : 1;
}

// The process driving the campaign (if any) sees the cancel at its next look and cancels its jobs itself;
// otherwise this one does, holding the lock meanwhile.
int cancel(campaign::Campaign& c, const Options& o) {
    std::string holder;
    const auto held = campaign::CampaignLock::try_take(c.dir(), &holder);
    c.request_cancel(fmt::format("by uid {} (infrarsi cancel)", ::getuid()));
    if (held) {
        c.cancel_running(o.ro);
        fmt::print("campaign {} cancelled\n", c.dir().string());
    } else {
        fmt::print("campaign {} cancelled: {} drives it and cancels its jobs at its next look\n",
                   c.dir().string(), holder);
    }
    return 0;
}

int run_campaign(campaign::Campaign& c, Options& o) {
    auto& ro = o.ro;
    // On a terminal: one live status line under the events (report/progress.hpp).
    std::optional<report::LiveLine> live;
    if (ro.verbose && report::is_live_terminal(stdout)) {
        live.emplace(stdout);
        live->update(report::status(c));
        ro.on_event = [&](const std::string& msg) {
            live->event("infrarsi: " + msg);
            live->update(report::status(c));
        };
    }
    c.run(ro);
    live.reset();
    if (stop_requested) return 130;
    fmt::print("{}", report::render(report::build(c)));
    return 0;
}

int status(campaign::Campaign& c, const Options& o) {
    if (o.watch) {
        if (o.as_json) throw Error("--watch does not go with --json", "infrarsi status", "one of them");
        return report::watch(c, stop_requested) ? 0 : 130;
    }
    auto j = report::status(c);
    const auto paused = c.paused();
    if (paused) j["paused"] = *paused;
    fmt::print("{}\n", o.as_json ? j.dump(2) : report::render_status(j));
    if (paused && !o.as_json) fmt::print("paused: {}\n", *paused);
    return 0;
}

int report_command(campaign::Campaign& c, const Options& o) {
    if (!o.html.file.empty()) {
        for (const auto& f : report::write_html(c, o.html))
            fmt::print(o.as_json ? stderr : stdout, "wrote {}\n", f.string());
        if (!o.as_json) return 0;
    } else if (!o.html.audit_dir.empty() || !o.html.table.empty()) {
        throw Error("--html-dir and --table go with --html", "infrarsi report", "--html FILE");
    }
    auto j = report::build(c);
    const auto paused = c.paused();
    if (paused) j["paused"] = *paused;
    if (paused && !o.as_json) fmt::print("paused: {}\n\n", *paused);
    fmt::print("{}\n", o.as_json ? j.dump(2) : report::render(j));
    return 0;
}

int apply(campaign::Campaign& c, Options& o) {
    o.ao.target = o.target;
    o.ao.git_repo = o.git_repo;
    for (const auto& f : report::apply(c, o.ao))
        fmt::print("wrote {}\n", f.string());
    return 0;
}

// The commands on one campaign directory. status, report and apply only read: a finished campaign stays
// readable after the user changed its tree or contract (applying its result to the job script, say), with a
// warning naming what changed.
int on_campaign(Options& o, const Commands& cmd) {
    const bool drives = *cmd.doctor || *cmd.run || *cmd.verify;
    campaign::Campaign c(o.dir,
                         drives ? campaign::Campaign::Open::checked : campaign::Campaign::Open::read_only);
    if (!c.changed_inputs().empty())
        fmt::print(stderr, "infrarsi: warning: {}: changed since init: {}; shown as the campaign ran\n",
                   c.dir().string(), fmt::join(c.changed_inputs(), ", "));
    // One process drives a campaign: held until this command ends.
    std::optional<campaign::CampaignLock> lock;
    if (drives) lock.emplace(c.dir());
    if (*cmd.cancel) return cancel(c, o);
    if (*cmd.doctor) {
        c.doctor(o.ro);
        fmt::print("{}", report::render_status(report::status(c)));
        return 0;
    }
    if (*cmd.run) return run_campaign(c, o);
    if (*cmd.verify) {
        c.verify(o.ro);
        return 0;
    }
    if (*cmd.status) return status(c, o);
    if (*cmd.report) return report_command(c, o);
    if (*cmd.apply) return apply(c, o);
    return 0;
}

// Root on a campaign a user controls acts as that user, for good, before it opens anything there (its
// build and trials run as the user, as under a root daemon's worker; issue 29): never as root on a user's
// content. Before the bank's default path, which is then the user's.
bool acts_on_campaign(const Options& o, const Commands& c) {
    return (*c.init && o.from_script.empty()) || *c.doctor || *c.run || *c.verify || *c.status || *c.report ||
           *c.apply || *c.bank_ingest || *c.cancel;
}

} // namespace

static int run_main(int argc, char** argv) {
    CLI::App app{"infrarsi: turn a Slurm training job into a verified faster one"};
    app.set_version_flag("--version", std::string("infrarsi ") + infrarsi::build::version);
    app.require_subcommand(0, 1);
    Options o;
    for (const auto& [kind, name] : measure::log_format_names.entries)
        o.log_formats.emplace_back(name);
    Commands cmd{};
    cmd.init = add_init(app, o);
    add_drive(app, o, cmd);
    add_views(app, o, cmd);
    cmd.cancel = add_cancel(app, o);
    cmd.apply = add_apply(app, o);
    add_bank(app, o, cmd);
    cmd.node = add_node(app, o);
    cmd.nccl = add_nccl_probe(app, o);
    add_internal(app, o, cmd);
    cmd.classify = add_classify(app, o);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : infrarsi::kUsageExit; // app.exit prints the message or the help
    }
    if (acts_on_campaign(o, cmd)) {
        try {
            if (const auto user = account_to_act_as(o.dir)) {
                fmt::print(stderr, "infrarsi: {} is {}'s (uid {}): acting as {}, not as root\n", o.dir,
                           user->name, user->uid, user->name);
                drop_to(*user);
            }
        } catch (const infrarsi::Error& e) {
            fmt::print(stderr, "infrarsi: {}\n", e.what());
            return 1;
        }
    }
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    auto& ro = o.ro;
    ro.stop = &stop_requested;
    ro.verbose = !o.quiet;
    ro.verify = !o.no_verify;
    ro.first_answer_wait = std::chrono::seconds(o.scheduler_wait);
    // Only the commands that drive a campaign use the bank: a trial (trial-exec, as a user whose home may not
    // exist) or a report must not need one.
    if ((*cmd.doctor || *cmd.run || *cmd.verify) && ro.bank.empty() && !o.no_bank)
        ro.bank = bank::default_bank_path();
    if (o.no_bank) ro.bank.clear();
    try {
        if (app.get_subcommands().empty()) {
            fmt::print("{}", app.help());
            return 0;
        }
        if (*cmd.init) return o.from_script.empty() ? init(o) : draft(o);
        if (*cmd.list) return list(o);
        if (*cmd.bank) return bank_command(o, cmd);
        if (*cmd.node) return node_command(o);
        if (*cmd.nccl) return nccl_probe(o);
        if (*cmd.trial_exec) return trial::execute(o.manifest, o.index);
        if (*cmd.agent_exec) {
            o.agent_call.time_limit = std::chrono::seconds(o.agent_time_limit);
            return agent::agent_exec(o.agent_call);
        }
        if (*cmd.classify) {
            fmt::print("{}\n", trial::classify_request(o.classify_request).dump());
            return 0;
        }
        return on_campaign(o, cmd);
    } catch (const infrarsi::Error& e) {
        fmt::print(stderr, "infrarsi: {}\n", e.what());
        return 1;
    }
}

// Everything reaches here: an infrarsi::Error is a user's problem, already said in run_main; anything else
// is a bug, said as one, with its own exit code, never an abort with a core dump.
int main(int argc, char** argv) {
    try {
        return run_main(argc, argv);
    } catch (const std::exception& e) {
        fmt::print(stderr, "infrarsi: internal error (please report it): {}\n", e.what());
    } catch (...) {
        fmt::print(stderr, "infrarsi: internal error (please report it): an unknown exception\n");
    }
    return infrarsi::kInternalErrorExit;
}
