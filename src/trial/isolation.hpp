#pragma once
// Containment: while a trial runs, its processes see no campaign's evidence and no experience bank: not their
// own campaign's other trials, doctor log or database, not a sibling campaign, not the bank, not the plugin's
// spool. Every step of a trial job enters a private mount namespace (the plugin, in slurmstepd's task_init,
// for each task of each step, `srun --overlap` included; the trial wrapper itself where no plugin did, as
// under the local scheduler) in which each hidden directory is an empty read-only tmpfs and only what the
// trial needs is bound back: its trial directory, its sandbox and batch manifest (read-only), and the paths
// its command, arguments and environment name (read-only). As root the namespace is entered directly;
// otherwise inside an unprivileged user namespace that maps only the caller's uid and gid, so nothing here
// acts with more rights than the job's user. This file is the one place that builds the plan and enters the
// namespace. Rules and limits: docs/orchestrator.md ("Isolation").
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::trial {

struct ManifestTask;

// What the host adds to what a campaign's manifest says: where else campaigns and evidence live.
struct ContainmentSite {
    // Directories that hold campaigns (plugstack `campaign_roots=`): hidden whole; of what they hold, only
    // what the task names and is no campaign is bound back.
    std::vector<std::filesystem::path> roots;
    std::filesystem::path spool;               // the plugin's spool: hidden whole, nothing of it bound back
    std::vector<std::filesystem::path> bank;   // the experience bank files the job could reach (bank_files)
    std::vector<std::filesystem::path> inputs; // further paths the job needs (the wrapper, INFRARSI_BIN)
    std::filesystem::path home;                // the user's home directory: never hidden whole
};

// The bank files a job's environment can name, by bank::default_bank_path's rule: $INFRARSI_BANK (none for
// "off"), $XDG_DATA_HOME/infrarsi/bank.sqlite and <home>/.local/share/infrarsi/bank.sqlite (the default,
// from the account's home, whatever the environment says). `env` returns "" for an unset variable.
std::vector<std::filesystem::path> bank_files(const std::function<std::string(const char*)>& env,
                                              const std::filesystem::path& home);

struct IsolationPlan {
    std::filesystem::path campaign; // the trial's campaign directory (canonical)
    // Directories replaced by an empty read-only tmpfs (canonical; none inside another): the campaign and
    // each sibling campaign (a directory beside it holding a campaign.db), the site's roots, the bank's
    // directory unless it is too shared to hide (/, a directory right under it, the user's home or above).
    std::vector<std::filesystem::path> hide;
    // Files covered by an empty read-only file: a bank whose directory is too shared to hide.
    std::vector<std::filesystem::path> hide_files;
    struct Bind {
        std::filesystem::path path; // canonical, strictly inside one of `hide`
        bool read_only = false;
        bool operator==(const Bind&) const = default;
    };
    // Bound back, none inside another: the trial directory (writable), its sandbox and the batch manifest
    // (read-only: shared by other trials), and the named inputs (read-only).
    std::vector<Bind> keep;
    std::vector<std::string> refused; // named inputs not bound back, and why
};

// The plan for a task of a campaign's batch manifest (<campaign>/batches/<n>/manifest.json beside
// <campaign>/campaign.db). nullopt for a manifest that is not a campaign's (written by hand for the plugin):
// there is no campaign directory to hide.
std::optional<IsolationPlan> isolation_plan(const std::filesystem::path& manifest, const ManifestTask& task,
                                            const ContainmentSite& site = {});

// The same for any process of a campaign that may see only `own` of it (canonical paths strictly inside
// `campaign`, the canonical campaign directory): the agent's call (agent/exec.hpp) is one. `named` are the
// further paths it needs (its command's), bound back read-only unless they are or hold a campaign or the
// bank.
IsolationPlan isolation_plan_for(const std::filesystem::path& campaign, std::vector<IsolationPlan::Bind> own,
                                 std::vector<std::filesystem::path> named, const ContainmentSite& site = {});

struct Isolation {
    bool in_place = false;
    std::string detail; // how, or why not
};

// Enters the namespace for this process and the children it starts afterwards, and re-enters its working
// directory through the new view (a working directory inside a hidden one would otherwise still reach what
// lies under it). As root it also drops, from the capability bounding set, what would undo or bypass the
// mounts (CAP_SYS_ADMIN, CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH). Opens what it binds back without following
// symlinks (the plan's paths are canonical: a symlink that appeared since is refused). Never throws: a kernel
// that refuses (no user namespaces for unprivileged users) leaves the process uncontained, and Isolation
// says why.
Isolation isolate(const IsolationPlan& plan);

// When this process already is in a private view (the plugin's, made for every step of the job): what it
// hides, read from /proc/self/mountinfo (the tmpfs mounts named infrarsi-trial); nullopt otherwise.
std::optional<std::string> private_view();

// The site as this process sees it without the plugin (the trial wrapper under the local scheduler): the bank
// files its environment names, and its user's home from the account database.
ContainmentSite site_of_this_process();

// The one entry point, for the plugin (each task of each step) and the trial wrapper: a process already in
// a private view is left as it is and says so; otherwise the plan, then isolate(). nullopt for a manifest
// that is not a campaign's.
std::optional<Isolation> contain(const std::filesystem::path& manifest, const ManifestTask& task,
                                 const ContainmentSite& site = {});

} // namespace infrarsi::trial
