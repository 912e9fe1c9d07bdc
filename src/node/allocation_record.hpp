#pragma once
// The per-node, per-allocation record the SPANK plugin writes in record mode: which job, which node, what
// hardware (topology features) and how noisy it was (calibration). One JSON object per line in
// <spool>/allocations.jsonl; the orchestrator and the experience bank read them back with read_records.
#include "node/calibration.hpp"
#include "node/gpu.hpp"
#include "node/nccl_allreduce.hpp"
#include "node/topology.hpp"

#include <chrono>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace infrarsi::node {

inline constexpr const char* kAllocationRecordFormat = "infrarsi-allocation/1";

struct AllocationRecord {
    uint32_t job_id = 0;
    uint32_t array_job_id = 0;  // 0 when not an array task
    uint32_t array_task_id = 0; // meaningful only when array_job_id != 0
    uint32_t step_id = 0;       // the step that wrote it (the first on this node), as Slurm numbers it
    std::string node;           // Slurm node name (not the host name: fake nodes share one host)
    std::string time;           // UTC, ISO 8601 ("2024-05-01T12:00:00Z")
    std::string mode;           // record, trial, tune: what the job asked for
    std::string plugin_version; // InfraRSI version that wrote it
    double record_ms = 0;       // what writing this record cost the job: topology + calibration + write
    TopologyFeatures topology;
    Calibration calibration;
    std::optional<GpuCalibration> gpu; // absent when the site's plugin does not probe GPUs (gpu=no, or auto
                                       // on a node without NVIDIA device files)
    // The node's GPUs reducing together (nccl_allreduce.hpp): only where the site asks (nccl_allreduce=yes).
    std::optional<NcclAllreduce> nccl_allreduce;
    bool operator==(const AllocationRecord&) const = default;
};

nlohmann::json to_json(const AllocationRecord& r);
// One line, no newline inside, ending in '\n': what append_record writes.
std::string to_json_line(const AllocationRecord& r);
// Validates everything: format tag, field types, a non-empty node name without control characters.
// Throws infrarsi::Error naming the field.
AllocationRecord record_from_json(const nlohmann::json& j);
AllocationRecord parse_record_line(const std::string& line);

// Appends one record with a single write(2) on an O_APPEND descriptor, so records from many nodes' slurmstepd
// never interleave. Writers serialise on `path`.lock (0600: only root, who writes the spool, can open it, so
// no user can stall a writer), taken without blocking and retried for at most `lock_wait`. The records file
// is opened non-blocking without following a symlink and must be a regular file with one link owned by root
// (or this process); it is created with `mode` when absent. Throws Error on any refusal or a busy lock.
void append_record(const std::string& path, const AllocationRecord& r, unsigned mode = 0644,
                   std::chrono::milliseconds lock_wait = std::chrono::milliseconds(2000));

struct RecordReadResult {
    std::vector<AllocationRecord> records;
    std::vector<std::string> errors; // "path:line: problem" for each line that failed validation
};
inline constexpr std::size_t kMaxRecordLineBytes = 1u << 20;
// Reads a JSON-lines file; a bad line (not JSON, too deep, longer than kMaxRecordLineBytes) is reported and
// skipped (one writer's crash must not hide the rest). Throws Error only when the file cannot be read (or is
// not a regular file).
RecordReadResult read_records(const std::string& path);

// The nodes whose GPUs are more than kSlowFactor slower than the median node's: each node's figure is the
// mean bf16 GEMM median of its GPUs in its latest record with a GPU probe that ended `ok`; nodes without one
// are not judged, and fewer than two judged nodes name none. A campaign keeps its trials off them.
std::vector<std::string> slow_gpu_nodes(const std::vector<AllocationRecord>& records);

// The records of these jobs' allocations: a job is "123" or, for an array task, "123_4" (Slurm's job ids).
std::vector<AllocationRecord> records_of_jobs(const std::vector<AllocationRecord>& records,
                                              const std::set<std::string>& jobs);

// Current UTC time in the record's format.
std::string utc_now_iso8601();

// The node's peak FLOP/s from its record: the calibration's fastest compute sample (one core's FMA
// throughput: interference only slows it) times the node's cores. nullopt without samples or cores. A
// floating-point peak of a CPU probe: a job in another precision, or on GPUs, may reach more (the MFU
// denominator is then raised to what it achieved: verify::mfu_denominator).
std::optional<double> calibration_peak_flops(const AllocationRecord& r);

// The node's peak for MFU, the figure and where it came from: on a node whose GPU probe ended `ok`, the sum
// of its GPUs' dense bf16 peaks (gpu_peak: the datasheet, else the GEMM probe; nullopt when a GPU has
// neither, rather than a figure that leaves one out), the GPUs the allocation was given being those the
// plugin probed; on a node without one, calibration_peak_flops.
struct NodePeak {
    double flops = 0;
    std::string
        source; // "2 x datasheet: NVIDIA H200 bf16 dense", "CPU calibration (fastest FMA sample x cores)"
    bool gpu = false;
};
std::optional<NodePeak> node_peak_flops(const AllocationRecord& r);

} // namespace infrarsi::node
