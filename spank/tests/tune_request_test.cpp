// Tune mode: finding sbatch's script among its arguments, the contract beside it, and the request format.
#include "tune_request.hpp"

#include "util/error.hpp"

#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

using namespace infrarsi;
using namespace infrarsi::spank;
namespace fs = std::filesystem;

TEST_CASE("the batch script is the first non-option argument that is a #! file") {
    auto d = fs::temp_directory_path() / ("infrarsi-tune-" + std::to_string(::getpid()));
    fs::create_directories(d);
    std::ofstream(d / "job.sbatch") << "#!/bin/bash\nsrun true\n";
    std::ofstream(d / "out.txt") << "old output\n";
    auto found =
        find_batch_script({"sbatch", "-o", "out.txt", "--infrarsi=tune", "job.sbatch", "arg1"}, d.string());
    REQUIRE(found);
    CHECK(*found == (d / "job.sbatch").string());
    CHECK_FALSE(find_batch_script({"sbatch", "--wrap", "hostname"}, d.string()));
    CHECK(default_contract_for(*found) == (d / "job.contract.toml").string());
    fs::remove_all(d);
}

TEST_CASE("paths are made absolute against the submit directory") {
    CHECK(absolute_path("c.toml", "/home/u/run") == "/home/u/run/c.toml");
    CHECK(absolute_path("../c.toml", "/home/u/run") == "/home/u/c.toml");
    CHECK(absolute_path("/etc/c.toml", "/home/u") == "/etc/c.toml");
    CHECK(valid_path_value("/a/b"));
    CHECK_FALSE(valid_path_value("a/b"));
    CHECK_FALSE(valid_path_value("/a\nb"));
}

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
