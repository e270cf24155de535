#include "client/shared_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace rope {
namespace client {

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegion::Create(const std::string& name,
                                                                   size_t byte_size) {
  if (name.empty() || byte_size == 0) {
    return absl::InvalidArgumentError(absl::StrCat("SharedRegion \"", name, "\" of ", byte_size,
                                                   " bytes: needs a name and a size > 0"));
  }
  static std::atomic<uint64_t> counter{0};
  std::unique_ptr<SharedRegion> region(new SharedRegion());
  region->name_ = name;
  region->byte_size_ = byte_size;
  region->key_ = absl::StrCat("/rope-", getpid(), "-", counter.fetch_add(1), "-", name);
  region->fd_ = shm_open(region->key_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (region->fd_ < 0) {
    return absl::InternalError(
        absl::StrCat("shm_open(", region->key_, ") failed: ", strerror(errno)));
  }
  // Allocated, not only sized: ropeserve refuses a sparse object (its first
  // touch of a hole would allocate the page in the server's memory).
  if (const int error = posix_fallocate(region->fd_, 0, static_cast<off_t>(byte_size));
      error != 0) {
    return absl::ResourceExhaustedError(absl::StrCat("posix_fallocate(", region->key_, ", ",
                                                     byte_size, ") failed: ", strerror(error)));
  }
  void* data = mmap(nullptr, byte_size, PROT_READ | PROT_WRITE, MAP_SHARED, region->fd_, 0);
  if (data == MAP_FAILED) {
    return absl::InternalError(absl::StrCat("mmap(", region->key_, ") failed: ", strerror(errno)));
  }
  region->data_ = static_cast<char*>(data);
  return region;
}

SharedRegion::~SharedRegion() {
  if (data_ != nullptr) munmap(data_, byte_size_);
  if (fd_ >= 0) {
    close(fd_);
    shm_unlink(key_.c_str());
  }
}

void SharedRegion::CheckRange(size_t offset, size_t bytes, size_t alignment) const {
  if (offset > byte_size_ || bytes > byte_size_ - offset || offset % alignment != 0) {
    std::fprintf(stderr, "SharedRegion %s: view [%zu, +%zu) align %zu is outside or misaligned\n",
                 name_.c_str(), offset, bytes, alignment);
    std::abort();
  }
}

v1::SharedMemoryRef SharedRegion::Ref(uint64_t offset, uint64_t byte_size) const {
  v1::SharedMemoryRef ref;
  ref.set_region(name_);
  ref.set_offset(offset);
  ref.set_byte_size(byte_size);
  return ref;
}

v1::RegisterSharedMemoryRequest SharedRegion::RegisterRequest() const {
  v1::RegisterSharedMemoryRequest request;
  request.set_name(name_);
  request.set_key(key_);
  request.set_offset(0);
  request.set_byte_size(byte_size_);
  return request;
}

absl::StatusOr<v1::RegisterSharedMemoryRequest> CudaRegionRequest(std::string name,
                                                                  std::string_view ipc_handle,
                                                                  int cuda_device,
                                                                  uint64_t byte_size) {
  if (name.empty()) {
    return absl::InvalidArgumentError("CUDA region: needs a name");
  }
  if (ipc_handle.size() != kCudaIpcHandleSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA region \"", name, "\": cuda_ipc_handle is ", ipc_handle.size(),
                     " bytes; a cudaIpcMemHandle_t is ", kCudaIpcHandleSize));
  }
  if (cuda_device < 0) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA region \"", name, "\": cuda_device is ",
                                                   cuda_device, "; expected >= 0"));
  }
  if (byte_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA region \"", name, "\": byte_size is 0; expected > 0"));
  }
  v1::RegisterSharedMemoryRequest request;
  request.set_name(std::move(name));
  request.set_cuda_ipc_handle(ipc_handle.data(), ipc_handle.size());
  request.set_cuda_device(cuda_device);
  request.set_byte_size(byte_size);
  return request;
}

}  // namespace client
}  // namespace rope
