#pragma once
// What a patch set changed in a tree, by content rather than by what its headers say: the patched copy is
// compared file by file with the baseline tree it was copied from (patch/hash.hpp's tree_files: the files a
// sandbox copies). A sandbox is refused when anything changed outside the contract's editable scope, or when
// the patches made anything but regular files and directories (a symlink can route a write or a build around
// the scope check). docs/contract.md, "[patches]".
#include <filesystem>
#include <string>
#include <vector>

namespace infrarsi::patch {

struct TreeChange {
    enum class Kind { Added, Removed, Changed, Symlink, Special };
    Kind kind = Kind::Changed;
    std::string path; // relative to the tree
};

// Every change from `baseline` (its tree_files) to `patched` (walked whole, symlinks not followed), by path.
std::vector<TreeChange> compare_trees(const std::filesystem::path& baseline,
                                      const std::filesystem::path& patched);

// Empty when every change is a regular file inside `editable` (patch/catalog.hpp's path_matches); else the
// first offending change, for people ("adds CMakeLists.txt.rej outside the editable scope").
std::string out_of_scope(const std::vector<TreeChange>& changes, const std::vector<std::string>& editable);

} // namespace infrarsi::patch
