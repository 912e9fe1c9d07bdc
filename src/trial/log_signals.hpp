#pragma once
// The one classifier of failure lines in a job's output: what a PyTorch/NCCL training job (and the launcher,
// and Slurm, around it) writes when it fails, read line by line, and the job-level verdict drawn from it.
// Slurm's record knows only a cgroup kill of host memory; the log says whether it was the GPU that ran out,
// a collective that timed out, another rank that died, or a plain crash.
//
// Lines. Each line is read as written, after these prefixes are set aside: torchrun's "[rank3]:" and
// "[default3]:", srun --label's "3: ", accelerate's "stderr: "/"stdout: ", leading ANSI colour codes. Only
// its first kMaxSignalLineBytes are read. The families, in the order a line is tested (first match wins):
//   None    an "NCCL INFO" line; a warning: Python's "file.py:12: SomeWarning: ...", its source echo
//           "warnings.warn(...", c10's "[W...] Warning: ..." (a job survives what it warns about, whatever
//           the text says, "out of memory" included); every line that matches nothing below.
//   GpuOom  PyTorch's allocator, all formats: "<X> out of memory. Tried to allocate 2.00 GiB. GPU 0 has a
//           total capacity of 79.15 GiB ..." (2.1+, "capacty" as 2.1 spelt it too), "... Tried to allocate
//           20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.56 GiB already allocated; ...)" (1.x, "reserved in
//           total by PyTorch" or the older "cached"), from CUDA or HIP; an exception named OutOfMemoryError;
//           "CUDA error: out of memory"; 0.4's "cuda runtime error (2) : out of memory"; NCCL's
//           "Cuda failure 'out of memory'" / "Cuda failure 2 'out of memory'"; "CUBLAS_STATUS_ALLOC_FAILED".
//           gpu, requested_bytes, allocated_bytes ("already allocated" / "is allocated by PyTorch") and
//           capacity_bytes are taken where the line states them.
//   HostOom c10's "DefaultCPUAllocator: can't allocate memory: you tried to allocate N bytes" (and "not
//           enough memory"); Python's MemoryError (the exception line itself: "MemoryError",
//           "MemoryError: ...", numpy's "..._ArrayMemoryError: Unable to allocate 7.45 GiB for an array
//           ..."; not a word inside other text); "std::bad_alloc"; Slurm's "Detected N oom_kill event" /
//           "oom-kill event(s)", slurmstepd's "Exceeded job/step memory limit" / "exceeded memory limit", and
//           srun's "task N: Out Of Memory" (source Slurm). requested_bytes where the line states it.
//   PeerFailure  a rank saw another go: gloo's "Connection closed by peer"; "Connection reset by peer" or
//           "Broken pipe" in a distributed line (gloo, NCCL, c10d, TCPStore, ProcessGroup, Dist*Error);
//           NCCL's "closed by remote peer", "remote process exited or there was a network error",
//           "ncclRemoteError"; c10d's "Failed to recv, got 0 bytes"; RendezvousClosedError.
//   NcclTimeout  a collective timed out or could not connect: "Watchdog caught collective operation
//           timeout", "Some NCCL operations have failed or timed out", "Timeout at NCCL work", "detected by
//           watchdog", "Heartbeat monitor timed out", "watchdog got stuck", "NCCL communicator was aborted",
//           gloo's "Timed out waiting ...ms for recv operation to complete" and "Gloo connectFullMesh
//           failed", DistStoreError, DistNetworkError, RendezvousTimeoutError, RendezvousConnectionError.
//   Crash   the launcher's report that a rank ended (source Launcher): torchrun's "failed (exitcode: N)
//           local_rank: ..." and ChildFailedError, SignalException, mp.spawn's ProcessRaisedException /
//           ProcessExitedException, mpirun's "mpirun noticed that process rank ...", srun's "task N: Exited
//           with exit code 1" (any "srun: error: <node>: task N: ..."), DeepSpeed's "exits with return code",
//           the batch shell's "slurm_script: line N: PID Killed"; and the workload's own (source Workload):
//           a Python exception line ("SomeError: message" or "SomeError" at the start of the line, the
//           name ending in Error or Exception), "Segmentation fault", "(core dumped)", "Fatal Python error",
//           "terminate called after throwing" / "without an active exception".
// An out-of-memory report whose request is absurd (PyTorch's "Tried to allocate more than 1EB memory", a
// request over 1 EiB, or over 1024x the stated capacity) is never a memory observation: it is a Crash line
// with absurd set and no byte counts (it comes of corrupt sizes, typically after a collective failed).
// Units: B/bytes, KiB..EiB (powers of 1024), KB..EB (powers of 1000, as written).
//
// The job (diagnose). The lines are read in order ('\n' ends a line; a '\r' inside one, a progress bar's
// redraw, starts a new segment of the same line). The first of these decides:
//   1. The first out-of-memory line (GpuOom or HostOom, with its numbers), unless an NCCL timeout, a peer
//      failure or an absurd out-of-memory report came before it: an OOM that follows one of those is a
//      consequence, not this candidate's memory (it is kept in `discounted`).
//   2. Slurm's own report of a cgroup OOM kill (source Slurm), wherever it is: a fact about the job's host
//      memory, not the job's account of itself (trial::classify counts it as out of memory).
//   3. The first NcclTimeout or PeerFailure line, or the first absurd out-of-memory report (Crash).
//   4. The first crash line: the workload's own first (the rank's exception above torchrun's footer, the
//      inner exception of a chained traceback), else the launcher's.
//   5. None.
// The launcher's lines never hide an OOM: they report a rank's end and follow its reason (or, redirected or
// in torchrun's error_file footer, repeat it). Lines of a job that succeeded are read the same way: read the
// diagnosis of a job that failed. Nothing here throws on any input (but for allocation failure), and
// diagnose() runs in time linear in the output's size.
#include "util/enum_names.hpp"

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace infrarsi::trial {

enum class LogSignal {
    None,        // nothing that says how the job failed
    HostOom,     // host memory ran out
    GpuOom,      // GPU memory ran out
    NcclTimeout, // a collective timed out, or the ranks could not connect
    PeerFailure, // this rank saw another rank go
    Crash,       // any other failure the log reports
};

// Who wrote a line.
enum class LineSource {
    Workload, // the training process (a rank)
    Launcher, // torchrun, mpirun, srun's task report, DeepSpeed's launcher, the batch script's shell
    Slurm,    // slurmstepd, or srun relaying its OOM verdict
};

inline constexpr util::EnumNames<LogSignal, 6> log_signal_names{{{
    {LogSignal::None, "none"},
    {LogSignal::HostOom, "host_oom"},
    {LogSignal::GpuOom, "gpu_oom"},
    {LogSignal::NcclTimeout, "nccl_timeout"},
    {LogSignal::PeerFailure, "peer_failure"},
    {LogSignal::Crash, "crash"},
}}};
inline constexpr util::EnumNames<LineSource, 3> line_source_names{{{
    {LineSource::Workload, "workload"},
    {LineSource::Launcher, "launcher"},
    {LineSource::Slurm, "slurm"},
}}};

inline std::string to_string(LogSignal s) {
    return std::string(log_signal_names.name(s));
}
inline std::string to_string(LineSource s) {
    return std::string(line_source_names.name(s));
}
// Throws an Error naming the accepted values.
LogSignal parse_log_signal(std::string_view name);

// HostOom or GpuOom.
constexpr bool is_memory(LogSignal s) {
    return s == LogSignal::HostOom || s == LogSignal::GpuOom;
}

// How much of a line is read, and kept in SignalLine::line.
inline constexpr std::size_t kMaxSignalLineBytes = 4096;

struct SignalLine {
    LogSignal signal = LogSignal::None;
    LineSource source = LineSource::Workload;
    // An out-of-memory report with an absurd request: signal is Crash and no byte count is kept.
    bool absurd = false;
    std::optional<int> gpu;                // the device the allocator named
    std::optional<double> requested_bytes; // "Tried to allocate", "you tried to allocate", numpy's request
    std::optional<double> allocated_bytes; // allocated by PyTorch on that device when it failed
    std::optional<double> capacity_bytes;  // the device's total capacity
    std::size_t line_no = 0;               // 1-based line in the job output (diagnose); 0 from classify_line
    std::string line;                      // the line as written, its first kMaxSignalLineBytes
};

// One line, without its newline.
SignalLine classify_line(std::string_view line);

// The job-level verdict.
struct LogDiagnosis {
    LogSignal signal = LogSignal::None;
    std::optional<SignalLine> first;      // the line that decided; nullopt when signal is None
    std::optional<SignalLine> discounted; // the first out-of-memory report not taken as memory, if any
    std::string reason;                   // one line for people: the deciding line, trimmed; empty for None
};

LogDiagnosis diagnose(std::string_view job_output);

// For the store and the report: signal, reason, and the deciding line's source, line number and numbers.
nlohmann::json to_json(const LogDiagnosis& d);
// That document read back (a line's text is not in it); unknown names read as none and workload.
LogDiagnosis log_diagnosis_from_json(const nlohmann::json& j);

} // namespace infrarsi::trial
