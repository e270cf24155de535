// SharedRegion: a POSIX shared-memory object this process creates and maps,
// to hand ropeserve tensors by reference instead of by bytes (same host
// only; see RegisterSharedMemory in rope.proto).
//
//   ROPE_ASSIGN_OR_RETURN(auto region, SharedRegion::Create("q", 1 << 26));
//   ROPE_RETURN_IF_ERROR(client->RegisterSharedMemory(*region));
//   absl::Span<float> q = region->View<float>(0, n);      // fill q ...
//   *request.mutable_q()->mutable_shm() = region->Ref(0, n * sizeof(float));
//
// The object is unlinked when the SharedRegion goes (the server's own
// mapping stays valid until it is unregistered). Not thread-safe to create
// or destroy concurrently with use; the bytes are the caller's to
// synchronize with calls in flight.
//
// CudaRegionRequest builds the registration of device memory instead (a
// CUDA IPC handle; the server needs --backend=cuda). There is no class for
// it: the allocation is the caller's, and references to it are plain
// v1::SharedMemoryRef{region, offset, byte_size}.
#ifndef ROPE_CLIENT_SHARED_REGION_H_
#define ROPE_CLIENT_SHARED_REGION_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "rope/v1/rope.pb.h"

namespace rope {
namespace client {

class SharedRegion {
 public:
  // Creates "/rope-<pid>-<counter>-<name>" of `byte_size` bytes (zeroed) and
  // maps it read-write. INVALID_ARGUMENT for an empty name or size 0;
  // INTERNAL with errno's text when the system refuses.
  static absl::StatusOr<std::unique_ptr<SharedRegion>> Create(const std::string& name,
                                                              size_t byte_size);
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  // The region's name in references (RegisterSharedMemoryRequest.name).
  const std::string& name() const { return name_; }
  // The POSIX object's name (RegisterSharedMemoryRequest.key).
  const std::string& key() const { return key_; }
  size_t byte_size() const { return byte_size_; }
  char* data() const { return data_; }
  // The object's descriptor (e.g. to ftruncate it in tests).
  int fd() const { return fd_; }

  // `count` elements of T from byte `offset` (which must suit T's alignment
  // and lie within the region; checked, aborting otherwise as span would).
  template <typename T>
  absl::Span<T> View(size_t offset, size_t count) const {
    CheckRange(offset, count * sizeof(T), alignof(T));
    return absl::Span<T>(reinterpret_cast<T*>(data_ + offset), count);
  }
  // A reference to bytes [offset, offset + byte_size) of this region.
  v1::SharedMemoryRef Ref(uint64_t offset, uint64_t byte_size) const;
  // The registration request for the whole region.
  v1::RegisterSharedMemoryRequest RegisterRequest() const;

 private:
  SharedRegion() = default;
  void CheckRange(size_t offset, size_t bytes, size_t alignment) const;

  std::string name_;
  std::string key_;
  size_t byte_size_ = 0;
  int fd_ = -1;
  char* data_ = nullptr;
};

// sizeof(cudaIpcMemHandle_t): the length RegisterSharedMemoryRequest's
// cuda_ipc_handle must have.
inline constexpr size_t kCudaIpcHandleSize = 64;

// The registration of a CUDA device allocation of this process as region
// `name`: `ipc_handle` is the cudaIpcMemHandle_t that cudaIpcGetMemHandle
// exported for it, as bytes
//   std::string_view(reinterpret_cast<const char*>(&handle), sizeof(handle))
// `cuda_device` the server's ordinal of the device it lives on, and the
// region its first `byte_size` bytes. Key and offset stay empty / 0. Pass it
// to RopeClient::RegisterSharedMemory on the channel that will use the
// region (regions belong to the registering client identity). Keep the
// allocation alive until the region is unregistered, and synchronize the
// stream that writes it before each call. INVALID_ARGUMENT, before any
// call, for an empty name, a handle that is not kCudaIpcHandleSize bytes, a
// negative device or byte_size 0.
absl::StatusOr<v1::RegisterSharedMemoryRequest> CudaRegionRequest(std::string name,
                                                                  std::string_view ipc_handle,
                                                                  int cuda_device,
                                                                  uint64_t byte_size);

}  // namespace client
}  // namespace rope

#endif  // ROPE_CLIENT_SHARED_REGION_H_
