#include "patch/catalog.hpp"
#include "patch/hash.hpp"
#include "patch/sandbox.hpp"
#include "patch/tree_diff.hpp"

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
    spec.editable = {"kernels/*"};
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

namespace {
// A small workload tree with a build file outside the editable scope, and patches written beside it.
struct TrickTree {
    fs::path dir = fs::temp_directory_path() / ("infrarsi-trick-" + std::to_string(::getpid()));
    fs::path source = dir / "src", patches = dir / "patches";
    TrickTree() {
        fs::remove_all(dir);
        fs::create_directories(source / "kernels");
        fs::create_directories(patches);
        std::ofstream(source / "kernels/compute.c") << "int a;\n";
        std::ofstream(source / "Makefile") << "all:\n\techo build\n";
    }
    ~TrickTree() { fs::remove_all(dir); }
    patch::PatchInfo write(const std::string& id, const std::string& diff) const {
        std::ofstream(patches / (id + ".patch")) << diff;
        patch::PatchInfo p;
        p.id = id;
        p.file = patches / (id + ".patch");
        p.touches = patch::touched_paths(diff);
        return p;
    }
    patch::Sandbox apply(const patch::PatchInfo& p) const {
        patch::SandboxSpec spec;
        spec.source = source;
        spec.tree_hash = patch::hash_tree(source);
        spec.build = {{"true"}};
        spec.editable = {"kernels/*"};
        patch::SandboxCache cache(dir / "sandboxes", spec);
        return cache.materialize({&p});
    }
};
} // namespace

TEST_CASE("the sandbox is checked by content: a header trick that patches the build file, or a symlink, "
          "is refused although the headers name only editable files") {
    TrickTree t;
    // GNU patch also applies the normal-format hunk below, to the file its Index: line names; the headers
    // the catalog's scope check reads name only kernels/compute.c.
    const auto trick = t.write("trick", "--- a/kernels/compute.c\n+++ b/kernels/compute.c\n@@ -1 +1 @@\n"
                                        "-int a;\n+int b;\nIndex: x/Makefile\n2c2\n< \techo build\n---\n"
                                        "> \techo pwned\n");
    CHECK(patch::check_scope(trick, {"kernels/*"}, {}).accepted); // the headers pass
    const auto tricked = t.apply(trick);
    CHECK(tricked.state == patch::Sandbox::State::OutOfScope);
    CHECK(tricked.detail.find("changes Makefile outside the editable scope") != std::string::npos);

    const auto link = t.write("link", "diff --git a/kernels/fast.c b/kernels/fast.c\nnew file mode 120000\n"
                                      "--- /dev/null\n+++ b/kernels/fast.c\n@@ -0,0 +1 @@\n+../Makefile\n"
                                      "\\ No newline at end of file\n");
    CHECK(patch::check_scope(link, {"kernels/*"}, {}).accepted);
    const auto linked = t.apply(link);
    CHECK(linked.state == patch::Sandbox::State::OutOfScope);
    CHECK(linked.detail.find("symlink at kernels/fast.c") != std::string::npos);

    const auto honest = t.write("honest", "--- a/kernels/compute.c\n+++ b/kernels/compute.c\n@@ -1 +1 @@\n"
                                          "-int a;\n+int b;\n");
    CHECK(t.apply(honest).state == patch::Sandbox::State::Ready);
}

TEST_CASE("compare_trees names every added, removed and changed file, and symlinks") {
    TrickTree t;
    const fs::path copy = t.dir / "copy";
    fs::create_directories(copy / "kernels");
    fs::copy_file(t.source / "kernels/compute.c", copy / "kernels/compute.c");
    std::ofstream(copy / "Makefile") << "all:\n\techo other\n";
    std::ofstream(copy / "kernels/new.c") << "x\n";
    fs::create_symlink("compute.c", copy / "kernels/l.c");
    const auto changes = patch::compare_trees(t.source, copy);
    REQUIRE(changes.size() == 3);
    CHECK(changes[0].path == "Makefile");
    CHECK(changes[0].kind == patch::TreeChange::Kind::Changed);
    CHECK(changes[1].path == "kernels/l.c");
    CHECK(changes[1].kind == patch::TreeChange::Kind::Symlink);
    CHECK(changes[2].path == "kernels/new.c");
    CHECK(changes[2].kind == patch::TreeChange::Kind::Added);
    fs::remove(copy / "kernels/compute.c");
    const auto removed = patch::compare_trees(t.source, copy);
    CHECK(std::any_of(removed.begin(), removed.end(), [](const auto& c) {
        return c.path == "kernels/compute.c" && c.kind == patch::TreeChange::Kind::Removed;
    }));
    CHECK(patch::out_of_scope({{patch::TreeChange::Kind::Added, "kernels/new.c"}}, {"kernels/*"}).empty());
    CHECK(patch::out_of_scope({{patch::TreeChange::Kind::Removed, "Makefile"}}, {"kernels/*"}) ==
          "removes Makefile outside the editable scope");
}

TEST_CASE("a symlink in the user's tree is listed where it lies, never where it points") {
    TrickTree t;
    const fs::path outside = t.dir / "outside.txt";
    std::ofstream(outside) << "data\n";
    fs::create_symlink(outside, t.source / "kernels/data.txt");
    const auto files = patch::tree_files(t.source);
    CHECK(std::find(files.begin(), files.end(), fs::path("kernels/data.txt")) != files.end());
    for (const auto& f : files)
        CHECK(f.string().find("..") == std::string::npos);
}

TEST_CASE("a corrupt cache entry (a 0-byte or foreign state.json) is treated as absent and rebuilt") {
    fs::path root = fs::temp_directory_path() / ("infrarsi-sandbox-corrupt-" + std::to_string(::getpid()));
    fs::remove_all(root);
    patch::SandboxSpec spec;
    spec.source = fixtures / "toyload";
    spec.tree_hash = patch::hash_tree(spec.source);
    spec.build = {{"cc", "-O2", "-o", "{build}/toy", "{source}/main.c", "{source}/loss.c",
                   "{source}/kernels/compute.c", "-lm"}};
    spec.editable = {"kernels/*"};
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
    const std::string link =
        "diff --git a/kernels/x.c b/kernels/x.c\nnew file mode 120000\nindex 0000000..1\n"
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

TEST_CASE(
    "the tree's hash and sandbox copy leave out build directories, not code whose name starts with build") {
    const auto root = fs::temp_directory_path() / ("infrarsi-hash-" + std::to_string(::getpid()));
    fs::remove_all(root);
    fs::create_directories(root / "builders");
    fs::create_directories(root / "build");
    fs::create_directories(root / "build-release");
    std::ofstream(root / "main.py") << "import builders\n";
    std::ofstream(root / "builders" / "util.py") << "x = 1\n";
    std::ofstream(root / "build" / "out.o") << "object\n";
    std::ofstream(root / "build-release" / "CMakeCache.txt") << "cache\n";
    const auto before = patch::hash_tree(root);
    // A build's outputs change nothing.
    std::ofstream(root / "build" / "out.o") << "another object\n";
    std::ofstream(root / "build-release" / "CMakeCache.txt") << "another cache\n";
    CHECK(patch::hash_tree(root) == before);
    // A package named builders/ is code: a change there is a change of the tree.
    std::ofstream(root / "builders" / "util.py") << "x = 2\n";
    CHECK(patch::hash_tree(root) != before);
    fs::remove_all(root);
}
