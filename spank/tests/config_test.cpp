// Modes and plugstack.conf arguments: what the plugin accepts and what it refuses, with the name of it.
#include "config.hpp"

#include "util/error.hpp"

#include <doctest/doctest.h>

using namespace infrarsi;
using namespace infrarsi::spank;

TEST_CASE("modes: a bare --infrarsi is record, tune takes an optional contract, others are refused") {
    CHECK(parse_mode("")->kind == ModeKind::record);
    CHECK(parse_mode("record")->kind == ModeKind::record);
    CHECK(parse_mode("(null)")->kind == ModeKind::record); // bare --infrarsi, as srun inside sbatch sees it
    CHECK(parse_mode("trial")->kind == ModeKind::trial);
    CHECK(parse_mode("off")->kind == ModeKind::off);
    CHECK(parse_mode("tune")->contract.empty());
    CHECK(parse_mode("tune:job.contract.toml")->contract == "job.contract.toml");
    CHECK(parse_mode("tune:job.contract.toml")->text() == "tune:job.contract.toml");
    CHECK_FALSE(parse_mode("tune:"));
    CHECK_FALSE(parse_mode("Record"));
    CHECK_FALSE(parse_mode("bogus"));
    CHECK_FALSE(parse_mode("tune:a\nb"));
}

TEST_CASE("every mode's text parses back to the same mode") {
    for (const auto* text : {"record", "trial", "tune", "off", "tune:job.contract.toml"}) {
        const auto m = parse_mode(text);
        REQUIRE(m);
        CHECK(m->text() == text);
        CHECK(parse_mode(m->text())->kind == m->kind);
    }
}

TEST_CASE("plugstack arguments: defaults, every key, and the site's record default") {
    auto d = parse_config({});
    CHECK(d.default_mode == ModeKind::record);
    CHECK(d.calibration.count() == 300);
    CHECK(d.allow_off);
    CHECK_FALSE(d.nccl);
    auto c = parse_config(
        {"spool=/var/spool/x", "default_mode=off", "calibration_ms=120", "allow_off=no", "nccl=yes"});
    CHECK(c.spool == "/var/spool/x");
    CHECK(c.default_mode == ModeKind::off);
    CHECK(c.calibration.count() == 120);
    CHECK_FALSE(c.allow_off);
    CHECK(c.nccl);
    CHECK(d.gpu == GpuProbe::automatic);
    CHECK(d.gpu_calibration.count() == 3000);
    CHECK(d.cuda_library_dirs.empty());
    auto g =
        parse_config({"gpu=no", "gpu_calibration_ms=8000", "cuda_libs=/usr/local/cuda/lib64:/opt/nv/lib"});
    CHECK(g.gpu == GpuProbe::no);
    CHECK(g.gpu_calibration.count() == 8000);
    CHECK(g.cuda_library_dirs == std::vector<std::string>{"/usr/local/cuda/lib64", "/opt/nv/lib"});
    CHECK(parse_config({"gpu=yes"}).gpu == GpuProbe::yes);
    CHECK(parse_config({"gpu=auto"}).gpu == GpuProbe::automatic);
    // The NCCL all-reduce probe: off unless the site asks.
    CHECK_FALSE(d.nccl_allreduce);
    CHECK(d.nccl_allreduce_budget.count() == 5000);
    auto n = parse_config({"nccl_allreduce=yes", "nccl_allreduce_ms=12000"});
    CHECK(n.nccl_allreduce);
    CHECK(n.nccl_allreduce_budget.count() == 12000);
    CHECK_THROWS_WITH_AS(parse_config({"nccl_allreduce_ms=90000"}), doctest::Contains("nccl_allreduce_ms"),
                         Error);
    CHECK_THROWS_WITH_AS(parse_config({"nccl_allreduce=maybe"}), doctest::Contains("nccl_allreduce"), Error);
}

TEST_CASE("an unknown plugstack key is refused with its name") {
    CHECK_THROWS_WITH_AS(parse_config({"spool=/x", "colour=blue"}), doctest::Contains("'colour'"), Error);
    CHECK_THROWS_WITH_AS(parse_config({"verbose"}), doctest::Contains("'verbose'"), Error);
}

TEST_CASE("bad plugstack values are refused with the value") {
    CHECK_THROWS_WITH_AS(parse_config({"spool=relative/dir"}), doctest::Contains("relative/dir"), Error);
    CHECK_THROWS_WITH_AS(parse_config({"default_mode=trial"}), doctest::Contains("default_mode=trial"),
                         Error);
    CHECK_THROWS_WITH_AS(parse_config({"calibration_ms=-5"}), doctest::Contains("calibration_ms=-5"), Error);
    CHECK_THROWS_WITH_AS(parse_config({"calibration_ms=20000"}), doctest::Contains("0..10000"), Error);
    CHECK_THROWS_WITH_AS(parse_config({"calibration_ms=12ms"}), doctest::Contains("12ms"), Error);
    CHECK_THROWS_WITH_AS(parse_config({"allow_off=maybe"}), doctest::Contains("maybe"), Error);
    CHECK_THROWS_WITH_AS(parse_config({"gpu=sometimes"}), doctest::Contains("sometimes"), Error);
    CHECK_THROWS_WITH_AS(parse_config({"gpu_calibration_ms=90000"}), doctest::Contains("0..60000"), Error);
    CHECK_THROWS_WITH_AS(parse_config({"cuda_libs=lib64"}), doctest::Contains("absolute"), Error);
    CHECK_THROWS_WITH_AS(parse_config({"cuda_libs=/a::/b"}), doctest::Contains("absolute"), Error);
}

TEST_CASE("campaign_roots names the directories of campaigns a trial's steps never see, / is refused") {
    CHECK(parse_config({}).campaign_roots.empty());
    CHECK(parse_config({"campaign_roots=/srv/campaigns:/scratch/infrarsi"}).campaign_roots ==
          std::vector<std::string>{"/srv/campaigns", "/scratch/infrarsi"});
    CHECK_THROWS_WITH_AS(parse_config({"campaign_roots=/"}), doctest::Contains("other than /"), Error);
    CHECK_THROWS_WITH_AS(parse_config({"campaign_roots=srv"}), doctest::Contains("absolute"), Error);
    CHECK_THROWS_WITH_AS(parse_config({"campaign_roots=/a::/b"}), doctest::Contains("absolute"), Error);
}
