#pragma once
// Content hashes (SHA-256, util/sha256) of files, trees and texts: the locks of a campaign and
// the keys of the sandbox build cache.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace infrarsi::patch {

namespace fs = std::filesystem;

std::string hash_text(const std::string& text);
std::map<std::string, std::string> hash_files(const std::vector<fs::path>& files); // path -> hex
std::string hash_file(const fs::path& file);
// Every regular file under root (relative path and content), skipping .git and build* directories.
std::string hash_tree(const fs::path& root);
std::vector<fs::path> tree_files(const fs::path& root); // relative paths, sorted

} // namespace infrarsi::patch
