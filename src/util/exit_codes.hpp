#pragma once
// The exit statuses of the mains (infrarsi, infrarsid).

namespace infrarsi {

// A main that caught something other than an Error: a bug, not a user's mistake (sysexits.h EX_SOFTWARE).
// An Error exits 1 with its message, a command-line mistake 2.
inline constexpr int kInternalErrorExit = 70;
// A command-line mistake (an unknown option, a missing or malformed value): 2, as Slurm's commands and
// Python's argparse exit, not CLI11's own codes (105-109). --help and --version exit 0.
inline constexpr int kUsageExit = 2;

} // namespace infrarsi
