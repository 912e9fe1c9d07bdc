#pragma once
// Shared helpers of the integration tests: they run against the real local cluster that scripts/test starts
// (scripts/slurm-local), selected by SLURM_CONF.
#include <cstdlib>
#include <doctest/doctest.h>
#include <filesystem>
#include <string>
#include <unistd.h>

namespace infrarsi::testing {

inline void require_cluster() {
    const char* conf = std::getenv("SLURM_CONF");
    REQUIRE_MESSAGE(conf != nullptr,
                    "SLURM_CONF is not set: start the cluster with scripts/slurm-local start");
    REQUIRE_MESSAGE(std::filesystem::exists(conf), "SLURM_CONF names a missing file: " << conf);
}

// A fresh directory for one test's job files, visible to every fake node (they share this host).
inline std::filesystem::path scratch_dir(const std::string& name) {
    auto dir =
        std::filesystem::temp_directory_path() / ("infrarsi-it-" + name + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

} // namespace infrarsi::testing
