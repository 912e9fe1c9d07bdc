#pragma once
// Sandboxes: an isolated copy of the workload tree with a patch set applied and built, cached by the hash of
// (baseline tree, patch files, build commands). A patch that does not apply or a build that fails is an
// outcome (recorded once, cached), never an exception. The user's tree is only read.
#include "patch/catalog.hpp"

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::patch {

struct SandboxSpec {
    fs::path source;                                     // the baseline tree
    std::string tree_hash;                               // its locked hash
    std::vector<std::vector<std::string>> build;         // commands with {source} and {build}
    std::vector<std::string> protected_files;            // relative to source
    std::vector<std::string> editable;                   // patterns a patch set may change (catalog.hpp)
    std::map<std::string, std::string> protected_hashes; // relative path -> locked hash
};

struct Sandbox {
    // OutOfScope: the patched tree differs from the baseline outside `editable`, or has a symlink
    // (patch/tree_diff.hpp). Values are stored in state.json: add at the end.
    enum class State { Ready, BuildFailure, ProtectedChanged, OutOfScope };
    State state = State::Ready;
    std::string hash;
    fs::path source, build; // the patched copy and its build directory
    std::string detail;     // failure summary (last lines of the log)
    fs::path log;
};

class SandboxCache {
  public:
    SandboxCache(fs::path root, SandboxSpec spec);
    std::string key(const std::vector<const PatchInfo*>& patches) const;
    // Builds (or finds) the sandbox of a patch set, applied in the given order.
    Sandbox materialize(const std::vector<const PatchInfo*>& patches);
    // The sandbox of a patch set if it was materialized before; never builds.
    std::optional<Sandbox> find(const std::vector<const PatchInfo*>& patches) const;

  private:
    fs::path root_;
    SandboxSpec spec_;
};

} // namespace infrarsi::patch
