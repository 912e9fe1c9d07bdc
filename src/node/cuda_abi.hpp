#pragma once
// The few CUDA runtime, cuBLAS, NVML and NCCL entry points the GPU probes call, declared here so that nothing
// links them: the probes load the libraries at run time (gpu_libraries.cpp), and a node without them records
// "no GPU". These are stable C ABIs; where the toolkit's headers are present (-DINFRARSI_WITH_CUDA=ON) the
// build checks every signature and constant below against them (tests/cuda/abi_check.cpp).
#include <cstddef>

// The libraries' opaque handle types, at global scope as their headers declare them.
struct CUevent_st;
struct CUstream_st;
struct cublasContext;
struct nvmlDevice_st;
struct ncclComm;

namespace infrarsi::node::cuda_abi {

// cudaError_t, cublasStatus_t and nvmlReturn_t are C enums of int size; 0 is success for all three.
using Status = int;
using Event = ::CUevent_st*;
using Stream = ::CUstream_st*;
using BlasHandle = ::cublasContext*;
using NvmlDevice = ::nvmlDevice_st*;
using NcclComm = ::ncclComm*;

inline constexpr int kMemcpyHostToDevice = 1;
inline constexpr int kMemcpyDeviceToDevice = 3;
inline constexpr int kAttrMultiProcessorCount = 16;
inline constexpr int kAttrMemoryClockRateKhz = 36;
inline constexpr int kAttrGlobalMemoryBusWidth = 37;
inline constexpr int kAttrComputeCapabilityMajor = 75;
inline constexpr int kAttrComputeCapabilityMinor = 76;
inline constexpr int kDataBf16 = 14;        // CUDA_R_16BF
inline constexpr int kBlasOpN = 0;          // CUBLAS_OP_N
inline constexpr int kBlasCompute32F = 68;  // CUBLAS_COMPUTE_32F
inline constexpr int kBlasGemmDefault = -1; // CUBLAS_GEMM_DEFAULT
inline constexpr int kNvmlClockSm = 1;      // NVML_CLOCK_SM
inline constexpr int kNvmlClockMem = 2;     // NVML_CLOCK_MEM
inline constexpr int kNvmlNvlinkMaxLinks = 18;
inline constexpr int kNvmlFeatureEnabled = 1;
inline constexpr int kNvmlP2pCapsNvlink = 2; // NVML_P2P_CAPS_INDEX_NVLINK
inline constexpr int kNvmlP2pStatusOk = 0;
inline constexpr int kNcclFloat32 = 7;         // ncclFloat32
inline constexpr int kNcclSum = 0;             // ncclSum
inline constexpr int kNcclUniqueIdBytes = 128; // NCCL_UNIQUE_ID_BYTES

// ncclUniqueId: passed by value to ncclCommInitRank, so its size is part of the ABI.
struct NcclUniqueId {
    char internal[kNcclUniqueIdBytes];
};

struct NvmlMemory {
    unsigned long long total, free, used;
};

// libcudart
using GetDeviceCount = Status (*)(int*);
using SetDevice = Status (*)(int);
using DeviceGetPciBusId = Status (*)(char*, int, int);
using DeviceGetAttribute = Status (*)(int*, int, int);
using Malloc = Status (*)(void**, size_t);
using Free = Status (*)(void*);
using Memcpy = Status (*)(void*, const void*, size_t, int);
using MemGetInfo = Status (*)(size_t*, size_t*);
using EventCreate = Status (*)(Event*);
using EventRecord = Status (*)(Event, Stream);
using EventSynchronize = Status (*)(Event);
using EventElapsedTime = Status (*)(float*, Event, Event);
using EventDestroy = Status (*)(Event);
using DeviceSynchronize = Status (*)();
using GetErrorString = const char* (*)(Status);
using DriverGetVersion = Status (*)(int*);
using RuntimeGetVersion = Status (*)(int*);
using Memset = Status (*)(void*, int, size_t);
using StreamCreate = Status (*)(Stream*);
using StreamSynchronize = Status (*)(Stream);
using StreamDestroy = Status (*)(Stream);
// libcublas (the v2 API's exported names: cublasCreate_v2, cublasDestroy_v2)
using BlasCreate = Status (*)(BlasHandle*);
using BlasDestroy = Status (*)(BlasHandle);
using BlasGemmEx = Status (*)(BlasHandle, int, int, int, int, int, const void*, const void*, int, int,
                              const void*, int, int, const void*, void*, int, int, int, int);
// libnvidia-ml
using NvmlInit = Status (*)();
using NvmlShutdown = Status (*)();
using NvmlSystemGetDriverVersion = Status (*)(char*, unsigned);
using NvmlDeviceGetHandleByPciBusId = Status (*)(const char*, NvmlDevice*);
using NvmlDeviceGetName = Status (*)(NvmlDevice, char*, unsigned);
using NvmlDeviceGetUuid = Status (*)(NvmlDevice, char*, unsigned);
using NvmlDeviceGetMemoryInfo = Status (*)(NvmlDevice, NvmlMemory*);
using NvmlDeviceGetMaxClockInfo = Status (*)(NvmlDevice, int, unsigned*);
using NvmlDeviceGetNvLinkState = Status (*)(NvmlDevice, unsigned, int*);
using NvmlDeviceGetTopologyCommonAncestor = Status (*)(NvmlDevice, NvmlDevice, int*);
using NvmlDeviceGetP2PStatus = Status (*)(NvmlDevice, NvmlDevice, int, int*);
// libnccl (ncclResult_t and ncclDataType_t/ncclRedOp_t are C enums of int size; 0 is success)
using NcclGetVersion = Status (*)(int*);
using NcclGetUniqueId = Status (*)(NcclUniqueId*);
using NcclCommInitRank = Status (*)(NcclComm*, int, NcclUniqueId, int);
using NcclCommInitAll = Status (*)(NcclComm*, int, const int*);
using NcclCommDestroy = Status (*)(NcclComm);
using NcclAllReduce = Status (*)(const void*, void*, size_t, int, int, NcclComm, Stream);
using NcclGroupStart = Status (*)();
using NcclGroupEnd = Status (*)();
using NcclGetErrorString = const char* (*)(Status);

} // namespace infrarsi::node::cuda_abi
