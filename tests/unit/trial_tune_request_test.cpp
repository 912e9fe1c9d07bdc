// The tune request: what the plugin writes round-trips, and what the orchestrator reads is validated field by
// field, from a regular file it does not follow through a symlink.
#include "trial/tune_request.hpp"

#include "util/error.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace infrarsi;
using namespace infrarsi::trial;
namespace fs = std::filesystem;

TEST_CASE("a tune request round-trips and is validated") {
    TuneRequest r;
    r.job_id = 12;
    r.uid = 1000;
    r.user = "alice";
    r.script = "/home/alice/job.sbatch";
    r.contract = "/home/alice/job.contract.toml";
    r.submit_dir = "/home/alice";
    r.job_name = "job.sbatch";
    r.node = "n1";
    r.time = "2024-05-01T12:00:00Z";
    r.plugin_version = "0.1.0";
    auto j = to_json(r);
    CHECK(j["format"] == kTuneRequestFormat);
    CHECK(tune_request_from_json(j) == r);
    auto bad = j;
    bad["contract"] = "relative.toml";
    CHECK_THROWS_WITH_AS(tune_request_from_json(bad), doctest::Contains("contract"), Error);
    bad = j;
    bad["job_id"] = 0;
    CHECK_THROWS_AS(tune_request_from_json(bad), Error);
    bad = j;
    bad["user"] = "a\nb";
    CHECK_THROWS_WITH_AS(tune_request_from_json(bad), doctest::Contains("user"), Error);
    bad = j;
    bad.erase("node");
    CHECK_THROWS_WITH_AS(tune_request_from_json(bad), doctest::Contains("node"), Error);
}

TEST_CASE("a tune request file: read, and refused through a symlink or when it is not a regular file") {
    auto d = fs::temp_directory_path() / ("infrarsi-tune-req-" + std::to_string(::getpid()));
    fs::create_directories(d);
    TuneRequest r;
    r.job_id = 7;
    r.contract = "/home/alice/c.toml";
    std::ofstream(d / "7.json") << to_json(r).dump();
    CHECK(read_tune_request(d / "7.json") == r);
    fs::create_symlink(d / "7.json", d / "8.json");
    CHECK_THROWS_WITH_AS(read_tune_request(d / "8.json"), doctest::Contains("symbolic link"), Error);
    fs::create_directories(d / "9.json");
    CHECK_THROWS_WITH_AS(read_tune_request(d / "9.json"), doctest::Contains("regular file"), Error);
    std::ofstream(d / "10.json") << "{\"format\": 1}";
    CHECK_THROWS_WITH_AS(read_tune_request(d / "10.json"), doctest::Contains("10.json"), Error);
    fs::remove_all(d);
}
