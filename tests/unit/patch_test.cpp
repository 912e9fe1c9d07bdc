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
