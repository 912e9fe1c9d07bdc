#include "patch/tree_diff.hpp"

#include "patch/catalog.hpp"
#include "patch/hash.hpp"

#include <algorithm>
#include <fstream>
#include <set>

namespace infrarsi::patch {

namespace fs = std::filesystem;

namespace {

bool same_content(const fs::path& a, const fs::path& b) {
    std::error_code ec;
    if (fs::file_size(a, ec) != fs::file_size(b, ec) || ec) return false;
    std::ifstream fa(a, std::ios::binary), fb(b, std::ios::binary);
    std::vector<char> ba(1 << 16), bb(1 << 16);
    while (fa && fb) {
        fa.read(ba.data(), static_cast<std::streamsize>(ba.size()));
        fb.read(bb.data(), static_cast<std::streamsize>(bb.size()));
        if (fa.gcount() != fb.gcount() || !std::equal(ba.begin(), ba.begin() + fa.gcount(), bb.begin()))
            return false;
    }
    return fa.eof() && fb.eof();
}

} // namespace

std::vector<TreeChange> compare_trees(const fs::path& baseline, const fs::path& patched) {
    std::vector<TreeChange> out;
    const auto base = tree_files(baseline);
    const std::set<fs::path> base_set(base.begin(), base.end());
    std::set<fs::path> seen;
    for (auto it = fs::recursive_directory_iterator(patched); it != fs::recursive_directory_iterator();
         ++it) {
        const auto rel = it->path().lexically_relative(patched); // not fs::relative: it resolves symlinks
        const auto st = it->symlink_status().type();
        if (st == fs::file_type::directory) continue;
        if (st == fs::file_type::symlink) {
            out.push_back({TreeChange::Kind::Symlink, rel.string()});
            continue;
        }
        if (st != fs::file_type::regular) {
            out.push_back({TreeChange::Kind::Special, rel.string()});
            continue;
        }
        seen.insert(rel);
        if (!base_set.count(rel))
            out.push_back({TreeChange::Kind::Added, rel.string()});
        else if (!same_content(baseline / rel, it->path()))
            out.push_back({TreeChange::Kind::Changed, rel.string()});
    }
    for (const auto& rel : base)
        if (!seen.count(rel)) out.push_back({TreeChange::Kind::Removed, rel.string()});
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.path < b.path; });
    return out;
}

std::string out_of_scope(const std::vector<TreeChange>& changes, const std::vector<std::string>& editable) {
    for (const auto& c : changes) {
        switch (c.kind) {
        case TreeChange::Kind::Symlink:
            return "makes a symlink at " + c.path + " (a patch may change regular files only)";
        case TreeChange::Kind::Special:
            return "makes a special file at " + c.path;
        default:
            break;
        }
        const bool inside = std::any_of(editable.begin(), editable.end(),
                                        [&](const auto& e) { return path_matches(e, c.path); });
        if (inside) continue;
        const char* verb = c.kind == TreeChange::Kind::Added     ? "adds"
                           : c.kind == TreeChange::Kind::Removed ? "removes"
                                                                 : "changes";
        return std::string(verb) + " " + c.path + " outside the editable scope";
    }
    return {};
}

} // namespace infrarsi::patch
