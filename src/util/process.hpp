#pragma once
// Child processes: run a program (argv, never a shell string) and capture its output, or start one detached
// with its output to a file. The one way the project starts other programs (Slurm's commands, patch,
// compilers, the local scheduler's trials).
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace infrarsi {

struct ProcessResult {
    int exit_code = -1;  // exit status when the child exited normally, else -1
    int term_signal = 0; // signal that ended the child, else 0
    bool timed_out = false;
    bool output_exceeded = false; // stdout or stderr passed ProcessOptions::max_output_bytes: killed
    std::string out;
    std::string err;
    bool ok() const { return exit_code == 0 && term_signal == 0 && !timed_out; }
};

struct ProcessOptions {
    std::string cwd;                                  // empty: inherit
    std::map<std::string, std::string> env;           // added to (or replacing in) the inherited environment
    std::optional<std::string> stdin_data;            // written to the child's stdin, then closed
    std::optional<std::chrono::milliseconds> timeout; // SIGTERM to its process group, SIGKILL 2 s later
    // Set: the child's stdout and stderr are one stream (in the order it wrote them), handed to this as it
    // arrives instead of being kept in ProcessResult::out and err (a training job's output can be large).
    std::function<void(std::string_view)> on_output;
    // Set: at most this many bytes of each of stdout and stderr are kept; a child that writes more is killed
    // with its process group (ProcessResult::output_exceeded), what it wrote first kept.
    std::optional<std::size_t> max_output_bytes;
    // Variables of the inherited environment dropped, by name prefix ("INFRARSI_"), before `env` is added.
    std::vector<std::string> drop_env_prefixes;
};

// Runs argv[0] (looked up in PATH) in a process group of its own and waits for it. With a timeout, returns
// by the deadline (plus the 2 s grace) whatever the child does: a child that closed its output and goes on
// running is killed with its process group like one that still writes. Throws infrarsi::Error only when the
// program cannot be started at all; a non-zero exit is reported in the result.
ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options = {});

struct DetachedOptions {
    std::string cwd;              // empty: inherit
    std::vector<std::string> env; // the child's whole environment, "NAME=value" (see merged_environment)
    std::string output;           // stdout and stderr, created or truncated; stdin is /dev/null
    std::string cgroup;           // a cgroup v2 directory to run in (it moves itself there before exec)
};

// Starts argv[0] (looked up in PATH) in a session of its own (so a new process group, led by it, that a
// job's own process groups stay inside) and returns its pid at once; the caller waits for it (waitpid) and
// stops it. Throws infrarsi::Error when it cannot be started.
pid_t start_detached(const std::vector<std::string>& argv, const DetachedOptions& options);

// This process's environment with `extra` added (replacing variables of the same name), without the
// variables whose names start with one of `drop_prefixes`: "NAME=value" strings for a child.
std::vector<std::string> merged_environment(const std::map<std::string, std::string>& extra,
                                            const std::vector<std::string>& drop_prefixes = {});

// "a b 'c d'": for messages only, never for execution.
std::string describe_command(const std::vector<std::string>& argv);

} // namespace infrarsi
