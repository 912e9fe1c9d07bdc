// result.json: what the wrapper writes reads back the same; a file that is not a result (the workload can
// reach it) is an Error that names the field, never an abort; no file is "no result".
#include "trial/result.hpp"

#include "util/error.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace infrarsi;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {
trial::Result sample() {
    trial::Result r;
    r.trial_id = "17";
    r.index = 2;
    r.exit_code = 0;
    r.wall_s = 41.5;
    r.max_rss_children_bytes = 4.0e8;
    r.log = "/c/batches/4/2/log.txt";
    measure::StepSample s;
    s.step = 1;
    s.loss = 7.5;
    s.step_time_s = 0.25;
    r.steps.steps = {s};
    r.steps.malformed = 1;
    r.steps.summary = json{{"model_flops", 1e9}};
    r.slurm = {{"SLURM_JOB_ID", "41"}};
    return r;
}
} // namespace

TEST_CASE("result.json round-trips through the file, and no file is no result") {
    const fs::path dir = fs::temp_directory_path() / ("infrarsi-result-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    trial::write_result(dir / "result.json", sample());
    auto r = trial::read_result(dir / "result.json");
    REQUIRE(r);
    CHECK(r->trial_id == "17");
    CHECK(r->index == 2);
    CHECK(r->wall_s == 41.5);
    REQUIRE(r->steps.steps.size() == 1);
    CHECK(r->steps.steps[0].step_time_s == 0.25);
    CHECK(r->steps.malformed == 1);
    CHECK(r->slurm.at("SLURM_JOB_ID") == "41");
    CHECK_FALSE(trial::read_result(dir / "missing.json"));
    REQUIRE(::mkfifo((dir / "fifo.json").c_str(), 0600) == 0);
    CHECK_THROWS_WITH_AS(trial::read_result(dir / "fifo.json"), doctest::Contains("regular file"), Error);
    std::ofstream(dir / "cut.json") << to_json(sample()).dump().substr(0, 40);
    CHECK_THROWS_WITH_AS(trial::read_result(dir / "cut.json"), doctest::Contains("not valid JSON"), Error);
    fs::remove_all(dir);
}

TEST_CASE("a result with foreign content is refused with the field, and the first format is still read") {
    auto good = to_json(sample());
    auto refused = [](const json& j, const char* what) {
        CHECK_THROWS_WITH_AS(trial::result_from_json(j, "r.json"), doctest::Contains(what), Error);
    };
    refused(json::array(), "JSON object");
    refused(json{{"format", "x"}}, "unknown result format");
    auto j = good;
    j["wall_s"] = "fast";
    refused(j, "'wall_s'");
    j = good;
    j["index"] = -1;
    refused(j, "'index'");
    j = good;
    j["gpu_sampled_peak_bytes"] = "lots";
    refused(j, "'gpu_sampled_peak_bytes'");
    j["gpu_sampled_peak_bytes"] = -1.0;
    refused(j, "'gpu_sampled_peak_bytes'");
    j["gpu_sampled_peak_bytes"] = 1e9;
    CHECK(trial::result_from_json(j, "r.json").gpu_sampled_peak_bytes == 1e9);
    j = good;
    j["steps"] = json::array({json{{"step", 1}}});
    refused(j, "steps[0]");
    j = good;
    j["steps"][0]["step_time_s"] = "0.1";
    refused(j, "steps[0]");
    j = good;
    j["slurm"] = json{{"SLURM_JOB_ID", 41}};
    refused(j, "'slurm'");
    j = good;
    j.erase("exit_code");
    refused(j, "'exit_code'");

    auto first = good;
    first.erase("format");
    first["trial_id"] = 17;
    CHECK(trial::result_from_json(first, "r.json").trial_id == "17");
}

TEST_CASE("a result.json the job wrote with a number out of range is an Error, not an abort") {
    const auto dir =
        std::filesystem::temp_directory_path() / ("infrarsi-result-huge-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    for (const char* text : {R"({"exit_code": 1e999})", R"({"index": 99999999999999999999999})", "[1e999]"}) {
        std::ofstream(dir / "result.json") << text;
        CHECK_THROWS_AS(trial::read_result(dir / "result.json"), Error);
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("line times: what reads as times, up to the first line that does not, a FIFO or no file is none") {
    const fs::path dir = fs::temp_directory_path() / ("infrarsi-times-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const auto times = trial::line_times_path(dir / "log.txt");
    CHECK(times == dir / "log.txt.times");
    CHECK(trial::read_line_times(times).empty());
    std::ofstream(times) << "0.5000\n1.2500\n-3\n4.0\n";
    CHECK(trial::read_line_times(times) == std::vector<double>{0.5, 1.25}); // a negative time ends it
    std::ofstream(times) << "0.5\nnan\n" << std::string(1000, 'x');
    CHECK(trial::read_line_times(times) == std::vector<double>{0.5});
    std::ofstream(times) << "2.0"; // cut mid-line: no newline, not a time yet
    CHECK(trial::read_line_times(times).empty());
    fs::remove(times);
    REQUIRE(::mkfifo(times.c_str(), 0600) == 0);
    CHECK(trial::read_line_times(times).empty());
    fs::remove_all(dir);
}

TEST_CASE("a deep result.json the job left (the wrapper could not replace it) is refused, not a crash") {
    const fs::path dir = fs::temp_directory_path() / ("infrarsi-result-deep-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    // The job writes a deep result.json and a directory at the wrapper's temporary name, so its own stays.
    fs::create_directories(dir / "result.json.tmp");
    CHECK_THROWS_AS(trial::write_result(dir / "result.json", sample()), Error);
    std::ofstream(dir / "result.json") << std::string(1'000'000, '[') << std::string(1'000'000, ']');
    CHECK_THROWS_WITH_AS(trial::read_result(dir / "result.json"), doctest::Contains("nested more than 64"),
                         Error);
    fs::remove(dir / "result.json");
    REQUIRE(::mkfifo((dir / "result.json").c_str(), 0600) == 0); // a FIFO neither blocks nor passes
    CHECK_THROWS_WITH_AS(trial::read_result(dir / "result.json"), doctest::Contains("not a regular file"),
                         Error);
    fs::remove(dir / "result.json");
    std::ofstream(dir / "elsewhere.json") << trial::to_json(sample()).dump();
    fs::create_symlink(dir / "elsewhere.json", dir / "result.json"); // the wrapper renames; never a symlink
    CHECK_THROWS_WITH_AS(trial::read_result(dir / "result.json"), doctest::Contains("symbolic link"), Error);
    fs::remove_all(dir);
}

TEST_CASE("a trial's output is read from its end and bounded: a 2 GiB sparse log, a FIFO, a missing file") {
    const fs::path dir = fs::temp_directory_path() / ("infrarsi-output-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const auto log = dir / "log.txt";
    {
        std::ofstream(log) << "first\n";
        fs::resize_file(log, std::uintmax_t(2) << 30); // sparse: costs nothing on disk
        std::ofstream(log, std::ios::app) << "\nsecond to last\nlast\n";
    }
    const auto out = trial::read_trial_output(log, 1000);
    CHECK(out.cut);
    CHECK(out.text.size() <= 1000);
    CHECK(out.text == "second to last\nlast\n"); // from the first whole line of the last 1000 bytes
    CHECK(out.problem.empty());
    std::ofstream(dir / "small.txt") << "a\nb\n";
    const auto small = trial::read_trial_output(dir / "small.txt", 1000);
    CHECK_FALSE(small.cut);
    CHECK(small.text == "a\nb\n");
    // Exactly at the limit is whole; one byte over is cut at its first newline.
    CHECK(trial::read_trial_output(dir / "small.txt", 4).text == "a\nb\n");
    CHECK(trial::read_trial_output(dir / "small.txt", 3).text == "b\n");
    const auto missing = trial::read_trial_output(dir / "missing.txt");
    CHECK(missing.text.empty());
    CHECK(missing.problem.empty());
    fs::remove(log);
    REQUIRE(::mkfifo(log.c_str(), 0600) == 0); // log.txt replaced by a FIFO: nothing, at once
    const auto fifo = trial::read_trial_output(log);
    CHECK(fifo.text.empty());
    CHECK(fifo.problem.find("not a regular file") != std::string::npos);
    fs::remove_all(dir);
}
