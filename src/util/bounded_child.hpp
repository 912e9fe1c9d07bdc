#pragma once
// Work that may hang (a driver, a vendor library) run in a forked child with a deadline: the child writes
// its result to a pipe, the parent reads at most `max_bytes` until `budget` ends and kills the child past it.
// The plugin probes hardware this way inside slurmstepd, so a hung driver costs a job its budget, never its
// start, and a crash in a vendor library stays in the child.
#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

namespace infrarsi {

enum class ChildEnd { finished, failed, timed_out };

struct ChildOutput {
    ChildEnd end = ChildEnd::failed;
    std::string out; // what the child wrote (complete only when end == finished)
};

// Runs `work` in a forked child; its return value is the child's output, and its exit status 0 (an exception
// or a non-zero _exit is `failed`). The child also ends itself by alarm() should the parent be gone.
// Throws infrarsi::Error when no child can be started.
ChildOutput run_in_child(const std::function<std::string()>& work, std::chrono::milliseconds budget,
                         std::size_t max_bytes);

} // namespace infrarsi
