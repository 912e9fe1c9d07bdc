#pragma once
// The patch catalog (catalog.toml next to the patches: [[patch]] id, file, description, tags, touches) and
// the scope check: a patch may touch only paths inside the editable scope and never a protected file. The
// check reads the paths from the diff itself, not from what the catalog claims.
#include <filesystem>
#include <string>
#include <vector>

namespace infrarsi::patch {

namespace fs = std::filesystem;

struct PatchInfo {
    std::string id;
    fs::path file; // absolute
    std::string description;
    std::vector<std::string> tags; // memory_saver, memory_hungry, math_changing, expected_build_failure, ...
    std::vector<std::string> declared_touches;
    std::vector<std::string> touches; // from the diff
    bool symlink = false; // the diff creates, changes or deletes a symbolic link (git mode 120000)
    bool has_tag(const std::string& t) const;
};

// Throws infrarsi::Error naming file:line for malformed entries and missing patch files.
std::vector<PatchInfo> load_catalog(const fs::path& catalog);

// Paths a unified diff creates, changes or deletes (with its first component stripped, as patch -p1),
// including both sides of git's renames and copies: every path GNU patch would write.
std::vector<std::string> touched_paths(const std::string& diff);
// Whether a git diff makes or changes a symbolic link (mode 120000), which GNU patch would create and the
// tree hash would then follow.
bool changes_symlink(const std::string& diff);

// Shell-style pattern match; "dir/**" matches everything below dir, "*" does not cross "/".
bool path_matches(const std::string& pattern, const std::string& path);

struct ScopeDecision {
    bool accepted = false;
    std::string reason; // why refused (the first offending path)
};
ScopeDecision check_scope(const PatchInfo& p, const std::vector<std::string>& editable,
                          const std::vector<std::string>& protected_files);

} // namespace infrarsi::patch
