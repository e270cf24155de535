// CUDA shared memory: device allocations of client processes, opened from
// the cudaIpcMemHandle_t that the client's cudaIpcGetMemHandle exported
// (RegisterSharedMemoryRequest.cuda_ipc_handle; docs/design.md, "Shared
// memory: tensors by reference").
//
// Opening checks what the wire cannot be trusted with: the handle's size,
// that the memory lives on this backend's device (kernels there must not
// reach across to another device's memory), and that the allocation holds
// the bytes the client claims, so that no reference within the region can
// make a kernel touch memory past it (an illegal address is a sticky error:
// it would end the server for every client).
#ifndef ROPE_BACKENDS_CUDA_CUDA_IPC_H_
#define ROPE_BACKENDS_CUDA_CUDA_IPC_H_

#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/engine/device_memory.h"

namespace rope {

// Opens `handle` on `backend_device` (made the calling thread's current
// device). INVALID_ARGUMENT naming cuda_ipc_handle (not 64 bytes, or the
// runtime cannot open it), cuda_device (not `backend_device`, or the memory
// is on another device) or byte_size (more than the allocation holds);
// FAILED_PRECONDITION when the driver cannot say how large the allocation
// is. The lease closes the mapping (cudaIpcCloseMemHandle) when destroyed.
absl::StatusOr<std::shared_ptr<DeviceMemoryLease>> OpenCudaIpcHandle(int backend_device,
                                                                     std::string_view handle,
                                                                     int device,
                                                                     uint64_t byte_size);

}  // namespace rope

#endif  // ROPE_BACKENDS_CUDA_CUDA_IPC_H_
