// Compiled only with -DINFRARSI_WITH_CUDA=ON (the toolkit's headers present): every signature and constant
// src/node/cuda_abi.hpp declares for the run-time-loaded probes is checked against the toolkit's own. A
// mismatch fails the build, not a node's probe.
#include "node/cuda_abi.hpp"

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <type_traits>

namespace abi = infrarsi::node::cuda_abi;

static_assert(sizeof(cudaError_t) == sizeof(abi::Status) && sizeof(cublasStatus_t) == sizeof(abi::Status));
static_assert(sizeof(cudaDeviceAttr) == sizeof(int) && sizeof(cudaMemcpyKind) == sizeof(int));
static_assert(sizeof(cudaDataType) == sizeof(int) && sizeof(cublasComputeType_t) == sizeof(int));
static_assert(cudaMemcpyHostToDevice == abi::kMemcpyHostToDevice);
static_assert(cudaMemcpyDeviceToDevice == abi::kMemcpyDeviceToDevice);
static_assert(cudaDevAttrMultiProcessorCount == abi::kAttrMultiProcessorCount);
static_assert(cudaDevAttrMemoryClockRate == abi::kAttrMemoryClockRateKhz);
static_assert(cudaDevAttrGlobalMemoryBusWidth == abi::kAttrGlobalMemoryBusWidth);
static_assert(cudaDevAttrComputeCapabilityMajor == abi::kAttrComputeCapabilityMajor);
static_assert(cudaDevAttrComputeCapabilityMinor == abi::kAttrComputeCapabilityMinor);
static_assert(CUDA_R_16BF == abi::kDataBf16);
static_assert(CUBLAS_OP_N == abi::kBlasOpN);
static_assert(CUBLAS_COMPUTE_32F == abi::kBlasCompute32F);
static_assert(CUBLAS_GEMM_DEFAULT == abi::kBlasGemmDefault);

// The signatures, restated with the toolkit's types: the same shape as cuda_abi.hpp's, enums as int.
static_assert(std::is_same_v<decltype(&cudaGetDeviceCount), cudaError_t (*)(int*)>);
static_assert(std::is_same_v<decltype(&cudaSetDevice), cudaError_t (*)(int)>);
static_assert(std::is_same_v<decltype(&cudaDeviceGetPCIBusId), cudaError_t (*)(char*, int, int)>);
static_assert(std::is_same_v<decltype(&cudaDeviceGetAttribute), cudaError_t (*)(int*, cudaDeviceAttr, int)>);
static_assert(std::is_same_v<decltype(static_cast<cudaError_t (*)(void**, size_t)>(&cudaMalloc)),
                             cudaError_t (*)(void**, size_t)>);
static_assert(std::is_same_v<decltype(&cudaFree), cudaError_t (*)(void*)>);
static_assert(std::is_same_v<decltype(&cudaMemcpy), cudaError_t (*)(void*, const void*, size_t, cudaMemcpyKind)>);
static_assert(std::is_same_v<decltype(&cudaMemGetInfo), cudaError_t (*)(size_t*, size_t*)>);
static_assert(std::is_same_v<decltype(static_cast<cudaError_t (*)(cudaEvent_t*)>(&cudaEventCreate)),
                             cudaError_t (*)(cudaEvent_t*)>);
static_assert(std::is_same_v<decltype(&cudaEventRecord), cudaError_t (*)(cudaEvent_t, cudaStream_t)>);
static_assert(std::is_same_v<decltype(&cudaEventSynchronize), cudaError_t (*)(cudaEvent_t)>);
static_assert(std::is_same_v<decltype(&cudaEventElapsedTime), cudaError_t (*)(float*, cudaEvent_t, cudaEvent_t)>);
static_assert(std::is_same_v<decltype(&cudaEventDestroy), cudaError_t (*)(cudaEvent_t)>);
static_assert(std::is_same_v<decltype(&cudaDeviceSynchronize), cudaError_t (*)()>);
static_assert(std::is_same_v<decltype(&cudaGetErrorString), const char* (*)(cudaError_t)>);
static_assert(std::is_same_v<decltype(&cudaDriverGetVersion), cudaError_t (*)(int*)>);
static_assert(std::is_same_v<decltype(&cudaRuntimeGetVersion), cudaError_t (*)(int*)>);
static_assert(std::is_same_v<cudaEvent_t, abi::Event> && std::is_same_v<cudaStream_t, abi::Stream>);
static_assert(std::is_same_v<cublasHandle_t, abi::BlasHandle>);
static_assert(std::is_same_v<decltype(&cublasCreate_v2), cublasStatus_t (*)(cublasHandle_t*)>);
static_assert(std::is_same_v<decltype(&cublasDestroy_v2), cublasStatus_t (*)(cublasHandle_t)>);
// Overloaded in C++ (a wrapper taking the old cudaDataType compute type): the cast picks the exported one,
// and compiles only if it has exactly this signature.
using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                  const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                  cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
[[maybe_unused]] static const GemmEx kGemmEx = static_cast<GemmEx>(&cublasGemmEx);

// The runtime's stream and memset calls of the NCCL probe.
static_assert(std::is_same_v<decltype(&cudaMemset), cudaError_t (*)(void*, int, size_t)>);
static_assert(std::is_same_v<decltype(static_cast<cudaError_t (*)(cudaStream_t*)>(&cudaStreamCreate)),
                             cudaError_t (*)(cudaStream_t*)>);
static_assert(std::is_same_v<decltype(&cudaStreamSynchronize), cudaError_t (*)(cudaStream_t)>);
static_assert(std::is_same_v<decltype(&cudaStreamDestroy), cudaError_t (*)(cudaStream_t)>);

// NCCL: the unique id passed by value, the enums as int, the communicator handle.
static_assert(sizeof(ncclUniqueId) == sizeof(abi::NcclUniqueId) &&
              NCCL_UNIQUE_ID_BYTES == abi::kNcclUniqueIdBytes);
static_assert(sizeof(ncclResult_t) == sizeof(abi::Status) && sizeof(ncclDataType_t) == sizeof(int) &&
              sizeof(ncclRedOp_t) == sizeof(int));
static_assert(ncclFloat32 == abi::kNcclFloat32 && ncclSum == abi::kNcclSum);
static_assert(std::is_same_v<ncclComm_t, abi::NcclComm>);
static_assert(std::is_same_v<decltype(&ncclGetVersion), ncclResult_t (*)(int*)>);
static_assert(std::is_same_v<decltype(&ncclGetUniqueId), ncclResult_t (*)(ncclUniqueId*)>);
static_assert(
    std::is_same_v<decltype(&ncclCommInitRank), ncclResult_t (*)(ncclComm_t*, int, ncclUniqueId, int)>);
static_assert(std::is_same_v<decltype(&ncclCommInitAll), ncclResult_t (*)(ncclComm_t*, int, const int*)>);
static_assert(std::is_same_v<decltype(&ncclCommDestroy), ncclResult_t (*)(ncclComm_t)>);
static_assert(
    std::is_same_v<decltype(&ncclAllReduce), ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t,
                                                              ncclRedOp_t, ncclComm_t, cudaStream_t)>);
static_assert(std::is_same_v<decltype(&ncclGroupStart), ncclResult_t (*)()>);
static_assert(std::is_same_v<decltype(&ncclGroupEnd), ncclResult_t (*)()>);
static_assert(std::is_same_v<decltype(&ncclGetErrorString), const char* (*)(ncclResult_t)>);
