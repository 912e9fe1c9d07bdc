#include "patch/hash.hpp"

#include "util/sha256.hpp"

#include <algorithm>

namespace infrarsi::patch {

namespace {
// Left out of the hash and of every sandbox copy: version control, byte-code caches, and build
// directories. A directory is a build directory when it is named "build", or when its name starts with
// "build" and it holds a CMakeCache.txt (build-release/, build_debug/): a source directory that only starts
// with "build" (a Python package builders/, build_utils/) is code and must reach the sandbox.
bool skipped_dir(const fs::path& p) {
    auto name = p.filename().string();
    if (name == ".git" || name == "__pycache__" || name == "build") return true;
    std::error_code ec;
    return name.rfind("build", 0) == 0 && fs::exists(p / "CMakeCache.txt", ec);
}
} // namespace

std::string hash_text(const std::string& text) {
    return sha256_hex(text);
}

std::map<std::string, std::string> hash_files(const std::vector<fs::path>& files) {
    std::map<std::string, std::string> out;
    for (const auto& f : files)
        out[f.string()] = sha256_file_hex(f);
    return out;
}

std::string hash_file(const fs::path& file) {
    return sha256_file_hex(file);
}

std::vector<fs::path> tree_files(const fs::path& root) {
    std::vector<fs::path> files;
    for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
        if (it->is_directory() && skipped_dir(it->path())) {
            it.disable_recursion_pending();
            continue;
        }
        // The path as it lies in the tree: fs::relative would resolve a symlink to its target (which may be
        // outside the tree), and a copy would then go there.
        if (it->is_regular_file()) files.push_back(it->path().lexically_relative(root));
    }
    std::sort(files.begin(), files.end());
    return files;
}

std::string hash_tree(const fs::path& root) {
    auto rel = tree_files(root);
    std::vector<fs::path> abs;
    for (const auto& r : rel)
        abs.push_back(root / r);
    auto hashes = hash_files(abs);
    std::string manifest;
    for (std::size_t i = 0; i < rel.size(); ++i)
        manifest += rel[i].string() + '\0' + hashes[abs[i].string()] + '\n';
    return hash_text(manifest);
}

} // namespace infrarsi::patch
