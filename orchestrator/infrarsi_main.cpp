// The `infrarsi` command: parses arguments and calls the core library. No logic lives here.
#include "campaign/campaign.hpp"
#include "campaign/trial_exec.hpp"
#include "report/report.hpp"
#include "util/error.hpp"

#include "infrarsi/build_info.hpp"

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <atomic>
#include <csignal>

namespace {
std::atomic<bool> stop_requested{false};
void on_signal(int) {
    stop_requested = true;
}
} // namespace

int main(int argc, char** argv) {
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
    init->add_option("contract", contract_file, "the contract (TOML)")->required();
    add_dir(init);

    campaign::RunOptions ro;
    bool quiet = false, no_verify = false;
    auto* doctor = app.add_subcommand("doctor", "run the baseline repeats: cold start, phases, noise, MDE");
    add_dir(doctor);
    auto* run =
        app.add_subcommand("run", "run the campaign in the foreground until its budget ends (resumable)");
    add_dir(run);
    run->add_option("--proposer", ro.proposer, "candidate proposer")->capture_default_str();
    run->add_flag("--no-verify", no_verify, "stop after the search, before verification");
    for (auto* s : {doctor, run})
        s->add_flag("--quiet,-q", quiet, "print nothing but errors");
    auto* verify =
        app.add_subcommand("verify", "re-verify the best candidates against the baseline (A/B/A/B)");
    add_dir(verify);

    bool as_json = false;
    auto* status = app.add_subcommand("status", "progress, best so far, running/pending/failed counts");
    add_dir(status);
    status->add_flag("--json", as_json, "machine-readable");
    auto* report = app.add_subcommand("report", "baseline vs promoted, audit paths, failure costs, budget");
    add_dir(report);
    report->add_flag("--json", as_json, "machine-readable");

    report::ApplyOptions ao;
    std::string target, git_repo;
    auto* apply =
        app.add_subcommand("apply", "write the promoted change: env file, sbatch snippet, patch series");
    add_dir(apply);
    apply->add_option("--to", target, "target directory")->required();
    apply->add_option("--git-branch", ao.git_branch,
                      "also commit the series on this new branch (needs --git-repo)");
    apply->add_option("--git-repo", git_repo, "the repository holding the workload tree");

    std::string manifest;
    int index = 0;
    auto* trial = app.add_subcommand(
        "trial-exec", "inside a trial job: run one manifest entry (used by sbatch/trial.sbatch)");
    trial->add_option("--manifest", manifest, "batch manifest")->required();
    trial->add_option("--index", index, "array index")->required();
    trial->group(""); // internal

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    ro.stop = &stop_requested;
    ro.verbose = !quiet;
    ro.verify = !no_verify;
    try {
        if (app.get_subcommands().empty()) {
            fmt::print("{}", app.help());
            return 0;
        }
        if (*init) {
            campaign::Campaign::init(contract_file, dir);
            campaign::Campaign c(dir);
            fmt::print("campaign {} initialized in {}\n", c.contract().name, c.dir().string());
            for (const auto& p : c.store().patches())
                if (!p.accepted) fmt::print("  patch {} refused: {}\n", p.id, p.reason);
            return 0;
        }
        if (*trial) return campaign::execute_trial(manifest, index);
        campaign::Campaign c(dir);
        if (*doctor) {
            c.doctor(ro);
            fmt::print("{}", report::render_status(report::status(c)));
        } else if (*run) {
            c.run(ro);
            if (stop_requested) return 130;
            fmt::print("{}", report::render(report::build(c)));
        } else if (*verify) {
            c.verify(ro);
        } else if (*status) {
            auto j = report::status(c);
            fmt::print("{}\n", as_json ? j.dump(2) : report::render_status(j));
        } else if (*report) {
            auto j = report::build(c);
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
