// A GPU job's memory from nvidia-smi's compute processes (trial/gpu_memory.hpp): the reader on lines in
// nvidia-smi's CSV format, the figure per GPU for the job's processes only, the process tree the wrapper
// samples with, and the sampler's thread.
#include "trial/gpu_memory.hpp"
#include "util/process_tree.hpp"

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace infrarsi;
using namespace infrarsi::trial;

namespace {
constexpr double MiB = 1024.0 * 1024.0;
}

TEST_CASE("nvidia-smi's compute processes are read per GPU, [N/A], permissions and messages are skipped") {
    const auto apps =
        parse_compute_apps(test::read_file(std::string(INFRARSI_FIXTURES) + "/nvidia-smi/compute-apps.txt"));
    REQUIRE(apps.size() == 4);
    CHECK(apps[0] == GpuAppMemory{"00000000:18:00.0", 301234, 40536 * MiB});
    CHECK(apps[3].pid == 99999);
    // The job is 301234 and 301240 on the first GPU, 301235 on the second; 99999 is another job's.
    CHECK(largest_gpu_bytes(apps, {301234, 301240, 301235}) == doctest::Approx((40536 + 512) * MiB));
    CHECK(largest_gpu_bytes(apps, {301235}) == doctest::Approx(39980 * MiB));
    CHECK(largest_gpu_bytes(apps, {42}) == 0);
    CHECK(parse_compute_apps("").empty());
    CHECK(parse_compute_apps("gpu_bus_id, pid, used_gpu_memory [MiB]\n").empty());
    CHECK(parse_compute_apps("00000000:18:00.0, -5, 10\n00000000:18:00.0, 7, 10, extra\n").empty());
}

TEST_CASE("the process tree finds a child's children") {
    const pid_t child = ::fork();
    if (child == 0) {
        // A grandchild below the child; both wait to be killed.
        if (::fork() == 0) {
            ::pause();
            ::_exit(0);
        }
        ::pause();
        ::_exit(0);
    }
    REQUIRE(child > 0);
    std::set<pid_t> below;
    for (int i = 0; i < 500 && below.size() < 2; ++i) {
        below = descendants_of(::getpid());
        below.erase(::getpid());
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK(below.count(child));
    CHECK(below.size() >= 2);
    const auto kids = children_of(::getpid());
    CHECK(std::find(kids.begin(), kids.end(), child) != kids.end());
    for (const pid_t p : below)
        if (p != child) ::kill(p, SIGKILL);
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
}

TEST_CASE(
    "the sampler keeps the largest figure it saw of the job's processes, and none when they never showed") {
    std::atomic<int> calls{0};
    GpuMemorySampler::Query query = [&]() -> std::optional<std::string> {
        const int n = ++calls;
        if (n == 2) return std::nullopt; // one failed sample
        return "00000000:18:00.0, 10, " + std::to_string(n == 3 ? 2048 : 1024) +
               "\n00000000:18:00.0, 11, 99999\n";
    };
    {
        GpuMemorySampler s(
            query, [] { return std::set<pid_t>{10}; }, std::chrono::milliseconds(5));
        for (int i = 0; i < 2000 && s.samples() < 5; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        REQUIRE(s.samples() >= 5);
        REQUIRE(s.peak_bytes());
        CHECK(*s.peak_bytes() == doctest::Approx(2048 * MiB));
    }
    GpuMemorySampler none(
        query, [] { return std::set<pid_t>{12}; }, std::chrono::milliseconds(5));
    for (int i = 0; i < 2000 && none.samples() < 2; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CHECK_FALSE(none.peak_bytes());
}
