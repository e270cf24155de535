#include "core/backends/cuda/cuda_ipc.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/backends/cuda/cuda_status.h"

namespace rope {
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == 64,
              "rope.proto documents RegisterSharedMemoryRequest.cuda_ipc_handle as 64 bytes");

class IpcMemory final : public DeviceMemoryLease {
 public:
  IpcMemory(void* data, int device) : data_(data), device_(device) {}
  ~IpcMemory() override {
    // Every call using the region has finished (its lease on the region
    // holds this object, and device calls synchronise before returning).
    if (cudaSetDevice(device_) == cudaSuccess) (void)cudaIpcCloseMemHandle(data_);
    (void)cudaGetLastError();
  }
  void* data() const override { return data_; }
  uint64_t allocation_bytes() const override { return allocation_bytes_; }
  int device() const override { return device_; }
  void set_allocation_bytes(uint64_t bytes) { allocation_bytes_ = bytes; }

 private:
  void* const data_;
  uint64_t allocation_bytes_ = 0;
  const int device_;
};

// The driver's cuMemGetAddressRange, through the runtime, so that the
// plugin need not link libcuda (it stays loadable where there is no
// driver). Null when the driver does not offer it.
using MemGetAddressRange = CUresult (*)(CUdeviceptr* base, size_t* size, CUdeviceptr pointer);

MemGetAddressRange AddressRangeFunction() {
  static const MemGetAddressRange function = [] {
    void* found = nullptr;
    cudaDriverEntryPointQueryResult result = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &found, 12000, cudaEnableDefault,
                                         &result) != cudaSuccess ||
        result != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return MemGetAddressRange{nullptr};
    }
    return reinterpret_cast<MemGetAddressRange>(found);
  }();
  return function;
}

// The runtime's error for a handle it cannot open: the handle's fault
// (INVALID_ARGUMENT) unless the context itself is lost (a sticky error:
// the usual mapping, which says the process must restart).
absl::Status OpenError(cudaError_t error, int device) {
  if (IsStickyCudaError(error)) return CudaStatus(error, "opening a cuda_ipc_handle");
  (void)cudaGetLastError();
  return absl::InvalidArgumentError(absl::StrCat(
      "cuda_ipc_handle could not be opened on CUDA device ", device, ": ", cudaGetErrorName(error),
      ": ", cudaGetErrorString(error),
      " (is it a cudaIpcGetMemHandle of a live cudaMalloc allocation of another process on this "
      "host?)"));
}

}  // namespace

absl::StatusOr<std::shared_ptr<DeviceMemoryLease>> OpenCudaIpcHandle(int backend_device,
                                                                     std::string_view handle,
                                                                     int device,
                                                                     uint64_t byte_size) {
  if (handle.size() != sizeof(cudaIpcMemHandle_t)) {
    return absl::InvalidArgumentError(absl::StrCat("cuda_ipc_handle is ", handle.size(),
                                                   " bytes: a cudaIpcMemHandle_t is ",
                                                   sizeof(cudaIpcMemHandle_t)));
  }
  if (device != backend_device) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda_device is ", device, ": this server computes on CUDA device ", backend_device));
  }
  ROPE_CUDA_RETURN_IF_ERROR(cudaSetDevice(backend_device),
                            absl::StrCat("selecting CUDA device ", backend_device));
  const MemGetAddressRange address_range = AddressRangeFunction();
  if (address_range == nullptr) {
    return absl::FailedPreconditionError(
        "cuda_ipc_handle: the CUDA driver does not offer cuMemGetAddressRange, so the size of "
        "the exported allocation cannot be checked; CUDA shared memory is not available");
  }
  cudaIpcMemHandle_t ipc;
  std::memcpy(&ipc, handle.data(), sizeof(ipc));
  void* data = nullptr;
  const cudaError_t opened = cudaIpcOpenMemHandle(&data, ipc, cudaIpcMemLazyEnablePeerAccess);
  if (opened != cudaSuccess) return OpenError(opened, backend_device);
  // From here on the lease closes the mapping on every return.
  auto lease = std::make_shared<IpcMemory>(data, backend_device);

  cudaPointerAttributes attributes;
  ROPE_CUDA_RETURN_IF_ERROR(cudaPointerGetAttributes(&attributes, data),
                            "asking where an opened cuda_ipc_handle's memory lives");
  if (attributes.type != cudaMemoryTypeDevice || attributes.device != backend_device) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda_device is ", device, " but cuda_ipc_handle names memory on CUDA device ",
        attributes.device, " (memory type ", static_cast<int>(attributes.type),
        "): this server computes on CUDA device ", backend_device));
  }
  CUdeviceptr base = 0;
  size_t size = 0;
  const CUresult ranged = address_range(&base, &size, reinterpret_cast<CUdeviceptr>(data));
  if (ranged != CUDA_SUCCESS) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda_ipc_handle: the driver does not know the opened allocation's size "
                     "(cuMemGetAddressRange: CUresult ",
                     static_cast<int>(ranged), ")"));
  }
  // The mapping starts at the allocation's base; count from the pointer
  // anyway, in case a driver maps it otherwise.
  const uint64_t end = static_cast<uint64_t>(base) + size;
  const uint64_t start = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(data));
  const uint64_t available = end > start ? end - start : 0;
  if (byte_size > available) {
    return absl::InvalidArgumentError(absl::StrCat("byte_size is ", byte_size,
                                                   ": the allocation cuda_ipc_handle names holds ",
                                                   available, " bytes"));
  }
  lease->set_allocation_bytes(available);
  return std::shared_ptr<DeviceMemoryLease>(std::move(lease));
}

}  // namespace rope
