// Tune mode: finding sbatch's script among its arguments and the contract beside it.
#include "submit_args.hpp"

#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
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
