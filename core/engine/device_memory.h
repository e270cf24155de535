// DeviceMemory: what a backend whose device can hold tensors (the CUDA
// backend) offers beyond Backend. A backend without device memory (the
// CPU's) has none (Backend::device_memory() is null), and the engine then
// refuses every device view and every device region in one place
// (Engine::DeviceMemoryFor).
//
// Thread-safe.
#ifndef ROPE_ENGINE_DEVICE_MEMORY_H_
#define ROPE_ENGINE_DEVICE_MEMORY_H_

#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"

namespace rope {

// Device memory of another process, opened from a CUDA IPC handle
// (DeviceMemory::OpenIpcHandle), mapped while this object lives; the
// destructor closes the mapping. data() is a device pointer: the host must
// not dereference it.
class DeviceMemoryLease {
 public:
  virtual ~DeviceMemoryLease() = default;
  virtual void* data() const = 0;
  // Bytes of the allocation the handle names (>= the bytes asked for).
  virtual uint64_t allocation_bytes() const = 0;
  virtual int device() const = 0;
};

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;

  // The ordinal of the device whose memory the backend reads and writes:
  // views of MemoryKind::kDevice on another device are refused.
  virtual int device() const = 0;

  // Opens the device allocation that a client process exported with
  // cudaIpcGetMemHandle (`handle`: the cudaIpcMemHandle_t's bytes) on device
  // `device`, and checks that it has at least `byte_size` bytes.
  // INVALID_ARGUMENT naming cuda_ipc_handle / cuda_device / byte_size when
  // the handle cannot be opened, the device is not this backend's or the
  // allocation is smaller.
  virtual absl::StatusOr<std::shared_ptr<DeviceMemoryLease>> OpenIpcHandle(
      std::string_view handle, int device, uint64_t byte_size) = 0;
};

}  // namespace rope

#endif  // ROPE_ENGINE_DEVICE_MEMORY_H_
