#pragma once
// A GPU job's memory when its log prints no allocator peak: the trial wrapper samples nvidia-smi's compute
// processes while the workload runs and keeps, per GPU, the largest sum over the workload's processes; the
// job's figure is its largest GPU's (the limit, [resources] gpu_mem, is per GPU). Sampling misses what lived
// between two samples, so it is a lower bound of the peak: the step lines' allocator peak is preferred.
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <thread>
#include <vector>

namespace infrarsi::trial {

// One line of `nvidia-smi --query-compute-apps=gpu_bus_id,pid,used_memory --format=csv,noheader,nounits`.
struct GpuAppMemory {
    std::string gpu_bus_id; // "00000000:19:00.0"
    pid_t pid = 0;
    double bytes = 0; // nvidia-smi's MiB
    bool operator==(const GpuAppMemory&) const = default;
};
inline const std::vector<std::string> kNvidiaSmiComputeApps = {
    "nvidia-smi", "--query-compute-apps=gpu_bus_id,pid,used_memory", "--format=csv,noheader,nounits"};

// Lines that do not read as such (a header, "[N/A]", "[Insufficient Permissions]", "No devices were found")
// are skipped.
std::vector<GpuAppMemory> parse_compute_apps(std::string_view text);

// Per GPU, the memory of the processes in `pids`; the largest; 0 when none of them is on a GPU.
double largest_gpu_bytes(const std::vector<GpuAppMemory>& apps, const std::set<pid_t>& pids);

class GpuMemorySampler {
  public:
    using Query = std::function<std::optional<std::string>()>; // one sample's text; nullopt when it failed
    using Pids = std::function<std::set<pid_t>()>;             // the workload's processes now
    // Samples at once, then every `period` until destroyed.
    GpuMemorySampler(Query query, Pids pids, std::chrono::milliseconds period);
    ~GpuMemorySampler();
    GpuMemorySampler(const GpuMemorySampler&) = delete;
    GpuMemorySampler& operator=(const GpuMemorySampler&) = delete;
    // The largest figure a sample saw; nullopt when no sample found the workload on a GPU.
    std::optional<double> peak_bytes() const;
    int samples() const;

  private:
    void run(std::chrono::milliseconds period);
    Query query_;
    Pids pids_;
    mutable std::mutex mutex_;
    std::condition_variable wake_;
    bool stop_ = false;
    std::optional<double> peak_;
    int samples_ = 0;
    std::thread thread_;
};

// nvidia-smi run with a 5 s timeout, for a node with NVIDIA device files; nullopt (no sampling) elsewhere.
std::optional<GpuMemorySampler::Query> nvidia_smi_query();

} // namespace infrarsi::trial
