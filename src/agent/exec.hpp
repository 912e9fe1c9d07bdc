#pragma once
// One call of a site's agent, contained. The campaign starts `infrarsi agent-exec`, which:
//   - opens the call's output files (in the call's directory) before anything else,
//   - becomes a child subreaper, so every process the agent starts (setsid and double forks included) stays
//     below it and is killed when the call ends,
//   - enters a private mount namespace (trial/isolation.hpp) in which the campaign directory, every campaign
//     beside it, the bank and the plugin's spool are empty; only the call's scratch directory (writable) and
//     the read-only copy of the baseline tree are bound back, with the agent's own command,
//   - runs the agent as the campaign's user, in its scratch directory, with the request on stdin, an
//     environment without the campaign's variables (INFRARSI_*, SLURM_*), a time limit, and its stdout and
//     stderr bounded (a flood is killed),
//   - writes what the agent printed to the call's files and prints its own status line (JSON).
// Nothing here reads what the agent printed as anything but bytes: agent/protocol.hpp parses the answer.
#include "util/enum_names.hpp"

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

namespace infrarsi::agent {

namespace fs = std::filesystem;

struct CallSpec {
    fs::path campaign; // the campaign directory
    fs::path call_dir; // <campaign>/agent/calls/<n>: made by the caller, holds work/ (the agent's scratch)
    fs::path tree;     // the read-only copy of the baseline tree the agent reads
    std::vector<std::string> command;
    std::chrono::seconds time_limit{600};
    std::size_t max_output_bytes = 8u << 20; // each of stdout and stderr
    std::string request;                     // the request document (stdin)
};

enum class CallOutcome {
    ok,              // exited 0 in time; its stdout is the answer (not yet parsed)
    timeout,         // killed at the time limit
    output_exceeded, // wrote more than max_output_bytes: killed
    crashed,         // ended by a signal
    exit_nonzero,    // exited with a non-zero status
    not_started,     // the command could not be started (agent-exec says why)
};

struct CallResult {
    CallOutcome outcome = CallOutcome::not_started;
    std::string reason; // for people, when not ok
    int exit_code = -1;
    int signal = 0;
    double seconds = 0;
    std::string out;       // the agent's stdout (at most max_output_bytes)
    std::string err_tail;  // the last 4 KiB of its stderr
    int leftovers = 0;     // processes it left behind, killed
    bool isolated = false; // ran in the private view
    std::string isolation; // how, or why not
};

// Runs one call through `infrarsi` (the binary given) agent-exec and reads back what it wrote. Never throws
// for what the agent does; throws infrarsi::Error only when the call's directory cannot be used.
CallResult call_agent(const fs::path& infrarsi, const CallSpec& spec);

// `infrarsi agent-exec`: the contained side (see above). Reads the request from stdin; returns the exit
// status for main.
int agent_exec(const CallSpec& spec);

inline constexpr util::EnumNames<CallOutcome, 6> call_outcome_names{
    {{{CallOutcome::ok, "ok"},
      {CallOutcome::timeout, "timeout"},
      {CallOutcome::output_exceeded, "output_exceeded"},
      {CallOutcome::crashed, "crashed"},
      {CallOutcome::exit_nonzero, "exit_nonzero"},
      {CallOutcome::not_started, "not_started"}}}};

} // namespace infrarsi::agent
