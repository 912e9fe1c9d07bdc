#pragma once
// The CUDA runtime, cuBLAS, NVML and NCCL, loaded at run time (dlopen) rather than linked: the plugin and the
// orchestrator run on nodes without them. Each library is looked for in the given directories first, then
// by the loader's search path, under its versioned names (libcudart.so.13, .12, .11.0, libcudart.so).
#include "node/cuda_abi.hpp"

#include <memory>
#include <string>
#include <vector>

namespace infrarsi::node {

struct CudaRuntime {
    cuda_abi::GetDeviceCount get_device_count = nullptr;
    cuda_abi::SetDevice set_device = nullptr;
    cuda_abi::DeviceGetPciBusId device_get_pci_bus_id = nullptr;
    cuda_abi::DeviceGetAttribute device_get_attribute = nullptr;
    cuda_abi::Malloc malloc = nullptr;
    cuda_abi::Free free = nullptr;
    cuda_abi::Memcpy memcpy = nullptr;
    cuda_abi::MemGetInfo mem_get_info = nullptr;
    cuda_abi::EventCreate event_create = nullptr;
    cuda_abi::EventRecord event_record = nullptr;
    cuda_abi::EventSynchronize event_synchronize = nullptr;
    cuda_abi::EventElapsedTime event_elapsed_time = nullptr;
    cuda_abi::EventDestroy event_destroy = nullptr;
    cuda_abi::DeviceSynchronize device_synchronize = nullptr;
    cuda_abi::GetErrorString get_error_string = nullptr;
    cuda_abi::DriverGetVersion driver_get_version = nullptr;
    cuda_abi::RuntimeGetVersion runtime_get_version = nullptr;
    cuda_abi::Memset memset = nullptr;
    cuda_abi::StreamCreate stream_create = nullptr;
    cuda_abi::StreamSynchronize stream_synchronize = nullptr;
    cuda_abi::StreamDestroy stream_destroy = nullptr;
};

struct Cublas {
    cuda_abi::BlasCreate create = nullptr;
    cuda_abi::BlasDestroy destroy = nullptr;
    cuda_abi::BlasGemmEx gemm_ex = nullptr;
};

struct Nvml {
    cuda_abi::NvmlInit init = nullptr;
    cuda_abi::NvmlShutdown shutdown = nullptr;
    cuda_abi::NvmlSystemGetDriverVersion system_get_driver_version = nullptr;
    cuda_abi::NvmlDeviceGetHandleByPciBusId device_get_handle_by_pci_bus_id = nullptr;
    cuda_abi::NvmlDeviceGetName device_get_name = nullptr;
    cuda_abi::NvmlDeviceGetUuid device_get_uuid = nullptr;
    cuda_abi::NvmlDeviceGetMemoryInfo device_get_memory_info = nullptr;
    cuda_abi::NvmlDeviceGetMaxClockInfo device_get_max_clock_info = nullptr;
    cuda_abi::NvmlDeviceGetNvLinkState device_get_nvlink_state = nullptr;
    cuda_abi::NvmlDeviceGetTopologyCommonAncestor device_get_topology_common_ancestor = nullptr;
    cuda_abi::NvmlDeviceGetP2PStatus device_get_p2p_status = nullptr;
};

struct Nccl {
    cuda_abi::NcclGetVersion get_version = nullptr;
    cuda_abi::NcclGetUniqueId get_unique_id = nullptr;
    cuda_abi::NcclCommInitRank comm_init_rank = nullptr;
    cuda_abi::NcclCommInitAll comm_init_all = nullptr;
    cuda_abi::NcclCommDestroy comm_destroy = nullptr;
    cuda_abi::NcclAllReduce all_reduce = nullptr;
    cuda_abi::NcclGroupStart group_start = nullptr;
    cuda_abi::NcclGroupEnd group_end = nullptr;
    cuda_abi::NcclGetErrorString get_error_string = nullptr;
};

// The loaded libraries; a member is empty (std::nullopt-like: its `loaded` false) when its library or one of
// its symbols is missing, and `missing` says which, for the record.
class GpuLibraries {
  public:
    // Searches `dirs` (then the loader's path). Never throws: what is absent is recorded.
    // loader_path false: `dirs` only. NCCL is loaded only when `with_nccl` (the all-reduce probe).
    explicit GpuLibraries(const std::vector<std::string>& dirs, bool loader_path = true,
                          bool with_nccl = false);
    GpuLibraries(const GpuLibraries&) = delete;
    GpuLibraries& operator=(const GpuLibraries&) = delete;
    ~GpuLibraries();

    bool has_runtime() const { return runtime_loaded_; }
    bool has_cublas() const { return cublas_loaded_; }
    bool has_nvml() const { return nvml_loaded_; }
    bool has_nccl() const { return nccl_loaded_; }
    const CudaRuntime& runtime() const { return runtime_; }
    const Cublas& cublas() const { return cublas_; }
    const Nvml& nvml() const { return nvml_; }
    const Nccl& nccl() const { return nccl_; }
    // "libcudart (not found in: ...)", "libcublas: no symbol cublasGemmEx", one entry per problem.
    const std::vector<std::string>& missing() const { return missing_; }

  private:
    std::vector<void*> handles_;
    CudaRuntime runtime_;
    Cublas cublas_;
    Nvml nvml_;
    Nccl nccl_;
    bool runtime_loaded_ = false, cublas_loaded_ = false, nvml_loaded_ = false, nccl_loaded_ = false;
    std::vector<std::string> missing_;
};

// The directories of INFRARSI_CUDA_LIBRARY_PATH (colon-separated) when set, else none.
std::vector<std::string> cuda_library_dirs_from_env();

} // namespace infrarsi::node
