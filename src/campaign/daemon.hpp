#pragma once
// The daemon loop: drive every unfinished campaign (given directly, or found under a root directory) until
// its budget ends, one campaign step at a time; stop cleanly on SIGTERM/SIGINT. All state is in each
// campaign's store, so the daemon may be killed at any time (even SIGKILL) and restarted, or run as a Slurm
// job (sbatch/infrarsid.sbatch). With a spool and a root, each scan also takes the plugin's tune requests
// (campaign/tune_intake.hpp) and starts their campaigns under the root. Run as root (a site's daemon), it
// never runs a user's campaign as root: each user's directory under the root is driven by a worker process
// that dropped to that user (util/privilege.hpp); the root's own campaign directories run as before.
#include "campaign/campaign.hpp"

#include <atomic>
#include <filesystem>
#include <optional>
#include <vector>

namespace infrarsi::campaign {

struct DaemonOptions {
    std::vector<std::filesystem::path> campaigns;
    std::filesystem::path root; // every subdirectory holding campaign.db
    bool once = false;          // exit when every campaign is done
    bool take_requests = true;  // with run.spool and root: take the spool's tune requests (a worker does not)
    std::chrono::seconds idle{10};
    RunOptions run; // run.spool: the plugin's spool (tune requests, allocation records)
};

// Returns the number of campaigns that failed with an error (each is logged and skipped).
int run_daemon(const DaemonOptions& o, const std::atomic<bool>& stop);

} // namespace infrarsi::campaign
