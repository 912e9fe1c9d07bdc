// The `infrarsid` daemon: runs campaigns in the background until their budgets end. Thin over src/.
#include "campaign/daemon.hpp"
#include "util/error.hpp"
#include "util/exit_codes.hpp"

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

static int run_main(int argc, char** argv) {
    CLI::App app{"infrarsid: the InfraRSI campaign daemon"};
    app.set_version_flag("--version", std::string("infrarsid ") + infrarsi::build::version);
    infrarsi::campaign::DaemonOptions o;
    std::vector<std::string> campaigns;
    std::string root;
    int idle = 10;
    app.add_option("--campaign,-c", campaigns, "a campaign directory (repeatable)");
    app.add_option("--root", root,
                   "drive every campaign directory under this one (as root: each directory a user controls "
                   "as that user, never as root)");
    app.add_option(
        "--spool", o.run.spool,
        "the plugin's spool: its tune requests (tune/) become campaigns under --root; its allocation "
        "records name the hardware");
    app.add_flag("--once", o.once, "exit when every campaign is done");
    app.add_option("--idle", idle, "seconds between scans")->capture_default_str();
    app.add_option("--scheduler", o.run.scheduler, "where trials run: slurm, local or auto (as infrarsi run)")
        ->check(CLI::IsMember({"auto", "slurm", "local"}))
        ->capture_default_str();
    bool no_bank = false;
    app.add_option("--bank", o.run.bank,
                   "experience bank the campaigns seed from and record into (default: $INFRARSI_BANK, else "
                   "~/.local/share/infrarsi/bank.sqlite of the user each campaign runs as; "
                   "INFRARSI_BANK=off: none)");
    app.add_flag("--no-bank", no_bank, "neither seed from nor record into the experience bank");
    app.add_flag("--accept-noise", o.run.accept_noise,
                 "go on with a baseline too noisy to promote a gain of a usual size (as infrarsi run "
                 "--accept-noise; a campaign pauses there otherwise)");
    bool quiet = false;
    app.add_flag("--quiet,-q", quiet, "print only errors");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : infrarsi::kUsageExit; // app.exit prints the message or the help
    }
    if (campaigns.empty() && root.empty()) {
        fmt::print(stderr, "infrarsid: give --campaign DIR or --root DIR\n");
        return 2;
    }
    if (!o.run.spool.empty() && root.empty()) {
        fmt::print(stderr,
                   "infrarsid: --spool starts tune requests' campaigns under --root: give --root DIR\n");
        return 2;
    }
    o.run.verbose = !quiet;
    o.default_bank = !no_bank && o.run.bank.empty();
    if (no_bank) o.run.bank.clear();
    for (const auto& c : campaigns)
        o.campaigns.emplace_back(c);
    o.root = root;
    o.idle = std::chrono::seconds(idle);
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    try {
        return infrarsi::campaign::run_daemon(o, stop_requested) == 0 ? 0 : 1;
    } catch (const infrarsi::Error& e) {
        fmt::print(stderr, "infrarsid: {}\n", e.what());
        return 1;
    }
}

// Everything reaches here: an infrarsi::Error is a user's problem, already said in run_main; anything else
// is a bug, said as one, with its own exit code, never an abort with a core dump.
int main(int argc, char** argv) {
    try {
        return run_main(argc, argv);
    } catch (const std::exception& e) {
        fmt::print(stderr, "infrarsid: internal error (please report it): {}\n", e.what());
    } catch (...) {
        fmt::print(stderr, "infrarsid: internal error (please report it): an unknown exception\n");
    }
    return infrarsi::kInternalErrorExit;
}
