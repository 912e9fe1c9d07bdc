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
} // namespace

static int run_main(int argc, char** argv) {
    using namespace infrarsi;
    CLI::App app{"infrarsi: turn a Slurm training job into a verified faster one"};
    app.set_version_flag("--version", std::string("infrarsi ") + infrarsi::build::version);
    app.require_subcommand(0, 1);
    std::string dir = "campaign";
    auto add_dir = [&](CLI::App* s) {
        s->add_option("--dir,-d", dir, "campaign directory")->capture_default_str();
    };

    std::string contract_file;
    auto* init =
        app.add_subcommand("init", "create a campaign from a contract: directory, store, locked hashes");
    init->add_option("contract", contract_file, "the contract (TOML)");
    add_dir(init);
    std::string from_script, draft_format, sample_log, draft_output;
    init->add_option("--from", from_script,
                     "draft a contract from this batch script instead (written to --output; nothing is "
                     "initialized)");
    // The names from the format table, so that a format added there is accepted here.
    std::vector<std::string> draft_formats;
    for (const auto& [kind, name] : measure::log_format_names.entries)
        draft_formats.emplace_back(name);
    init->add_option("--format", draft_format, "with --from: the job's log format")
        ->check(CLI::IsMember(draft_formats));
    init->add_option("--sample-log", sample_log,
                     "with --from: a sample of the job's output, to guess the format");
    std::string draft_goal;
    std::string draft_agent;
    init->add_option("--goal", draft_goal,
                     "with --from: what you want, in your words, for the agent ([agent] goal)");
    init->add_option("--agent", draft_agent,
                     "with --from: the agent's program ([agent] command, docs/agent.md)");
    init->add_option("--output,-o", draft_output,
                     "with --from: the draft's file (default: the script's name with .contract.toml)");

    campaign::RunOptions ro;
    bool quiet = false, no_verify = false;
    auto* doctor = app.add_subcommand("doctor", "run the baseline repeats: cold start, phases, noise, MDE");
    add_dir(doctor);
    auto* run =
        app.add_subcommand("run", "run the campaign in the foreground until its budget ends (resumable)");
    add_dir(run);
    run->add_option("--proposer", ro.proposer, "candidate proposer")->capture_default_str();
    run->add_option("--scheduler", ro.scheduler,
                    "where trials run: slurm, local (child processes on this machine) or auto (Slurm when it "
                    "answers, else local); a campaign keeps the one its first batch used")
        ->check(CLI::IsMember({"auto", "slurm", "local"}))
        ->capture_default_str();
    int scheduler_wait = static_cast<int>(ro.first_answer_wait.count());
    run->add_option("--scheduler-wait", scheduler_wait,
                    "seconds a scheduler that has run no batch of this campaign may not answer before run "
                    "stops with an error (one that has is waited for: a restart)")
        ->check(CLI::Range(0, 86400))
        ->capture_default_str();
    run->add_flag("--no-verify", no_verify, "stop after the search, before verification");
    run->add_flag("--accept-noise", ro.accept_noise,
                  "go on with a baseline too noisy to promote a gain of a usual size (the campaign pauses "
                  "there otherwise)");
    bool no_bank = false;
    run->add_option("--bank", ro.bank,
                    "experience bank to seed from and record into (default: $INFRARSI_BANK, "
                    "else ~/.local/share/infrarsi/bank.sqlite; INFRARSI_BANK=off: none)");
    run->add_flag("--no-bank", no_bank, "neither seed from nor record into the experience bank");
    for (auto* s : {doctor, run})
        s->add_option("--spool", ro.spool,
                      "the plugin's spool directory (its allocation records name the hardware; its trial "
                      "evidence is what the trials' step times are checked against)");
    for (auto* s : {doctor, run})
        s->add_flag("--quiet,-q", quiet, "print nothing but errors");
    auto* verify =
        app.add_subcommand("verify", "re-verify the best candidates against the baseline (A/B/A/B)");
    add_dir(verify);

    bool as_json = false;
    auto* status = app.add_subcommand("status", "progress, best so far, running/pending/failed counts");
    add_dir(status);
    status->add_flag("--json", as_json, "machine-readable");
    bool watch = false;
    status->add_flag("--watch,-w", watch,
                     "follow the campaign until it is done: a live status line on a terminal, else one line "
                     "per event");
    auto* report = app.add_subcommand("report", "baseline vs promoted, audit paths, failure costs, budget");
    add_dir(report);
    report->add_flag("--json", as_json, "machine-readable");
    report::HtmlOptions html;
    report->add_option(
        "--html", html.file,
        "also write the report as one self-contained HTML file with its plots (needs gnuplot)");
    report->add_option("--html-dir", html.audit_dir,
                       "with --html: copy the audit files (diffs, trial results and logs) here and link them "
                       "relatively, so the page and this folder can be moved together");
    report->add_option(
        "--table", html.table,
        "with --html: a recorded table (tests/bench/tables) whose best is drawn on the progress "
        "plots");

    std::string list_root = ".";
    auto* list = app.add_subcommand(
        "list", "the campaigns under a directory, with state, trials, best result and who drives them");
    list->add_option("root", list_root,
                     "the directory (its entries and theirs: a daemon's --root holds ROOT/USER/CAMPAIGN)")
        ->capture_default_str();
    list->add_flag("--json", as_json, "machine-readable");
    auto* cancel = app.add_subcommand(
        "cancel",
        "stop a campaign for good: its running jobs cancelled, no process (infrarsid) drives it again");
    add_dir(cancel);
    cancel
        ->add_option("--scheduler", ro.scheduler,
                     "where its jobs run, when no process drives it (default: the one it ran on)")
        ->check(CLI::IsMember({"auto", "slurm", "local"}));

    report::ApplyOptions ao;
    std::string target, git_repo;
    auto* apply =
        app.add_subcommand("apply", "write the promoted change: env file, sbatch snippet, patch series");
    add_dir(apply);
    apply->add_option("--to", target, "target directory")->required();
    apply->add_option("--git-branch", ao.git_branch,
                      "also commit the series on this new branch (needs --git-repo)");
    apply->add_option("--git-repo", git_repo, "the repository holding the workload tree");

    std::string bank_path, bank_file, spool;
    auto* bank =
        app.add_subcommand("bank", "the experience bank: findings keyed by hardware, shared across clusters");
    bank->require_subcommand(1);
    bank->add_option("--bank", bank_path,
                     "bank file (default: $INFRARSI_BANK, else ~/.local/share/infrarsi/bank.sqlite)");
    auto* bank_ingest =
        bank->add_subcommand("ingest", "add a finished campaign's findings (and allocation records)");
    add_dir(bank_ingest);
    bank_ingest->add_option("--spool", spool, "the plugin's spool: its allocation records name the hardware");
    auto* bank_export = bank->add_subcommand("export", "write every entry, with provenance, to a file");
    bank_export->add_option("file", bank_file, "export file (JSON)")->required();
    auto* bank_import = bank->add_subcommand("import", "merge an export from another cluster (idempotent)");
    bank_import->add_option("file", bank_file, "export file (JSON)")->required();
    auto* bank_show =
        bank->add_subcommand("show", "what the bank knows, nearest hardware to this machine first");
    bank_show->add_flag("--json", as_json, "machine-readable");
    for (auto* s : {bank_ingest, bank_export, bank_import, bank_show})
        s->fallthrough(); // `infrarsi bank show --bank F` as well as `infrarsi bank --bank F show`

    bool node_gpu = false;
    int node_calibration_ms = 300, node_gpu_ms = 5000;
    auto* node_cmd = app.add_subcommand(
        "node", "this node as the plugin records it: topology, CPU calibration, with --gpu the GPU probes");
    node_cmd->add_flag("--gpu", node_gpu,
                       "probe the GPUs too (CUDA runtime, cuBLAS, NVML loaded at run time; "
                       "INFRARSI_CUDA_LIBRARY_PATH=DIR:DIR searched first)");
    node_cmd->add_option("--calibration-ms", node_calibration_ms, "CPU calibration budget")
        ->capture_default_str()
        ->check(CLI::Range(0, 10000));
    node_cmd->add_option("--gpu-ms", node_gpu_ms, "GPU probe budget, CUDA's start-up included")
        ->capture_default_str()
        ->check(CLI::Range(0, 60000));
    bool node_nccl = false;
    int nccl_ms = 10000, nccl_mib = 256;
    node_cmd->add_flag("--nccl-allreduce", node_nccl,
                       "the node's GPUs in one NCCL all-reduce: bus bandwidth (libnccl loaded at run time)");
    node_cmd->add_option("--nccl-ms", nccl_ms, "the all-reduce probe's budget, NCCL's start-up included")
        ->capture_default_str()
        ->check(CLI::Range(0, 60000));
    node_cmd->add_flag("--json", as_json, "machine-readable");

    std::string nccl_rendezvous;
    auto* nccl_cmd = app.add_subcommand(
        "nccl-probe",
        "an allocation's GPUs in one NCCL all-reduce, one task per GPU under srun: rank 0 prints the "
        "bus bandwidth");
    nccl_cmd
        ->add_option("--rendezvous", nccl_rendezvous,
                     "a directory every task sees (a shared file system): rank 0 leaves NCCL's id there")
        ->required();
    nccl_cmd->add_option("--budget-ms", nccl_ms, "the probe's budget, the wait for the other ranks included")
        ->capture_default_str()
        ->check(CLI::Range(1000, 600000));
    nccl_cmd->add_option("--mib", nccl_mib, "MiB per all-reduce (float32, the same on every rank)")
        ->capture_default_str()
        ->check(CLI::Range(1, 16384));
    nccl_cmd->add_flag("--json", as_json, "machine-readable");

    std::string manifest;
    int index = 0;
    auto* trial = app.add_subcommand(
        "trial-exec", "inside a trial job: run one manifest entry (used by sbatch/trial.sbatch)");
    trial->add_option("--manifest", manifest, "batch manifest")->required();
    trial->add_option("--index", index, "array index")->required();
    trial->group(""); // internal

    agent::CallSpec agent_call;
    long long agent_time_limit = 600;
    auto* agent_exec_cmd = app.add_subcommand(
        "agent-exec", "run one call of the campaign's agent, contained (used by the agent stage)");
    agent_exec_cmd->add_option("--campaign", agent_call.campaign, "campaign directory")->required();
    agent_exec_cmd->add_option("--call-dir", agent_call.call_dir, "the call's directory")->required();
    agent_exec_cmd->add_option("--tree", agent_call.tree, "the read-only baseline tree")->required();
    agent_exec_cmd->add_option("--time-limit", agent_time_limit, "seconds")->check(CLI::Range(1LL, 86400LL));
    agent_exec_cmd->add_option("--max-output", agent_call.max_output_bytes, "bytes of stdout and of stderr");
    agent_exec_cmd->add_option("command", agent_call.command, "the agent's argv (after --)")->required();
    agent_exec_cmd->group(""); // internal

    trial::ClassifyRequest classify_request;
    auto* trial_cmd = app.add_subcommand("trial", "one job's outcome, as a campaign judges it");
    trial_cmd->require_subcommand(1);
    auto* classify = trial_cmd->add_subcommand(
        "classify",
        "print a finished job's outcome as JSON (ok, oom, timeout, node_failure, cancelled, crash, "
        "contract_violation), from its scheduler record, output files and result.json");
    auto* by_job = classify->add_option("--job", classify_request.job, "a Slurm job id (JOB or JOB_INDEX)");
    classify
        ->add_option(
            "--record", classify_request.record_file,
            "instead of --job: a record file (JSON: state, exit_code, signal, elapsed_s, max_rss_bytes)")
        ->excludes(by_job);
    classify->add_option("--output", classify_request.files.outputs, "the job's output file (repeatable)");
    classify->add_option("--result", classify_request.files.result,
                         "the trial wrapper's result.json (without it, none is expected)");
    classify->add_option("--steps", classify_request.steps, "step lines the job must print");
    classify->add_option("--warmup-steps", classify_request.files.warmup_steps,
                         "steps before the steady state (default 0)");
    classify->add_option("--mem", classify_request.mem, "the memory limit it ran under (\"1400M\")");
    classify->add_option("--time-limit", classify_request.time_limit, "the time limit it ran under");
    std::string classify_format;
    auto* classify_format_opt =
        classify
            ->add_option(
                "--format", classify_format,
                "how the output prints its steps, as the contract's [metrics] format (default infrarsi)")
            ->check(CLI::IsMember(draft_formats));
    classify
        ->add_option("--pattern", classify_request.files.format.pattern,
                     "with --format regex: the pattern (PCRE2, named groups, as [metrics] pattern)")
        ->needs(classify_format_opt);
    classify->parse_complete_callback([&] {
        if (!classify_format.empty())
            classify_request.files.format.kind =
                *measure::log_format_names.parse(classify_format); // IsMember
        const bool regex = classify_request.files.format.kind == measure::LogFormatKind::Regex;
        if (regex == classify_request.files.format.pattern.empty())
            throw CLI::ValidationError("--pattern", regex ? "--format regex needs --pattern"
                                                          : "--pattern goes with --format regex");
    });

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : infrarsi::kUsageExit; // app.exit prints the message or the help
    }
    // Root on a campaign a user controls acts as that user, for good, before it opens anything there (its
    // build and trials run as the user, as under a root daemon's worker; issue 29): never as root on a user's
    // content. Before the bank's default path, which is then the user's.
    if ((*init && from_script.empty()) || *doctor || *run || *verify || *status || *report || *apply ||
        *bank_ingest || *cancel) {
        try {
            if (const auto user = account_to_act_as(dir)) {
                fmt::print(stderr, "infrarsi: {} is {}'s (uid {}): acting as {}, not as root\n", dir,
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
    ro.stop = &stop_requested;
    ro.verbose = !quiet;
    ro.verify = !no_verify;
    ro.first_answer_wait = std::chrono::seconds(scheduler_wait);
    // Only the commands that drive a campaign use the bank: a trial (trial-exec, as a user whose home may not
    // exist) or a report must not need one.
    if ((*doctor || *run || *verify) && ro.bank.empty() && !no_bank) ro.bank = bank::default_bank_path();
    if (no_bank) ro.bank.clear();
    try {
        if (app.get_subcommands().empty()) {
            fmt::print("{}", app.help());
            return 0;
        }
        if (*init && !from_script.empty()) {
            contract::DraftOptions d;
            d.script = from_script;
            d.output = draft_output.empty()
                           ? std::filesystem::path(from_script).replace_extension(".contract.toml")
                           : std::filesystem::path(draft_output);
            if (!draft_format.empty()) d.format = measure::log_format_names.parse(draft_format); // IsMember
            if (!sample_log.empty()) {
                d.sample_log = read_regular_file(sample_log, {16u << 20});
                d.sample_log_name = std::filesystem::path(sample_log).filename().string();
            }
            d.goal = draft_goal;
            if (!draft_agent.empty()) d.agent_command = {draft_agent};
            const auto draft = contract::draft_contract(d);
            contract::write_draft(d.output, draft);
            fmt::print("drafted {}: {} lines to check, {} values to fill in\n", d.output.string(),
                       draft.checks, draft.placeholders);
            for (const auto& n : draft.notes)
                fmt::print("  note: {}\n", n);
            fmt::print("then: infrarsi init {} --dir CAMPAIGN_DIR\n", d.output.string());
            return 0;
        }
        if (*init) {
            if (contract_file.empty())
                throw Error("init needs a contract, or --from SCRIPT to draft one", "infrarsi init",
                            "infrarsi init CONTRACT --dir DIR, or infrarsi init --from job.sbatch");
            campaign::Campaign::init(contract_file, dir);
            campaign::Campaign c(dir);
            fmt::print("campaign {} initialized in {}\n", c.contract().name, c.dir().string());
            for (const auto& p : c.store().patches())
                if (!p.accepted) fmt::print("  patch {} refused: {}\n", p.id, p.reason);
            return 0;
        }
        if (*list) {
            const auto j = report::list_campaigns(list_root);
            fmt::print("{}", as_json ? j.dump(2) + "\n" : report::render_list(j));
            return 0;
        }
        if (*bank) {
            const bool named = !bank_path.empty();
            if (bank_path.empty()) bank_path = bank::default_bank_path();
            if (bank_path.empty())
                throw Error("the experience bank is off", "INFRARSI_BANK=off",
                            "--bank PATH or INFRARSI_BANK=PATH");
            // Only ingest and import write a bank: show and export of a bank that is not there create none
            // (a mistyped --bank is an error; the default bank not made yet is empty).
            if ((*bank_show || *bank_export) && !std::filesystem::exists(bank_path)) {
                if (named || *bank_export)
                    throw Error("no experience bank here", bank_path,
                                "a bank a campaign or `infrarsi bank import` wrote (--bank, INFRARSI_BANK)");
                fmt::print("the experience bank {} is empty: no campaign has recorded into it yet\n",
                           bank_path);
                return 0;
            }
            bank::ExperienceBank b(bank_path);
            if (*bank_export) {
                b.export_to(bank_file);
                fmt::print("exported {} hardware entries and {} findings to {}\n", b.hardware().size(),
                           b.findings().size(), bank_file);
            } else if (*bank_import) {
                auto r = b.import_from(bank_file);
                fmt::print(
                    "imported from {} ({}): {} new hardware entries, {} new findings, {} already known, "
                    "{} new noise records\n",
                    bank_file, r.origin, r.hardware_new, r.findings_new, r.findings_known, r.noise_new);
            } else if (*bank_ingest) {
                campaign::Campaign c(dir);
                auto r = campaign::ingest_into_bank(b, c.experience_view(), spool);
                fmt::print("campaign {}: {} findings added, {} already known\n", c.contract().name, r.added,
                           r.known);
            } else if (*bank_show) {
                auto here =
                    bank::HardwareKey{node::topology_from_live(), 0, bank::current_software_stack("")};
                auto j = report::describe_bank(b, here);
                fmt::print("{}\n", as_json ? j.dump(2) : report::render_bank(j));
            }
            return 0;
        }
        if (*node_cmd) {
            node::CalibrationOptions co;
            co.budget = std::chrono::milliseconds(node_calibration_ms);
            std::optional<node::GpuCalibration> gpu;
            if (node_gpu) {
                node::GpuProbeOptions go;
                go.budget = std::chrono::milliseconds(node_gpu_ms);
                go.library_dirs = node::cuda_library_dirs_from_env();
                gpu = node::probe_gpus(go);
            }
            std::optional<node::NcclAllreduce> allreduce;
            if (node_nccl) {
                node::NcclProbeOptions no;
                no.budget = std::chrono::milliseconds(nccl_ms);
                no.bytes = std::uint64_t(nccl_mib) << 20;
                no.library_dirs = node::cuda_library_dirs_from_env();
                allreduce = node::probe_nccl_allreduce_node(no);
            }
            auto j = report::describe_node(node::topology_from_live(), node::calibrate(co), gpu, allreduce);
            fmt::print("{}\n", as_json ? j.dump(2) : report::render_node(j));
            return 0;
        }
        if (*nccl_cmd) {
            const auto rank = node::slurm_rank([](const char* name) { return std::getenv(name); });
            node::NcclProbeOptions no;
            no.budget = std::chrono::milliseconds(nccl_ms);
            no.bytes = std::uint64_t(nccl_mib) << 20;
            no.library_dirs = node::cuda_library_dirs_from_env();
            const auto r = node::probe_nccl_allreduce_rank(
                no, rank.place, std::filesystem::path(nccl_rendezvous) / rank.rendezvous_name);
            const auto j = node::to_json(r);
            // Rank 0 speaks for the communicator; another rank only when it failed.
            if (rank.place.rank == 0)
                fmt::print("{}", as_json ? j.dump(2) + "\n" : report::render_nccl_allreduce(j));
            else if (r.status != node::GpuProbeStatus::ok)
                fmt::print(stderr, "rank {}: {}", rank.place.rank, report::render_nccl_allreduce(j));
            return r.status == node::GpuProbeStatus::ok ? 0 : 1;
        }
        if (*trial) return trial::execute(manifest, index);
        if (*agent_exec_cmd) {
            agent_call.time_limit = std::chrono::seconds(agent_time_limit);
            return agent::agent_exec(agent_call);
        }
        if (*classify) {
            fmt::print("{}\n", trial::classify_request(classify_request).dump());
            return 0;
        }
        // status, report and apply only read: a finished campaign stays readable after the user changed its
        // tree or contract (applying its result to the job script, say), with a warning naming what changed.
        const bool drives = *doctor || *run || *verify;
        campaign::Campaign c(dir, drives ? campaign::Campaign::Open::checked
                                         : campaign::Campaign::Open::read_only);
        if (!c.changed_inputs().empty())
            fmt::print(stderr, "infrarsi: warning: {}: changed since init: {}; shown as the campaign ran\n",
                       c.dir().string(), fmt::join(c.changed_inputs(), ", "));
        // One process drives a campaign: held until this command ends.
        std::optional<campaign::CampaignLock> lock;
        if (*doctor || *run || *verify) lock.emplace(c.dir());
        if (*cancel) {
            // The process driving it (if any) sees the cancel at its next look and cancels its jobs itself;
            // otherwise this one does, holding the lock meanwhile.
            std::string holder;
            const auto held = campaign::CampaignLock::try_take(c.dir(), &holder);
            c.request_cancel(fmt::format("by uid {} (infrarsi cancel)", ::getuid()));
            if (held) {
                c.cancel_running(ro);
                fmt::print("campaign {} cancelled\n", c.dir().string());
            } else {
                fmt::print("campaign {} cancelled: {} drives it and cancels its jobs at its next look\n",
                           c.dir().string(), holder);
            }
            return 0;
        }
        if (*doctor) {
            c.doctor(ro);
            fmt::print("{}", report::render_status(report::status(c)));
        } else if (*run) {
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
        } else if (*verify) {
            c.verify(ro);
        } else if (*status && watch) {
            if (as_json) throw Error("--watch does not go with --json", "infrarsi status", "one of them");
            return report::watch(c, stop_requested) ? 0 : 130;
        } else if (*status) {
            auto j = report::status(c);
            const auto paused = c.paused();
            if (paused) j["paused"] = *paused;
            fmt::print("{}\n", as_json ? j.dump(2) : report::render_status(j));
            if (paused && !as_json) fmt::print("paused: {}\n", *paused);
        } else if (*report) {
            if (!html.file.empty()) {
                for (const auto& f : report::write_html(c, html))
                    fmt::print(as_json ? stderr : stdout, "wrote {}\n", f.string());
                if (!as_json) return 0;
            } else if (!html.audit_dir.empty() || !html.table.empty()) {
                throw Error("--html-dir and --table go with --html", "infrarsi report", "--html FILE");
            }
            auto j = report::build(c);
            const auto paused = c.paused();
            if (paused) j["paused"] = *paused;
            if (paused && !as_json) fmt::print("paused: {}\n\n", *paused);
            fmt::print("{}\n", as_json ? j.dump(2) : report::render(j));
        } else if (*apply) {
            ao.target = target;
            ao.git_repo = git_repo;
            for (const auto& f : report::apply(c, ao))
                fmt::print("wrote {}\n", f.string());
        }
    } catch (const infrarsi::Error& e) {
        fmt::print(stderr, "infrarsi: {}\n", e.what());
        return 1;
    }
    return 0;
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
