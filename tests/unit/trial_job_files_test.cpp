// What a trial's job leaves in its trial directory once the campaign has read it ([workload] keep_job_files,
// trial/job_files.hpp): a checkpoint goes, small files stay within the bound, the wrapper's result.json and
// log stay, and nothing the job planted leads the removal out of the trial directory: not a symlink (to a
// directory or a file outside), not the trial directory itself made a symlink, not a tree too deep for the
// walk's descriptors. Then a campaign on the local scheduler whose job writes a checkpoint and plants links.
#include "trial/job_files.hpp"

#include "campaign/campaign.hpp"
#include "report/report.hpp"
#include "stepload_campaign.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <sys/stat.h>

namespace fs = std::filesystem;
using namespace infrarsi;
using contract::KeepJobFiles;
using test::TempDir;

namespace {

void write(const fs::path& p, std::size_t bytes) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << std::string(bytes, 'x');
}

// <campaign>/batches/1/0 with the wrapper's files and what a job might leave; `outside` holds files the job
// points at.
struct Planted {
    fs::path campaign, trial, outside;
    explicit Planted(const TempDir& d) : campaign(d.path / "c"), trial(campaign / "batches" / "1" / "0") {
        outside = d.path / "outside";
        write(outside / "precious.bin", 300000);
        write(outside / "dir" / "also.bin", 300000);
        write(trial / "result.json", 10);
        write(trial / "log.txt", 200000); // the wrapper's, whatever its size
        write(trial / "log.txt.times", 10);
        write(trial / "out" / "ckpt.pt", 2u << 20);
        write(trial / "out" / "model.safetensors", 100000);
        write(trial / "notes.txt", 100);
        write(trial / "out" / "config.json", 200);
        fs::create_directory_symlink(outside, trial / "escape");
        fs::create_directory_symlink(outside / "dir", trial / "out" / "to_dir");
        fs::create_symlink(outside / "precious.bin", trial / "out" / "big_link.bin");
        REQUIRE(::mkfifo((trial / "pipe").c_str(), 0600) == 0);
        // 40 levels, deeper than the walk holds descriptors for, with a small file at the bottom.
        fs::path deep = trial / "deep";
        for (int i = 0; i < 40; ++i)
            deep /= "d";
        write(deep / "leaf.txt", 10);
    }
    void check_outside_intact() const {
        CHECK(fs::file_size(outside / "precious.bin") == 300000);
        CHECK(fs::file_size(outside / "dir" / "also.bin") == 300000);
    }
    void check_wrapper_files() const {
        CHECK(fs::is_regular_file(trial / "result.json"));
        CHECK(fs::file_size(trial / "log.txt") == 200000);
        CHECK(fs::is_regular_file(trial / "log.txt.times"));
    }
};

} // namespace

TEST_CASE("keep_job_files = small removes a trial's checkpoint and what is not a small regular file, keeps "
          "its small files and the wrapper's, and follows no symlink out") {
    TempDir d("infrarsi-job-files");
    Planted p(d);
    const auto removed = trial::remove_job_files(p.campaign, "batches/1/0", KeepJobFiles::Small);
    INFO("left: " << (removed.left.empty() ? "" : removed.left.front()));
    CHECK(removed.left.empty());
    CHECK_FALSE(fs::exists(p.trial / "out" / "ckpt.pt"));
    CHECK_FALSE(fs::exists(p.trial / "out" / "model.safetensors")); // over 64 KiB
    CHECK(fs::is_regular_file(p.trial / "notes.txt"));
    CHECK(fs::is_regular_file(p.trial / "out" / "config.json"));
    for (const auto* gone : {"escape", "out/to_dir", "out/big_link.bin", "pipe", "deep"})
        CHECK_MESSAGE(!fs::exists(fs::symlink_status(p.trial / gone)), gone);
    CHECK(removed.kept == 2);
    CHECK(removed.bytes == (2u << 20) + 100000 + 10); // the regular files: ckpt, safetensors, the deep leaf
    p.check_wrapper_files();
    p.check_outside_intact();
    // Nothing moved up from the deep tree stays behind.
    for (const auto& e : fs::directory_iterator(p.trial))
        CHECK(e.path().filename().string().rfind(".infrarsi-", 0) != 0);
}

TEST_CASE("keep_job_files = none leaves only the wrapper's files, = all leaves everything") {
    TempDir d("infrarsi-job-files");
    Planted p(d);
    CHECK(trial::remove_job_files(p.campaign, "batches/1/0", KeepJobFiles::All).entries == 0);
    CHECK(fs::exists(p.trial / "out" / "ckpt.pt"));
    const auto removed = trial::remove_job_files(p.campaign, "batches/1/0", KeepJobFiles::None);
    CHECK(removed.kept == 0);
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(p.trial))
        names.insert(e.path().filename().string());
    CHECK(names == std::set<std::string>{"result.json", "log.txt", "log.txt.times"});
    p.check_wrapper_files();
    p.check_outside_intact();
}

TEST_CASE(
    "a trial directory that is a symlink, or reached through one, is refused: nothing outside is removed") {
    TempDir d("infrarsi-job-files");
    Planted p(d);
    fs::create_directories(p.campaign / "batches" / "2");
    fs::create_directory_symlink(p.outside, p.campaign / "batches" / "2" / "0");
    CHECK_THROWS_AS(trial::remove_job_files(p.campaign, "batches/2/0", KeepJobFiles::None), Error);
    fs::create_directory_symlink(p.campaign / "batches" / "1", p.campaign / "batches" / "3");
    CHECK_THROWS_AS(trial::remove_job_files(p.campaign, "batches/3/0", KeepJobFiles::None), Error);
    CHECK_THROWS_AS(trial::remove_job_files(p.campaign, "batches/1/../2/0", KeepJobFiles::None), Error);
    p.check_outside_intact();
    CHECK(fs::exists(p.trial / "out" / "ckpt.pt"));
}

TEST_CASE(
    "a campaign on the local scheduler removes each trial's checkpoint once it is read, keeps its result "
    "and log, and follows no link the job planted") {
    TempDir d("infrarsi-job-files");
    write(d.path / "precious" / "weights.bin", 1000);
    // The job writes a checkpoint where nanoGPT does (out/ in its working directory), a small file, and links
    // to a directory and a file outside.
    std::ofstream(d.path / "ckpt.sh") << R"(#!/bin/bash
bash "$@" || exit $?
mkdir -p out
head -c 3000000 /dev/zero >out/ckpt.pt
echo '{"iter": 6}' >out/meta.json
ln -s "$(dirname "$0")/precious" out/escape
ln -s "$(dirname "$0")/precious/weights.bin" weights.bin
)";
    const auto dir = test::stepload_campaign(
        d, {{R"(command = ["bash", "{source}/train.sh")",
             R"(command = ["bash", "{contract_dir}/ckpt.sh", "{source}/train.sh")"},
            {"trials = 3\nbatch_size = 2", "trials = 1\nbatch_size = 1"},
            {"doctor = 3\nverify = 2\nverify_top = 1", "doctor = 2\nverify = 2\nverify_top = 0"}});
    campaign::Campaign c(dir);
    c.run(test::local_run_options(false));
    int read = 0;
    for (const auto& t : c.store().trials({})) {
        if (t.array_index < 0) continue;
        const fs::path tdir = fs::path(t.result_path).parent_path();
        INFO("trial " << t.id << " " << tdir);
        ++read;
        CHECK(fs::is_regular_file(tdir / "result.json"));
        CHECK(fs::is_regular_file(tdir / "log.txt"));
        CHECK_FALSE(fs::exists(tdir / "out" / "ckpt.pt"));
        CHECK_FALSE(fs::exists(fs::symlink_status(tdir / "out" / "escape")));
        CHECK_FALSE(fs::exists(fs::symlink_status(tdir / "weights.bin")));
        CHECK(fs::is_regular_file(tdir / "out" / "meta.json")); // small: kept
        REQUIRE(t.measurements.job_files_removed);
        CHECK(t.measurements.job_files_removed->bytes == 3000000);
        CHECK(t.measurements.job_files_removed->entries == 3);
    }
    CHECK(read >= 3);
    CHECK(fs::file_size(d.path / "precious" / "weights.bin") == 1000);
    const auto r = report::build(c);
    REQUIRE(r.contains("job_files_removed"));
    CHECK(r["job_files_removed"]["trials"].get<int>() == read);
    CHECK(r["job_files_removed"]["bytes"].get<std::uint64_t>() == 3000000ull * read);
    CHECK(r["job_files_removed"]["keep_job_files"] == "small");
    CHECK(report::render(r).find("removed once read") != std::string::npos);
}

TEST_CASE("keep_job_files = all keeps a trial's checkpoint, and an unknown value is refused at its line") {
    TempDir d("infrarsi-job-files");
    std::ofstream(d.path / "ckpt.sh")
        << "#!/bin/bash\nbash \"$@\" || exit $?\nhead -c 1000 /dev/zero >ckpt.pt\n";
    const std::map<std::string, std::string> edits{
        {R"(command = ["bash", "{source}/train.sh")",
         R"(command = ["bash", "{contract_dir}/ckpt.sh", "{source}/train.sh")"},
        {"trials = 3\nbatch_size = 2", "trials = 1\nbatch_size = 1"},
        {"doctor = 3\nverify = 2\nverify_top = 1", "doctor = 2\nverify = 2\nverify_top = 0"},
        {"[workload.env]", "keep_job_files = \"all\"\n\n[workload.env]"}};
    const auto dir = test::stepload_campaign(d, edits);
    campaign::Campaign c(dir);
    CHECK(c.contract().workload.keep_job_files == KeepJobFiles::All);
    c.run(test::local_run_options(false));
    for (const auto& t : c.store().trials({}))
        if (t.array_index >= 0) CHECK(fs::is_regular_file(fs::path(t.result_path).parent_path() / "ckpt.pt"));

    TempDir bad("infrarsi-job-files");
    auto bad_edits = edits;
    bad_edits["[workload.env]"] = "keep_job_files = \"some\"\n\n[workload.env]";
    CHECK_THROWS_WITH_AS(test::stepload_campaign(bad, bad_edits),
                         doctest::Contains("unknown workload.keep_job_files 'some'"), Error);
}
