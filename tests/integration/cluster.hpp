#pragma once
// Shared helpers of the integration tests: they run against the real local cluster that scripts/test starts
// (scripts/slurm-local), selected by SLURM_CONF.
#include <chrono>
#include <cstdlib>
#include <doctest/doctest.h>
#include <filesystem>
#include <string>
#include <thread>
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

// Waits for what another process produces (a record, a request file, a job state): calls seen(last) every
// 200 ms until it returns true, or until the deadline, then fails the test with `what` and what the last call
// put in `last`. Returns whether the condition held. The deadline bounds a hung test; it is not a timing: on
// a loaded machine slurmstepd may write seconds after the command that caused it returned.
template <class Condition>
bool wait_for(std::chrono::seconds deadline, const std::string& what, Condition&& seen) {
    const auto end = std::chrono::steady_clock::now() + deadline;
    std::string last;
    while (true) {
        last.clear();
        if (seen(last)) return true;
        if (std::chrono::steady_clock::now() >= end) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    FAIL_CHECK("waited " << deadline.count() << " s for " << what << "; last seen: " << last);
    return false;
}

} // namespace infrarsi::testing
