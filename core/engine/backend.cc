#include "core/engine/backend.h"

#include "absl/strings/str_cat.h"

namespace rope {

absl::StatusOr<std::shared_ptr<DeviceMemoryLease>> Backend::OpenCudaIpcMemory(
    std::string_view /*handle*/, int /*device*/, uint64_t /*byte_size*/) {
  return absl::FailedPreconditionError(
      absl::StrCat("cuda_ipc_handle: this server's backend is ", info().name,
                   ", which has no device memory; CUDA shared memory needs ropeserve "
                   "--backend=cuda"));
}

absl::Status Backend::CopyOnDevice(void* /*destination*/, const void* /*source*/,
                                   uint64_t /*bytes*/) {
  return absl::FailedPreconditionError(
      absl::StrCat("the ", info().name, " backend has no device memory to copy"));
}

}  // namespace rope
