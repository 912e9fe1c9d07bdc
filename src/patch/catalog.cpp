#include "patch/catalog.hpp"

#include "util/error.hpp"
#include "util/fd.hpp"
#include "util/toml_limits.hpp"

#include <fmt/core.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cstring>
#include <fnmatch.h>
#include <fstream>
#include <set>
#include <sstream>

namespace infrarsi::patch {

bool PatchInfo::has_tag(const std::string& t) const {
    return std::find(tags.begin(), tags.end(), t) != tags.end();
}

std::vector<std::string> touched_paths(const std::string& diff) {
    std::set<std::string> paths;
    std::istringstream in(diff);
    std::string line;
    auto take = [&](std::string p) {
        if (auto tab = p.find('\t'); tab != std::string::npos) p = p.substr(0, tab);
        while (!p.empty() && (p.back() == ' ' || p.back() == '\r'))
            p.pop_back();
        if (p == "/dev/null") return;
        auto slash = p.find('/');
        paths.insert(slash == std::string::npos ? p : p.substr(slash + 1));
    };
    while (std::getline(in, line)) {
        if (line.rfind("--- ", 0) == 0 || line.rfind("+++ ", 0) == 0)
            take(line.substr(4));
        else if (line.rfind("rename from ", 0) == 0 || line.rfind("rename to ", 0) == 0 ||
                 line.rfind("copy from ", 0) == 0 || line.rfind("copy to ", 0) == 0)
            paths.insert(line.substr(line.find(' ', line.find(' ') + 1) + 1)); // after "rename from " etc.
    }
    return {paths.begin(), paths.end()};
}

bool changes_symlink(const std::string& diff) {
    std::istringstream in(diff);
    std::string line;
    while (std::getline(in, line))
        for (const char* h : {"new file mode ", "deleted file mode ", "new mode ", "old mode "})
            if (line.rfind(h, 0) == 0 && line.compare(std::strlen(h), 6, "120000") == 0) return true;
    return false;
}

bool path_matches(const std::string& pattern, const std::string& path) {
    if (pattern.size() >= 3 && pattern.compare(pattern.size() - 3, 3, "/**") == 0) {
        std::string dir = pattern.substr(0, pattern.size() - 3);
        return path.rfind(dir + "/", 0) == 0;
    }
    return fnmatch(pattern.c_str(), path.c_str(), FNM_PATHNAME) == 0;
}

ScopeDecision check_scope(const PatchInfo& p, const std::vector<std::string>& editable,
                          const std::vector<std::string>& protected_files) {
    if (p.touches.empty()) return {false, "the patch file changes no path (not a unified diff?)"};
    if (p.symlink) return {false, "creates or changes a symbolic link (git mode 120000)"};
    for (const auto& path : p.touches) {
        if (path.find("..") != std::string::npos || (!path.empty() && path[0] == '/'))
            return {false, "touches '" + path + "', which leaves the workload tree"};
        for (const auto& prot : protected_files)
            if (path == prot) return {false, "touches protected file '" + path + "'"};
        bool inside =
            std::any_of(editable.begin(), editable.end(), [&](auto& e) { return path_matches(e, path); });
        if (!inside) return {false, "touches '" + path + "', outside the editable scope"};
    }
    return {true, ""};
}

std::vector<PatchInfo> load_catalog(const fs::path& catalog) {
    toml::table root;
    auto at = [&](const toml::node& n) {
        return fmt::format("{}:{}", catalog.string(), n.source().begin.line);
    };
    // The user's file: read bounded and non-blocking, its keys and nesting checked before toml++ sees it.
    const std::string text = read_regular_file(catalog.string(), {.max_bytes = 1u << 20});
    check_toml_limits(text, catalog.string());
    try {
        root = toml::parse(text, catalog.string());
    } catch (const toml::parse_error& e) {
        throw Error("TOML syntax error: " + std::string(e.description()),
                    fmt::format("{}:{}", catalog.string(), e.source().begin.line), "valid TOML");
    }
    const toml::node* list = root.get("patch");
    if (!list) list = root.get("patches");
    std::vector<PatchInfo> out;
    if (!list) return out;
    if (!list->is_array_of_tables())
        throw Error("'patch' is not an array of tables", at(*list), "[[patch]] entries");
    std::set<std::string> ids;
    for (const auto& node : *list->as_array()) {
        const toml::table& t = *node.as_table();
        PatchInfo p;
        auto id = t["id"].value<std::string>();
        auto file = t["file"].value<std::string>();
        if (!id || id->empty()) throw Error("a patch entry has no id", at(t), "id = \"name\"");
        if (!file) throw Error("patch '" + *id + "' has no file", at(t), "file = \"name.patch\"");
        if (!ids.insert(*id).second) throw Error("patch id '" + *id + "' appears twice", at(t), "unique ids");
        p.id = *id;
        p.file = (catalog.parent_path() / *file).lexically_normal();
        if (!fs::is_regular_file(p.file))
            throw Error("patch file '" + p.file.string() + "' does not exist", at(t),
                        "a file next to the catalog");
        p.description = t["description"].value_or(std::string());
        auto strings = [&](const char* key) {
            std::vector<std::string> v;
            if (auto a = t[key].as_array())
                for (const auto& e : *a)
                    if (auto s = e.value<std::string>()) v.push_back(*s);
            return v;
        };
        p.tags = strings("tags");
        p.declared_touches = strings("touches");
        if (p.declared_touches.empty()) p.declared_touches = strings("touched");
        if (p.declared_touches.empty()) p.declared_touches = strings("paths");
        // A user's file: a regular file of bounded size, opened without blocking (a FIFO is refused).
        const std::string diff = read_regular_file(p.file.string(), {.max_bytes = 16u << 20});
        p.touches = touched_paths(diff);
        p.symlink = changes_symlink(diff);
        out.push_back(std::move(p));
    }
    return out;
}

} // namespace infrarsi::patch
