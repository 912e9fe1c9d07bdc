#pragma once
// Knob presets a contract includes by name instead of writing the knobs out: `[knobs] include = ["nccl"]`.
// Each preset is a set of ordinary knobs (env-delivered, with a baseline that leaves the job as it is), so
// the search, the models, the manifest and the report treat them like any knob of the contract. A knob the
// contract declares itself (same name or same variable) takes the place of the preset's. docs/contract.md
// lists the presets and their values.
//
//   nccl-algo      NCCL_ALGO (Ring, Tree), NCCL_PROTO (Simple, LL)
//   nccl-channels  NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS (2 to 32)
//   nccl-buffers   NCCL_BUFFSIZE (1 MiB to 16 MiB; NCCL's default 4 MiB the baseline)
//   nccl-net       NCCL_NET_GDR_LEVEL (LOC, PIX, PXB, PHB, SYS)
//   nccl           all of the above
// Every preset choice knob has the value "default" (the baseline): the variable is left out of the trial's
// environment, so NCCL (or the job's own setting) decides, as it does today.
#include "space/space.hpp"

#include <optional>
#include <string>
#include <vector>

namespace infrarsi::space {

inline constexpr const char* kUnsetChoice = "default";

// The preset's knobs, in a fixed order; nullopt for an unknown name.
std::optional<std::vector<Knob>> preset_knobs(const std::string& name);
// "nccl, nccl-algo, ...": the names, for an error message.
std::string preset_names();

} // namespace infrarsi::space
