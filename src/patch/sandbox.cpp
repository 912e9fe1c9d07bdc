#include "patch/sandbox.hpp"

#include "contract/contract.hpp"
#include "patch/build_log.hpp"
#include "patch/hash.hpp"
#include "patch/tree_diff.hpp"
#include "util/atomic_file.hpp"
#include "util/bounded_json.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"
#include "util/process.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <set>
#include <unistd.h>

namespace infrarsi::patch {

namespace {
// The last lines of a log, on one line (for a trial's one-line detail).
std::string tail(const std::string& s, std::size_t lines) {
    std::vector<std::string> all;
    std::string cur;
    for (char ch : s) {
        if (ch == '\n') {
            if (cur.find_first_not_of(" \t|~^") != std::string::npos) all.push_back(cur);
            cur.clear();
        } else {
            cur += ch;
        }
    }
    if (cur.find_first_not_of(" \t|~^") != std::string::npos) all.push_back(cur);
    std::string out;
    for (std::size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i)
        out += (out.empty() ? "" : " | ") + all[i];
    return out;
}

void copy_tree(const fs::path& from, const fs::path& to) {
    for (const auto& rel : tree_files(from)) {
        fs::create_directories((to / rel).parent_path());
        fs::copy_file(from / rel, to / rel, fs::copy_options::overwrite_existing);
        fs::permissions(to / rel, fs::status(from / rel).permissions());
    }
}
// Makes `to` hold exactly the files of `from`, rewriting only those whose content differs.
void sync_tree(const fs::path& from, const fs::path& to) {
    fs::create_directories(to);
    auto want = tree_files(from);
    std::set<fs::path> keep(want.begin(), want.end());
    for (const auto& rel : tree_files(to))
        if (!keep.count(rel)) fs::remove(to / rel);
    std::vector<fs::path> a, b;
    for (const auto& rel : want)
        if (fs::exists(to / rel)) a.push_back(from / rel), b.push_back(to / rel);
    auto ha = hash_files(a), hb = hash_files(b);
    for (const auto& rel : want) {
        bool same = fs::exists(to / rel) && ha[(from / rel).string()] == hb[(to / rel).string()];
        if (same) continue;
        fs::create_directories((to / rel).parent_path());
        fs::copy_file(from / rel, to / rel, fs::copy_options::overwrite_existing);
        fs::permissions(to / rel, fs::status(from / rel).permissions());
    }
}
} // namespace

SandboxCache::SandboxCache(fs::path root, SandboxSpec spec) : root_(std::move(root)), spec_(std::move(spec)) {
    fs::create_directories(root_);
}

std::string SandboxCache::key(const std::vector<const PatchInfo*>& patches) const {
    std::string text = "tree " + spec_.tree_hash + "\n";
    for (const auto& cmd : spec_.build) {
        for (const auto& a : cmd)
            text += a + '\0';
        text += '\n';
    }
    for (const auto& e : spec_.editable) // the content check's verdict depends on the scope
        text += "editable " + e + "\n";
    for (const auto* p : patches)
        text += "patch " + p->id + " " + hash_file(p->file) + "\n";
    return hash_text(text).substr(0, 16);
}

namespace {
// A sandbox's paths under the cache root; its state from state.json when that exists.
Sandbox locate(const fs::path& root, std::string hash) {
    Sandbox sb;
    sb.hash = std::move(hash);
    const fs::path dir = root / sb.hash;
    sb.source = dir / "src";
    sb.build = dir / "build";
    sb.log = dir / "build.log";
    return sb;
}

// A state.json that is not a whole, valid state (a disk filled while writing it, before writes were atomic;
// an edit) is treated as absent: the sandbox is built again, instead of every later run failing on it.
bool load_state(Sandbox& sb) {
    const fs::path path = sb.source.parent_path() / "state.json";
    nlohmann::json j;
    try {
        j = read_bounded_json(path.string(), "a sandbox state", {.max_bytes = 1u << 20},
                              /*follow_symlink=*/false);
    } catch (const Error&) {
        return false;
    }
    if (!j.is_object() || !j.contains("state") || !j.at("state").is_number_integer()) return false;
    const auto st = j.at("state").get<std::int64_t>();
    if (st < static_cast<int>(Sandbox::State::Ready) || st > static_cast<int>(Sandbox::State::OutOfScope))
        return false;
    sb.state = static_cast<Sandbox::State>(st);
    sb.detail = j.contains("detail") && j.at("detail").is_string() ? j.at("detail").get<std::string>() : "";
    return true;
}
} // namespace

std::optional<Sandbox> SandboxCache::find(const std::vector<const PatchInfo*>& patches) const {
    auto sb = locate(root_, key(patches));
    if (!load_state(sb)) return std::nullopt;
    return sb;
}

Sandbox SandboxCache::materialize(const std::vector<const PatchInfo*>& patches) {
    if (auto found = find(patches)) return *found;
    Sandbox sb = locate(root_, key(patches));
    const fs::path dir = root_ / sb.hash;
    // Build in a scratch directory and rename at the end, so a crash leaves no half-built sandbox behind.
    const fs::path work = root_ / (sb.hash + ".tmp-" + std::to_string(::getpid()));
    fs::remove_all(work);
    const fs::path src = work / "src", build = work / "build";
    fs::create_directories(build);
    copy_tree(spec_.source, src);
    std::string log;
    auto finish = [&](Sandbox::State st, const std::string& detail) {
        write_file_atomically(work / "build.log", log);
        nlohmann::json j = {{"state", static_cast<int>(st)}, {"detail", detail}};
        write_file_atomically(work / "state.json", j.dump(2) + "\n");
        fs::remove_all(dir);
        fs::rename(work, dir);
        load_state(sb);
        return sb;
    };
    // --fuzz=0: a hunk applies where its whole context matches, or not at all; GNU patch's default fuzz of 2
    // would let the code measured differ from the diff reviewed.
    for (const auto* p : patches) {
        auto r = run_process({"patch", "-p1", "--batch", "--forward", "--no-backup-if-mismatch", "--fuzz=0",
                              "-d", src.string(), "-i", p->file.string()});
        log += "$ patch -p1 < " + p->file.string() + "\n" + r.out + r.err;
        if (!r.ok())
            return finish(Sandbox::State::BuildFailure,
                          "patch " + p->id + " does not apply: " + tail(r.out + r.err, 3));
    }
    // Defense in depth: a protected file must be unchanged here.
    if (!spec_.protected_files.empty()) {
        std::vector<fs::path> files;
        for (const auto& f : spec_.protected_files)
            files.push_back(src / f);
        for (const auto& f : spec_.protected_files) {
            if (!fs::exists(src / f))
                return finish(Sandbox::State::ProtectedChanged, "protected file " + f + " removed");
        }
        auto hashes = hash_files(files);
        for (const auto& f : spec_.protected_files) {
            auto it = spec_.protected_hashes.find(f);
            if (it != spec_.protected_hashes.end() && hashes[(src / f).string()] != it->second)
                return finish(Sandbox::State::ProtectedChanged, "protected file " + f + " changed");
        }
    }
    // By content, whatever the patch files' headers say: nothing outside the editable scope changed, and no
    // symlink was made (the catalog's scope check reads the headers; GNU patch may read them differently).
    if (!patches.empty())
        if (const auto why = out_of_scope(compare_trees(spec_.source, src), spec_.editable); !why.empty())
            return finish(Sandbox::State::OutOfScope, "the patch set " + why);
    fs::remove_all(dir);
    fs::rename(work, dir);
    auto finish_in_place = [&](Sandbox::State st, const std::string& detail) {
        write_file_atomically(sb.log, log);
        nlohmann::json j = {{"state", static_cast<int>(st)}, {"detail", detail}};
        write_file_atomically(dir / "state.json", j.dump(2) + "\n");
        load_state(sb);
        return sb;
    };
    // Builds are incremental in one workspace: its source tree is synced to this patch set (only files whose
    // content differs are rewritten, so make recompiles just what a patch changed), built, and its build
    // directory copied into the sandbox. Trials run the sandbox's copy.
    const fs::path ws = root_ / "workspace", ws_src = ws / "src", ws_build = ws / "build";
    fs::create_directories(ws_build);
    sync_tree(sb.source, ws_src);
    std::map<std::string, std::string> vars{{"source", ws_src.string()}, {"build", ws_build.string()}};
    for (const auto& cmd : spec_.build) {
        auto argv = contract::substitute(cmd, vars);
        ProcessOptions o;
        o.cwd = ws_build.string();
        o.timeout = std::chrono::minutes(30);
        ProcessResult r;
        try {
            r = run_process(argv, o);
        } catch (const Error& e) {
            log += e.what();
            return finish_in_place(Sandbox::State::BuildFailure, e.what());
        }
        log += "$ " + describe_command(argv) + "\n" + r.out + r.err;
        if (!r.ok())
            return finish_in_place(
                Sandbox::State::BuildFailure,
                (r.timed_out ? "build timed out: " : "build failed: ") +
                    first_build_error(r.err + "\n" + r.out).value_or(tail(r.err.empty() ? r.out : r.err, 3)));
    }
    fs::remove_all(sb.build);
    auto cp = run_process({"cp", "-a", ws_build.string(), sb.build.string()});
    if (!cp.ok())
        throw Error("cannot copy the build: " + cp.err, sb.build.string(), "disk space for the sandbox");
    return finish_in_place(Sandbox::State::Ready, "");
}

} // namespace infrarsi::patch
