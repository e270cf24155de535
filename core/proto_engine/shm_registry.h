// Shared-memory regions registered by clients (RegisterSharedMemory), and
// their mappings.
//
// A region is a range [offset, offset + byte_size) of a POSIX shared-memory
// object ("/name", shm_open) or of a regular file under an allowed
// directory, mapped read-write once at registration. Regions belong to an
// owner (the caller identity the service derives: bearer token, else mTLS
// subject, else peer address without its port, so a reconnecting client
// keeps its regions) and are visible only to it: another owner asking for
// the same name gets NOT_FOUND, as if it did not exist. The regions of an
// owner that has made no shared-memory call (register, status, a reference
// in a request) for ShmLimits::owner_idle_lease are released.
//
// The object must be allocated when it is registered, and stay so: a sparse
// object (fewer bytes allocated than its size: ftruncate without writing, or
// a punched hole) is refused, at registration and before every use, because the server's first touch of a hole would
// allocate the page, charged to the server's memory, counted by nothing.
// Clients allocate with posix_fallocate (the client libraries do).
//
// A call using a region holds a lease (shared_ptr): unregistering a region
// while a call uses it lets the call finish on the mapping, which is unmapped
// when the last lease goes. A backing object shrunk after registration is
// caught by Check() (fstat before use) and, when it shrinks during a call,
// by the SIGBUS guard (shm_fault_guard.h), after which the region answers
// FAILED_PRECONDITION for good.
//
// A region may also be device memory: a CUDA allocation of the client's,
// opened by the backend from a CUDA IPC handle (RegisterDevice). Its data()
// is then a device pointer that only the backend may touch; it counts
// toward the owner's regions, not toward the mapped bytes (no host memory),
// and closes when its last lease goes.
//
// Thread-safe. No gRPC, no protobuf.
#ifndef ROPE_PROTO_ENGINE_SHM_REGISTRY_H_
#define ROPE_PROTO_ENGINE_SHM_REGISTRY_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/engine/device_memory.h"
#include "core/engine/tensor.h"

namespace rope {

struct ShmLimits {
  // Regions one owner may hold at once (--shm_max_regions_per_client).
  int64_t max_regions_per_client = 16;
  // Bytes of host regions mapped by every owner together
  // (--shm_max_mapped_bytes); 0: shared memory (host and CUDA) is off
  // (RegisterSharedMemory answers FAILED_PRECONDITION).
  int64_t max_mapped_bytes = int64_t{16} << 30;
  // Directory under which file keys (absolute paths) may lie
  // (--shm_allowed_dir); empty: only POSIX shared-memory names.
  std::string allowed_dir;
  // An owner's regions are released once it has made no shared-memory call
  // for this long (--shm_owner_idle_lease); InfiniteDuration(): never.
  absl::Duration owner_idle_lease = absl::InfiniteDuration();
};

class MappedRegion {
 public:
  ~MappedRegion();
  MappedRegion(const MappedRegion&) = delete;
  MappedRegion& operator=(const MappedRegion&) = delete;

  const std::string& name() const { return name_; }
  const std::string& key() const { return key_; }
  uint64_t offset() const { return offset_; }
  uint64_t byte_size() const { return byte_size_; }
  // The region's first byte (the object's byte `offset`); for a device
  // region, a device pointer.
  char* data() const { return data_; }
  // Whether the region is CUDA device memory (RegisterDevice), and its device.
  bool is_device() const { return device_memory_ != nullptr; }
  int cuda_device() const { return is_device() ? device_memory_->device() : 0; }
  // Where data() points: host memory, or the device's.
  TensorMemory memory() const {
    return is_device() ? TensorMemory::Device(cuda_device()) : TensorMemory::Host();
  }

  // OK while the backing object still covers the region with allocated
  // pages (no hole) and no access has faulted (always OK for a device
  // region); FAILED_PRECONDITION naming the region otherwise.
  absl::Status Check() const;
  // Whether an access faulted (the object shrank under a call).
  bool Faulted() const;

 private:
  friend class ShmRegistry;
  MappedRegion() = default;

  std::string name_;
  std::string key_;
  uint64_t offset_ = 0;
  uint64_t byte_size_ = 0;
  int fd_ = -1;
  void* map_base_ = nullptr;
  size_t map_length_ = 0;
  char* data_ = nullptr;
  int guard_slot_ = -1;
  std::shared_ptr<DeviceMemoryLease> device_memory_;
};

struct ShmRegionInfo {
  std::string name;
  std::string key;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
  bool cuda_ipc = false;
  int cuda_device = 0;
};

// Opens a device region's memory (DeviceMemory::OpenIpcHandle).
using DeviceMemoryOpener = std::function<absl::StatusOr<std::shared_ptr<DeviceMemoryLease>>()>;

class ShmRegistry {
 public:
  explicit ShmRegistry(ShmLimits limits);
  ~ShmRegistry();

  const ShmLimits& limits() const { return limits_; }

  // Opens and maps the region. INVALID_ARGUMENT for a bad name, key, zero
  // size or a range past the object's end (naming the object's size);
  // NOT_FOUND for a POSIX name that does not exist; PERMISSION_DENIED for a
  // POSIX name the server may not open, and for every file path that is not
  // a regular file under allowed_dir the server may open, with one message
  // whatever the reason (a missing file, a symlink leading out, a
  // directory), so that the answer tells nothing about the file system;
  // ALREADY_EXISTS when `owner` already has `name`; RESOURCE_EXHAUSTED
  // naming the flag when a limit would be passed; FAILED_PRECONDITION when
  // shared memory is off or the range is not allocated (sparse).
  absl::Status Register(const std::string& owner, const std::string& name, const std::string& key,
                        uint64_t offset, uint64_t byte_size);
  // Registers device memory as `owner`'s region `name` of `byte_size` bytes:
  // the same checks of the name, size and limits as Register, then `open`
  // (whose error is returned as is) and the checks again.
  absl::Status RegisterDevice(const std::string& owner, const std::string& name,
                              uint64_t byte_size, const DeviceMemoryOpener& open);
  // Forgets `owner`'s region `name` (empty: all of them). NOT_FOUND for an
  // unknown name. Calls still using a region keep it until they finish.
  absl::Status Unregister(const std::string& owner, const std::string& name);
  // `owner`'s regions (empty name: all), sorted by name; NOT_FOUND for an
  // unknown name.
  absl::StatusOr<std::vector<ShmRegionInfo>> Status(const std::string& owner,
                                                    const std::string& name) const;
  // A lease on `owner`'s region `name`, NOT_FOUND (naming `field`) when the
  // owner has none by that name.
  absl::StatusOr<std::shared_ptr<const MappedRegion>> Find(const std::string& owner,
                                                           const std::string& name,
                                                           const std::string& field) const;
  // Forgets every region (the server drains).
  void Clear();

  int64_t regions() const;
  int64_t mapped_bytes() const;

 private:
  using Key = std::pair<std::string, std::string>;  // (owner, name)
  // The checks before opening (host_bytes: the bytes the region would add
  // to the mapped total), and the same checks again with the region opened,
  // adding it.
  absl::Status CheckRoom(const std::string& owner, const std::string& name, uint64_t offset,
                         uint64_t byte_size, uint64_t host_bytes) const;
  absl::Status Add(const std::string& owner, const std::string& name,
                   std::shared_ptr<MappedRegion> region, uint64_t host_bytes);
  // Notes `owner`'s use now, and releases (into `released`, to be unmapped
  // outside the lock) the regions of owners idle past the lease.
  void TouchAndExpire(const std::string& owner,
                      std::vector<std::shared_ptr<MappedRegion>>* released) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const ShmLimits limits_;
  mutable absl::Mutex mu_;
  // Mutable: a lookup (Find, Status) is a use that renews the owner's lease
  // and may expire other owners' regions.
  mutable std::map<Key, std::shared_ptr<MappedRegion>> regions_ ABSL_GUARDED_BY(mu_);
  mutable std::map<std::string, int64_t> per_owner_ ABSL_GUARDED_BY(mu_);
  mutable std::map<std::string, absl::Time> last_used_ ABSL_GUARDED_BY(mu_);
  mutable int64_t mapped_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace rope

#endif  // ROPE_PROTO_ENGINE_SHM_REGISTRY_H_
