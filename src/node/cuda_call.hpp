#pragma once
// The GPU probes' (gpu.cpp, nccl_allreduce.cpp) way of calling the run-time-loaded CUDA runtime: a failed
// call throws CudaFailure with the call's name and CUDA's words, which the probe turns into its record's
// status and detail; device memory is freed on every path out of a probe; and a probe run in a forked child
// killed at its budget (run_bounded_probe), so a hung driver or a crash in a vendor library costs the budget.
#include "node/gpu.hpp"
#include "node/gpu_libraries.hpp"
#include "util/bounded_child.hpp"
#include "util/error.hpp"

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace infrarsi::node {

// Milliseconds since `t0` on the steady clock: the probes' budgets and timings.
inline double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

struct CudaFailure {
    std::string what;
};

class Cuda {
  public:
    explicit Cuda(const CudaRuntime& rt) : rt_(rt) {}
    void check(cuda_abi::Status s, const char* call) const {
        if (s == 0) return;
        const char* words = rt_.get_error_string ? rt_.get_error_string(s) : nullptr;
        throw CudaFailure{std::string(call) + ": " + (words ? words : "error " + std::to_string(s))};
    }
    const CudaRuntime& rt() const { return rt_; }

  private:
    const CudaRuntime& rt_;
};

class DeviceBuffer {
  public:
    DeviceBuffer(const Cuda& cuda, size_t bytes) : cuda_(cuda) {
        cuda.check(cuda.rt().malloc(&p_, bytes), "cudaMalloc");
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    ~DeviceBuffer() {
        if (p_) cuda_.rt().free(p_);
    }
    void* get() const { return p_; }

  private:
    const Cuda& cuda_;
    void* p_ = nullptr;
};

// `probe`'s record (status, detail, elapsed_ms, budget_ms: GpuCalibration, NcclAllreduce) from a forked child
// killed at `budget` plus a second; the record says timed_out or failed (what `what` is) when it gives none.
template <class Record>
Record run_bounded_probe(std::chrono::milliseconds budget, const std::function<Record()>& probe,
                         Record (*from_json)(const nlohmann::json&), const std::string& what,
                         const std::string& hang_causes) {
    Record r;
    r.budget_ms = static_cast<double>(budget.count());
    const auto t0 = std::chrono::steady_clock::now();
    ChildOutput child;
    try {
        child = run_in_child([&] { return to_json(probe()).dump(); }, budget + std::chrono::seconds(1),
                             size_t(1) << 20);
    } catch (const Error& e) {
        r.status = GpuProbeStatus::failed;
        r.detail = e.what();
        return r;
    }
    if (child.end == ChildEnd::finished) {
        try {
            return from_json(nlohmann::json::parse(child.out));
        } catch (const std::exception& e) {
            r.status = GpuProbeStatus::failed;
            r.detail = "the " + what + "'s output is not its record: " + e.what();
        }
    } else if (child.end == ChildEnd::timed_out) {
        r.status = GpuProbeStatus::timed_out;
        r.detail = "the " + what + " did not finish within its budget of " + std::to_string(budget.count()) +
                   " ms (" + hang_causes + ")";
    } else {
        r.status = GpuProbeStatus::failed;
        r.detail = "the " + what + "'s child process failed (a crash in a vendor library?)";
    }
    r.elapsed_ms = ms_since(t0);
    return r;
}

} // namespace infrarsi::node
