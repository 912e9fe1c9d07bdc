#include "patch/hash.hpp"

#include "util/error.hpp"
#include "util/process.hpp"

#include <algorithm>
#include <sstream>

namespace infrarsi::patch {

namespace {
bool skipped_dir(const fs::path& p) {
    auto name = p.filename().string();
    return name == ".git" || name.rfind("build", 0) == 0 || name == "__pycache__";
}
} // namespace

std::string hash_text(const std::string& text) {
    ProcessOptions o;
    o.stdin_data = text;
    auto r = run_process({"sha256sum", "-"}, o);
    if (!r.ok()) throw Error("sha256sum failed: " + r.err, "hash", "coreutils sha256sum");
    return r.out.substr(0, 64);
}

std::map<std::string, std::string> hash_files(const std::vector<fs::path>& files) {
    std::map<std::string, std::string> out;
    const std::size_t chunk = 200;
    for (std::size_t i = 0; i < files.size(); i += chunk) {
        std::vector<std::string> argv{"sha256sum", "--"};
        for (std::size_t j = i; j < std::min(files.size(), i + chunk); ++j)
            argv.push_back(files[j].string());
        auto r = run_process(argv);
        if (!r.ok())
            throw Error("cannot hash files: " + r.err, describe_command({argv[0], argv[2]}),
                        "readable files");
        std::istringstream in(r.out);
        std::string line;
        std::size_t j = i;
        while (std::getline(in, line) && j < files.size()) {
            // sha256sum escapes odd names with a leading backslash; we keep our own order instead.
            auto hex = line.substr(line[0] == '\\' ? 1 : 0, 64);
            out[files[j++].string()] = hex;
        }
    }
    return out;
}

std::string hash_file(const fs::path& file) {
    return hash_files({file}).at(file.string());
}

std::vector<fs::path> tree_files(const fs::path& root) {
    std::vector<fs::path> files;
    for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
        if (it->is_directory() && skipped_dir(it->path())) {
            it.disable_recursion_pending();
            continue;
        }
        if (it->is_regular_file()) files.push_back(fs::relative(it->path(), root));
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
