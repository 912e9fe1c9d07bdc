#include "node/gpu_libraries.hpp"

#include <cstdlib>
#include <dlfcn.h>
#include <sstream>

namespace infrarsi::node {
namespace {

void* open_first(const std::vector<std::string>& dirs, bool loader_path, const std::vector<std::string>& names) {
    for (const auto& dir : dirs)
        for (const auto& name : names)
            if (void* h = ::dlopen((dir + "/" + name).c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    if (loader_path)
        for (const auto& name : names)
            if (void* h = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    return nullptr;
}

// Binds every symbol or none: a half-bound table would call through a null pointer.
class Binder {
  public:
    Binder(void* handle, std::string library, std::vector<std::string>& missing)
        : handle_(handle), library_(std::move(library)), missing_(missing) {}
    template <class F> void operator()(F& slot, const char* symbol) {
        void* p = handle_ ? ::dlsym(handle_, symbol) : nullptr;
        if (!p) {
            if (handle_) missing_.push_back(library_ + ": no symbol " + symbol);
            ok_ = false;
        }
        slot = reinterpret_cast<F>(p);
    }
    bool ok() const { return ok_ && handle_; }

  private:
    void* handle_;
    std::string library_;
    std::vector<std::string>& missing_;
    bool ok_ = true;
};

std::string joined(const std::vector<std::string>& dirs, bool loader_path) {
    std::ostringstream s;
    for (size_t i = 0; i < dirs.size(); ++i)
        s << (i ? ":" : "") << dirs[i];
    if (!loader_path) return dirs.empty() ? "no directory" : s.str();
    return dirs.empty() ? "the loader's path" : s.str() + " and the loader's path";
}

} // namespace

GpuLibraries::GpuLibraries(const std::vector<std::string>& dirs, bool loader_path, bool with_nccl) {
    auto load = [&](const char* what, const std::vector<std::string>& names) {
        void* h = open_first(dirs, loader_path, names);
        if (h)
            handles_.push_back(h);
        else
            missing_.push_back(std::string(what) + " (not found in " + joined(dirs, loader_path) + ")");
        return h;
    };
    if (void* h = load("libcudart", {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"})) {
        Binder b(h, "libcudart", missing_);
        auto& r = runtime_;
        b(r.get_device_count, "cudaGetDeviceCount");
        b(r.set_device, "cudaSetDevice");
        b(r.device_get_pci_bus_id, "cudaDeviceGetPCIBusId");
        b(r.device_get_attribute, "cudaDeviceGetAttribute");
        b(r.malloc, "cudaMalloc");
        b(r.free, "cudaFree");
        b(r.memcpy, "cudaMemcpy");
        b(r.mem_get_info, "cudaMemGetInfo");
        b(r.event_create, "cudaEventCreate");
        b(r.event_record, "cudaEventRecord");
        b(r.event_synchronize, "cudaEventSynchronize");
        b(r.event_elapsed_time, "cudaEventElapsedTime");
        b(r.event_destroy, "cudaEventDestroy");
        b(r.device_synchronize, "cudaDeviceSynchronize");
        b(r.get_error_string, "cudaGetErrorString");
        b(r.driver_get_version, "cudaDriverGetVersion");
        b(r.runtime_get_version, "cudaRuntimeGetVersion");
        b(r.memset, "cudaMemset");
        b(r.stream_create, "cudaStreamCreate");
        b(r.stream_synchronize, "cudaStreamSynchronize");
        b(r.stream_destroy, "cudaStreamDestroy");
        runtime_loaded_ = b.ok();
    }
    if (void* h = load("libcublas", {"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"})) {
        Binder b(h, "libcublas", missing_);
        b(cublas_.create, "cublasCreate_v2");
        b(cublas_.destroy, "cublasDestroy_v2");
        b(cublas_.gemm_ex, "cublasGemmEx");
        cublas_loaded_ = b.ok();
    }
    if (void* h = load("libnvidia-ml", {"libnvidia-ml.so.1", "libnvidia-ml.so"})) {
        Binder b(h, "libnvidia-ml", missing_);
        auto& n = nvml_;
        b(n.init, "nvmlInit_v2");
        b(n.shutdown, "nvmlShutdown");
        b(n.system_get_driver_version, "nvmlSystemGetDriverVersion");
        b(n.device_get_handle_by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2");
        b(n.device_get_name, "nvmlDeviceGetName");
        b(n.device_get_uuid, "nvmlDeviceGetUUID");
        b(n.device_get_memory_info, "nvmlDeviceGetMemoryInfo");
        b(n.device_get_max_clock_info, "nvmlDeviceGetMaxClockInfo");
        b(n.device_get_nvlink_state, "nvmlDeviceGetNvLinkState");
        b(n.device_get_topology_common_ancestor, "nvmlDeviceGetTopologyCommonAncestor");
        b(n.device_get_p2p_status, "nvmlDeviceGetP2PStatus");
        nvml_loaded_ = b.ok();
    }
    if (!with_nccl) return;
    if (void* h = load("libnccl", {"libnccl.so.2", "libnccl.so"})) {
        Binder b(h, "libnccl", missing_);
        auto& n = nccl_;
        b(n.get_version, "ncclGetVersion");
        b(n.get_unique_id, "ncclGetUniqueId");
        b(n.comm_init_rank, "ncclCommInitRank");
        b(n.comm_init_all, "ncclCommInitAll");
        b(n.comm_destroy, "ncclCommDestroy");
        b(n.all_reduce, "ncclAllReduce");
        b(n.group_start, "ncclGroupStart");
        b(n.group_end, "ncclGroupEnd");
        b(n.get_error_string, "ncclGetErrorString");
        nccl_loaded_ = b.ok();
    }
}

GpuLibraries::~GpuLibraries() {
    // Not dlclose'd: CUDA's libraries register exit handlers that must find their code at exit.
}

std::vector<std::string> cuda_library_dirs_from_env() {
    std::vector<std::string> dirs;
    const char* v = std::getenv("INFRARSI_CUDA_LIBRARY_PATH");
    if (!v) return dirs;
    std::string s = v;
    size_t start = 0;
    while (start <= s.size()) {
        size_t end = s.find(':', start);
        if (end == std::string::npos) end = s.size();
        if (end > start) dirs.push_back(s.substr(start, end - start));
        start = end + 1;
    }
    return dirs;
}

} // namespace infrarsi::node
