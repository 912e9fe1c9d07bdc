#pragma once
// While a trial runs, its processes see none of the campaign's evidence: no other trial's output, no doctor
// log, no campaign database, no scheduler records. The trial wrapper (trial/exec.cpp), before it starts the
// workload, enters a mount namespace of its own (as root; otherwise in an unprivileged user namespace that
// maps only its own uid and gid) in which the campaign directory is an empty tmpfs with the trial's own
// directories bound back: its trial directory and its sandbox (the patched source and the build it runs).
// Rules and limits: docs/orchestrator.md ("Isolation").
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::trial {

struct ManifestTask;

struct IsolationPlan {
    std::filesystem::path hide;              // the campaign directory (canonical)
    std::vector<std::filesystem::path> keep; // directories under it the trial may see (canonical)
    // Of `keep`, those bound back read-only: the sandbox (patched source and build), shared by every trial
    // of its patch set, so that no trial leaves state there for a later one (the equivalence run and the
    // A/B pairs run the same sandbox).
    std::vector<std::filesystem::path> read_only;
};

// The plan for a task of a campaign's batch manifest (<campaign>/batches/<n>/manifest.json beside
// <campaign>/campaign.db): keep its workdir, the directories of its result and log, and its sandbox
// (<campaign>/sandboxes/<hash>, the parent of its build; read-only). nullopt for a manifest that is not a
// campaign's (written by hand for the plugin): there is no campaign directory to hide.
std::optional<IsolationPlan> isolation_plan(const std::filesystem::path& manifest, const ManifestTask& task);

struct Isolation {
    bool in_place = false;
    std::string detail; // how, or why not
};

// Enters the namespace for this process and the children it starts afterwards. As root it also drops, from
// the capability bounding set, what would undo or bypass the mounts (CAP_SYS_ADMIN, CAP_SYS_PTRACE,
// CAP_DAC_READ_SEARCH), so the workload it executes has none of them. Never throws: a kernel that refuses
// (no user namespaces for unprivileged users) leaves the trial unisolated, and Isolation says why.
Isolation isolate(const IsolationPlan& plan);

} // namespace infrarsi::trial
