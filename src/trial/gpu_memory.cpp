#include "trial/gpu_memory.hpp"

#include "node/gpu.hpp"
#include "util/error.hpp"
#include "util/number.hpp"
#include "util/process.hpp"
#include "util/text.hpp"

#include <algorithm>

namespace infrarsi::trial {
namespace {} // namespace

std::vector<GpuAppMemory> parse_compute_apps(std::string_view text) {
    std::vector<GpuAppMemory> out;
    while (!text.empty()) {
        const auto nl = text.find('\n');
        const std::string_view line = text.substr(0, nl);
        text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
        std::string_view f[3];
        std::string_view rest = line;
        int n = 0;
        for (; n < 3 && !rest.empty(); ++n) {
            const auto comma = rest.find(',');
            f[n] = trim(rest.substr(0, comma));
            rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
        }
        if (n != 3 || !trim(rest).empty() || f[0].empty()) continue;
        const auto pid = parse_integer<pid_t>(f[1], 1);
        const auto mib = parse_integer<long long>(f[2], 0);
        if (!pid || !mib) continue;
        out.push_back({std::string(f[0]), *pid, static_cast<double>(*mib) * 1024 * 1024});
    }
    return out;
}

double largest_gpu_bytes(const std::vector<GpuAppMemory>& apps, const std::set<pid_t>& pids) {
    std::map<std::string, double> per_gpu;
    for (const auto& a : apps)
        if (pids.count(a.pid)) per_gpu[a.gpu_bus_id] += a.bytes;
    double largest = 0;
    for (const auto& [gpu, bytes] : per_gpu)
        largest = std::max(largest, bytes);
    return largest;
}

GpuMemorySampler::GpuMemorySampler(Query query, Pids pids, std::chrono::milliseconds period)
    : query_(std::move(query)), pids_(std::move(pids)), thread_([this, period] { run(period); }) {}

GpuMemorySampler::~GpuMemorySampler() {
    {
        std::lock_guard lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
}

void GpuMemorySampler::run(std::chrono::milliseconds period) {
    std::unique_lock lock(mutex_);
    while (!stop_) {
        lock.unlock();
        std::optional<double> seen;
        if (const auto text = query_()) {
            const double bytes = largest_gpu_bytes(parse_compute_apps(*text), pids_());
            if (bytes > 0) seen = bytes;
        }
        lock.lock();
        ++samples_;
        if (seen) peak_ = std::max(peak_.value_or(0), *seen);
        wake_.wait_for(lock, period, [this] { return stop_; });
    }
}

std::optional<double> GpuMemorySampler::peak_bytes() const {
    std::lock_guard lock(mutex_);
    return peak_;
}

int GpuMemorySampler::samples() const {
    std::lock_guard lock(mutex_);
    return samples_;
}

std::optional<GpuMemorySampler::Query> nvidia_smi_query() {
    if (!node::has_nvidia_device_files()) return std::nullopt;
    return GpuMemorySampler::Query([]() -> std::optional<std::string> {
        try {
            ProcessOptions o;
            o.timeout = std::chrono::seconds(5);
            const auto r = run_process(kNvidiaSmiComputeApps, o);
            if (!r.ok()) return std::nullopt;
            return r.out;
        } catch (const Error&) {
            return std::nullopt; // no nvidia-smi on PATH
        }
    });
}

} // namespace infrarsi::trial
