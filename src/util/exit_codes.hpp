#pragma once
// The exit statuses of the mains (infrarsi, infrarsid).

namespace infrarsi {

// A main that caught something other than an Error: a bug, not a user's mistake (sysexits.h EX_SOFTWARE).
// An Error exits 1 with its message, a command-line mistake 2.
inline constexpr int kInternalErrorExit = 70;

} // namespace infrarsi
