#pragma once
// The NCCL all-reduce bus-bandwidth probe, off by default: how fast the GPUs reduce together, in nccl-tests'
// terms (bus bandwidth = bytes / time x 2 (n - 1) / n, comparable across rank counts with the links' speed).
// Two forms:
//   - a node's GPUs in one process (ncclCommInitAll): the plugin's record with nccl_allreduce=yes and
//     `infrarsi node --gpu --nccl-allreduce`;
//   - an allocation's GPUs, one process per GPU (`srun infrarsi nccl-probe --rendezvous DIR`): rank 0 creates
//     NCCL's unique id and leaves it in a file of a directory every rank sees, the others wait for it.
// The libraries are loaded at run time (gpu_libraries.hpp); without them the record says so. Each form runs
// in a forked child killed at its budget, so a rank that never comes costs the budget, never a hang.
#include "node/calibration.hpp"
#include "node/cuda_abi.hpp"
#include "node/gpu.hpp"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace infrarsi::node {

struct NcclAllreduce {
    GpuProbeStatus status = GpuProbeStatus::no_gpu;
    std::string detail;      // why not ok, for people
    int version = 0;         // ncclGetVersion's code, 22703 for 2.27.3
    int ranks = 0;           // GPUs in the communicator
    std::uint64_t bytes = 0; // of one all-reduce (float32 sum, in place)
    ProbeStats bus_gbs;      // bus bandwidth, GB/s, one sample per timed batch of all-reduces
    double elapsed_ms = 0;
    double budget_ms = 0;
    bool operator==(const NcclAllreduce&) const = default;
};

struct NcclProbeOptions {
    std::chrono::milliseconds budget{10000}; // the whole probe: CUDA's and NCCL's start-up included
    unsigned repeats = 5;
    std::uint64_t bytes = std::uint64_t(256) << 20; // shrunk to fit a quarter of a GPU's free memory
    std::vector<std::string> library_dirs;          // searched before the loader's path
    bool loader_path = true; // false: only library_dirs (a test of a node without them)
};

// nccl-tests' bus bandwidth of an all-reduce of `bytes` that took `seconds` over `ranks` GPUs, in GB/s.
double allreduce_bus_gbs(double bytes, double seconds, int ranks);

// Every GPU this process sees in one communicator; fewer than two: no_gpu. In a forked child.
NcclAllreduce probe_nccl_allreduce_node(const NcclProbeOptions& options);

// One rank of a communicator of `ranks` processes, on the CUDA device `device`: rank 0 writes NCCL's unique
// id to `rendezvous` (which must not exist yet: a name of this run's own, e.g. with the job and step id), the
// others wait for it until the budget ends. Every rank returns the figures (rank 0's are printed).
struct RankPlace {
    int rank = 0, ranks = 1, device = 0;
};
// A task of an srun step as a rank: SLURM_PROCID, SLURM_NTASKS, and the device SLURM_LOCALID, or 0 where
// Slurm gave the task one GPU (CUDA_VISIBLE_DEVICES names one); the rendezvous name from SLURM_JOB_ID and
// SLURM_STEP_ID. `env` looks a variable up (nullptr: unset). Throws infrarsi::Error naming what is missing.
struct SlurmRank {
    RankPlace place;
    std::string rendezvous_name; // "nccl-id.<job>.<step>"
};
SlurmRank slurm_rank(const std::function<const char*(const char*)>& env);

NcclAllreduce probe_nccl_allreduce_rank(const NcclProbeOptions& options, const RankPlace& place,
                                        const std::filesystem::path& rendezvous);

// The rendezvous file. publish: created whole or not at all (written beside it, then linked to its name,
// which fails if it exists: a stale id of an earlier run is never taken); throws infrarsi::Error. await:
// polls until `deadline`; nullopt when it never came; throws infrarsi::Error for a file that is not an id (a
// symlink, a FIFO, another file's content).
void publish_unique_id(const std::filesystem::path& rendezvous, const cuda_abi::NcclUniqueId& id);
std::optional<cuda_abi::NcclUniqueId> await_unique_id(const std::filesystem::path& rendezvous,
                                                      std::chrono::steady_clock::time_point deadline);

// NCCL's unique id as the rendezvous file holds it: 256 lower-case hex digits and a newline.
std::string encode_unique_id(const cuda_abi::NcclUniqueId& id);
// nullopt for anything else (a truncated write, another file).
std::optional<cuda_abi::NcclUniqueId> decode_unique_id(std::string_view text);

nlohmann::json to_json(const NcclAllreduce& n);
// Validates as it reads; throws infrarsi::Error naming the field.
NcclAllreduce nccl_allreduce_from_json(const nlohmann::json& j);

} // namespace infrarsi::node
