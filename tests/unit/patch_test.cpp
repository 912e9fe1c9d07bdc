#include "patch/catalog.hpp"
#include "patch/hash.hpp"
#include "patch/sandbox.hpp"

#include <doctest/doctest.h>

#include <algorithm>

#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace infrarsi;

namespace {
const fs::path fixtures = INFRARSI_FIXTURES;
const patch::PatchInfo& find(const std::vector<patch::PatchInfo>& c, const std::string& id) {
    for (const auto& p : c)
        if (p.id == id) return p;
    FAIL("no patch " << id);
    throw;
}
} // namespace

TEST_CASE("touched paths come from the diff headers, with the first component stripped") {
    std::string diff =
        "diff -ruN a/x.c b/x.c\n--- a/x.c\t2026-01-01\n+++ b/x.c\t2026-01-01\n@@ -1 +1 @@\n-a\n+b\n"
        "--- a/dev/null\n--- /dev/null\n+++ b/new/y.c\n";
    auto p = patch::touched_paths(diff);
    CHECK(std::find(p.begin(), p.end(), "x.c") != p.end());
    CHECK(std::find(p.begin(), p.end(), "new/y.c") != p.end());
}

TEST_CASE("the scope check refuses protected files and paths outside the editable scope, whatever the "
          "catalog claims") {
    auto cat = patch::load_catalog(fixtures / "toyload-patches/catalog.toml");
    std::vector<std::string> editable{"kernels/*"}, prot{"main.c", "loss.c"};
    CHECK(patch::check_scope(find(cat, "fast_kernel"), editable, prot).accepted);
    auto loss = patch::check_scope(find(cat, "edit_loss"), editable, prot);
    CHECK_FALSE(loss.accepted);
    CHECK(loss.reason.find("protected file 'loss.c'") != std::string::npos);
    // outside_scope declares kernels/compute.c but its diff adds bench/extra.c.
    auto out = patch::check_scope(find(cat, "outside_scope"), editable, prot);
    CHECK_FALSE(out.accepted);
    CHECK(out.reason.find("bench/extra.c") != std::string::npos);
}

TEST_CASE("path patterns: * stays in its directory, /** covers the subtree") {
    CHECK(patch::path_matches("kernels/*", "kernels/a.c"));
    CHECK_FALSE(patch::path_matches("kernels/*", "kernels/sub/a.c"));
    CHECK(patch::path_matches("kernels/**", "kernels/sub/a.c"));
    CHECK_FALSE(patch::path_matches("kernels/**", "kernelsx/a.c"));
}

TEST_CASE(
    "a sandbox applies and builds a patch set, caches it (find sees it), and records a build failure as an "
    "outcome") {
    fs::path root = fs::temp_directory_path() / ("infrarsi-sandbox-" + std::to_string(::getpid()));
    fs::remove_all(root);
    patch::SandboxSpec spec;
    spec.source = fixtures / "toyload";
    spec.tree_hash = patch::hash_tree(spec.source);
    spec.build = {{"cc", "-O2", "-o", "{build}/toy", "{source}/main.c", "{source}/loss.c",
                   "{source}/kernels/compute.c", "-lm"}};
    spec.protected_files = {"loss.c"};
    spec.protected_hashes["loss.c"] = patch::hash_file(spec.source / "loss.c");
    patch::SandboxCache cache(root, spec);
    auto cat = patch::load_catalog(fixtures / "toyload-patches/catalog.toml");
    CHECK_FALSE(cache.find({&find(cat, "fast_kernel")})); // find never builds
    auto ok = cache.materialize({&find(cat, "fast_kernel")});
    CHECK(ok.state == patch::Sandbox::State::Ready);
    auto found = cache.find({&find(cat, "fast_kernel")});
    REQUIRE(found);
    CHECK(found->state == patch::Sandbox::State::Ready);
    CHECK(found->build == ok.build);
    CHECK(fs::exists(ok.build / "toy"));
    CHECK(ok.hash == cache.materialize({&find(cat, "fast_kernel")}).hash);
    auto broken = cache.materialize({&find(cat, "broken_build")});
    CHECK(broken.state == patch::Sandbox::State::BuildFailure);
    CHECK(broken.detail.find("build failed") != std::string::npos);
    auto prot = cache.materialize({&find(cat, "edit_loss")});
    CHECK(prot.state == patch::Sandbox::State::ProtectedChanged);
    // The user's tree is only read.
    CHECK(patch::hash_tree(spec.source) == spec.tree_hash);
    fs::remove_all(root);
}

TEST_CASE("a corrupt cache entry (a 0-byte or foreign state.json) is treated as absent and rebuilt") {
    fs::path root = fs::temp_directory_path() / ("infrarsi-sandbox-corrupt-" + std::to_string(::getpid()));
    fs::remove_all(root);
    patch::SandboxSpec spec;
    spec.source = fixtures / "toyload";
    spec.tree_hash = patch::hash_tree(spec.source);
    spec.build = {{"cc", "-O2", "-o", "{build}/toy", "{source}/main.c", "{source}/loss.c",
                   "{source}/kernels/compute.c", "-lm"}};
    patch::SandboxCache cache(root, spec);
    auto cat = patch::load_catalog(fixtures / "toyload-patches/catalog.toml");
    auto ok = cache.materialize({&find(cat, "fast_kernel")});
    REQUIRE(ok.state == patch::Sandbox::State::Ready);
    const fs::path state = ok.source.parent_path() / "state.json";
    // What a full disk left behind before writes were checked: an empty state.json, renamed into place.
    for (const char* bad : {"", "{\"state\": ", "{\"state\": 7}", "{\"state\": \"x\"}", "[]"}) {
        std::ofstream(state, std::ios::trunc) << bad;
        CHECK_FALSE(cache.find({&find(cat, "fast_kernel")}));
        auto again = cache.materialize({&find(cat, "fast_kernel")});
        CHECK(again.state == patch::Sandbox::State::Ready);
        CHECK(fs::exists(again.build / "toy"));
    }
    fs::remove_all(root);
}

TEST_CASE("the scope check sees git copies and symlinks as patch(1) applies them") {
    const std::string copy = "diff --git a/main.c b/../outside.c\n"
                             "similarity index 100%\ncopy from main.c\ncopy to ../outside.c\n";
    auto paths = patch::touched_paths(copy);
    CHECK(std::find(paths.begin(), paths.end(), "../outside.c") != paths.end());
    patch::PatchInfo p;
    p.id = "copy";
    p.touches = paths;
    CHECK_FALSE(patch::check_scope(p, {"kernels/**", "main.c"}, {}).accepted);
    const std::string copy_inside = "diff --git a/main.c b/notes.c\ncopy from main.c\ncopy to notes.c\n";
    p.touches = patch::touched_paths(copy_inside);
    CHECK_FALSE(patch::check_scope(p, {"main.c"}, {}).accepted); // notes.c is outside `editable`
    const std::string link = "diff --git a/kernels/x.c b/kernels/x.c\nnew file mode 120000\nindex 0000000..1\n"
                             "--- /dev/null\n+++ b/kernels/x.c\n@@ -0,0 +1 @@\n+/etc/shadow\n\\ No newline at end "
                             "of file\n";
    CHECK(patch::changes_symlink(link));
    CHECK_FALSE(patch::changes_symlink(copy));
    p.touches = patch::touched_paths(link);
    p.symlink = patch::changes_symlink(link);
    auto d = patch::check_scope(p, {"kernels/**"}, {});
    CHECK_FALSE(d.accepted);
    CHECK(d.reason.find("symbolic link") != std::string::npos);
}

TEST_CASE("a patch applies with its whole context or not at all (no fuzz)") {
    fs::path root = fs::temp_directory_path() / ("infrarsi-sandbox-fuzz-" + std::to_string(::getpid()));
    fs::remove_all(root);
    fs::create_directories(root);
    // fast_kernel with its first context line changed: GNU patch's default fuzz would apply it anyway.
    std::ifstream in(fixtures / "toyload-patches/fast_kernel.patch");
    std::string text{std::istreambuf_iterator<char>(in), {}};
    const std::string ctx = " double kernel_work(long iterations) {";
    REQUIRE(text.find(ctx) != std::string::npos);
    text.replace(text.find(ctx), ctx.size(), " double kernel_work(long count) {");
    std::ofstream(root / "fuzzy.patch") << text;
    patch::PatchInfo fuzzy;
    fuzzy.id = "fuzzy";
    fuzzy.file = root / "fuzzy.patch";
    patch::SandboxSpec spec;
    spec.source = fixtures / "toyload";
    spec.tree_hash = patch::hash_tree(spec.source);
    spec.build = {{"true"}};
    patch::SandboxCache cache(root / "cache", spec);
    auto sb = cache.materialize({&fuzzy});
    CHECK(sb.state == patch::Sandbox::State::BuildFailure);
    CHECK(sb.detail.find("does not apply") != std::string::npos);
    fs::remove_all(root);
}
