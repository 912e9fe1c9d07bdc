#include "patch/hash.hpp"

#include "util/sha256.hpp"

#include <algorithm>

namespace infrarsi::patch {

namespace {
bool skipped_dir(const fs::path& p) {
    auto name = p.filename().string();
    return name == ".git" || name.rfind("build", 0) == 0 || name == "__pycache__";
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
