#pragma once
// The daemon loop: drive every unfinished campaign (given directly, or found under a root directory) until
// its budget ends, one campaign step at a time; stop cleanly on SIGTERM/SIGINT. All state is in each
// campaign's store, so the daemon may be killed at any time (even SIGKILL) and restarted, or run as a Slurm
// job (sbatch/infrarsid.sbatch). With a spool and a root, each scan also takes the plugin's tune requests
// (campaign/tune_intake.hpp) and starts their campaigns under the root. Run as root (a site's daemon), it
// never acts on a user's content as root: it asks who controls each directory it is given (path_control,
// util/privilege.hpp) before it opens anything in it. A directory (a --campaign, the --root, or an entry of
// the root) that a user controls is driven by a worker process that dropped to that user, and root neither
// opens, locks nor stats anything in it (the worker finds the campaigns); one that no one user controls (a
// directory on the way writable by others) is driven by no one. Root drives in its own process only the
// campaigns nobody else can change (root_campaign_problem).
#include "campaign/campaign.hpp"

#include <atomic>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::campaign {

struct DaemonOptions {
    std::vector<std::filesystem::path> campaigns;
    std::filesystem::path root; // every subdirectory holding campaign.db
    bool once = false;          // exit when every campaign is done
    bool take_requests = true;  // with run.spool and root: take the spool's tune requests (a worker does not)
    std::chrono::seconds idle{10};
    // run.bank empty and this set: each process that drives campaigns (root's own, and each user's worker
    // once it is that user) takes bank::default_bank_path() as it sees it, so a user's campaigns record into
    // that user's bank (or the site's INFRARSI_BANK), never into root's.
    bool default_bank = false;
    RunOptions run; // run.spool: the plugin's spool (tune requests, allocation records)
};

// Why a root daemon may not drive the campaign in `dir` in its own process (empty: it may): only root can
// change the path (path_control), its campaign.db is a regular file, every entry directly in it is root's
// and writable by nobody else, and so are the contract, the workload's tree, batch script and patch catalog
// it names. A user who could have changed any of them could run code as root through it. (The commands the
// contract names are root's choice: an absolute path there is not checked.)
std::string root_campaign_problem(const std::filesystem::path& dir);

// Returns the number of campaigns that failed with an error (each is logged and skipped).
int run_daemon(const DaemonOptions& o, const std::atomic<bool>& stop);

} // namespace infrarsi::campaign
