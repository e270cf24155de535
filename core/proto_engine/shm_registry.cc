#include "core/proto_engine/shm_registry.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "core/proto_engine/shm_fault_guard.h"

namespace rope {
namespace {

// Regions outlive the calls (and processes) that registered them, so the
// usual cause is an earlier run of the same client that never unregistered.
absl::Status RegionTakenError(const std::string& name) {
  return absl::AlreadyExistsError(absl::StrCat(
      "region \"", name, "\" is already registered by this client (the same token, "
      "certificate or host; perhaps an earlier run that did not unregister it): unregister it "
      "first (UnregisterSharedMemory; Python: client.unregister_shm(\"", name,
      "\")) or use another name"));
}

constexpr size_t kMaxNameLength = 128;

bool ValidRegionName(const std::string& name) {
  if (name.empty() || name.size() > kMaxNameLength) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

absl::Status OpenError(const std::string& key, int error) {
  const std::string what = absl::StrCat("key \"", key, "\" cannot be opened: ", strerror(error));
  if (error == ENOENT) return absl::NotFoundError(what);
  if (error == EACCES || error == EPERM) return absl::PermissionDeniedError(what);
  return absl::InvalidArgumentError(what);
}

// Opens `key` read-write: "/name" with shm_open, an absolute path (resolved,
// no symlink escaping) under `allowed_dir` with open.
absl::StatusOr<int> OpenKey(const std::string& key, const std::string& allowed_dir) {
  if (key.size() > 1 && key[0] == '/' && key.find('/', 1) == std::string::npos) {
    const int fd = shm_open(key.c_str(), O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) return OpenError(key, errno);
    return fd;
  }
  if (key.empty() || key[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("key is \"", key,
                     "\": expected \"/name\" (a POSIX shared-memory object) or an absolute "
                     "file path under the server's --shm_allowed_dir"));
  }
  if (allowed_dir.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "key \"", key, "\" is a file path, and the server allows none (--shm_allowed_dir unset)"));
  }
  char resolved_dir[PATH_MAX];
  char resolved_key[PATH_MAX];
  if (realpath(allowed_dir.c_str(), resolved_dir) == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("--shm_allowed_dir \"", allowed_dir, "\" cannot be resolved"));
  }
  // One answer for every refusal below: whether the path exists, where a
  // symlink leads, what kind of file it is must not be learnt through it.
  const absl::Status refused = absl::PermissionDeniedError(
      absl::StrCat("key \"", key, "\" is not a regular file under --shm_allowed_dir \"",
                   allowed_dir, "\" that the server may open"));
  if (realpath(key.c_str(), resolved_key) == nullptr) return refused;
  if (!absl::StartsWith(resolved_key, absl::StrCat(resolved_dir, "/"))) return refused;
  const int fd = open(resolved_key, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return refused;
  struct stat st = {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return refused;
  }
  return fd;
}

// FAILED_PRECONDITION when the object `st` describes is sparse: fewer bytes
// allocated than its size (ftruncate without writing, or a punched hole).
// The server's first touch of a hole would allocate the page, charged to the
// server's memory and counted by nothing. The whole object is judged, not
// the region's range: allocation by range is not observable on tmpfs
// (SEEK_HOLE reports pages reserved by posix_fallocate as holes).
absl::Status CheckAllocated(const struct stat& st, const std::string& name,
                            const std::string& key) {
  const int64_t allocated = static_cast<int64_t>(st.st_blocks) * 512;
  if (allocated >= static_cast<int64_t>(st.st_size)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "shared-memory region \"", name, "\": \"", key, "\" has ", allocated, " of its ",
      st.st_size, " bytes allocated (a sparse object): allocate it whole first "
      "(posix_fallocate, or write it)"));
}

}  // namespace

MappedRegion::~MappedRegion() {
  UnguardShmRange(guard_slot_);
  if (map_base_ != nullptr) munmap(map_base_, map_length_);
  if (fd_ >= 0) close(fd_);
}

absl::Status MappedRegion::Check() const {
  if (is_device()) return absl::OkStatus();  // the backend checked its size at opening
  if (Faulted()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shared-memory region \"", name_, "\": its backing object \"", key_,
        "\" shrank while a call used it; unregister the region and register it again"));
  }
  struct stat st = {};
  if (fstat(fd_, &st) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("shared-memory region \"", name_, "\": fstat failed: ", strerror(errno)));
  }
  if (static_cast<uint64_t>(st.st_size) < offset_ + byte_size_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shared-memory region \"", name_, "\": its backing object \"", key_, "\" is now ",
        st.st_size, " bytes, short of the registered offset ", offset_, " + byte_size ",
        byte_size_, "; unregister the region and register it again"));
  }
  return CheckAllocated(st, name_, key_);
}

bool MappedRegion::Faulted() const { return ShmRangeFaulted(guard_slot_); }

ShmRegistry::ShmRegistry(ShmLimits limits) : limits_(std::move(limits)) {}

ShmRegistry::~ShmRegistry() { Clear(); }

void ShmRegistry::TouchAndExpire(const std::string& owner,
                                 std::vector<std::shared_ptr<MappedRegion>>* released) const {
  const absl::Time now = absl::Now();
  if (per_owner_.count(owner) != 0) last_used_[owner] = now;
  if (limits_.owner_idle_lease == absl::InfiniteDuration()) return;
  for (auto used = last_used_.begin(); used != last_used_.end();) {
    if (used->first == owner || now - used->second <= limits_.owner_idle_lease) {
      ++used;
      continue;
    }
    const std::string idle = used->first;
    for (auto it = regions_.lower_bound({idle, ""});
         it != regions_.end() && it->first.first == idle;) {
      if (!it->second->is_device()) {
        mapped_bytes_ -= static_cast<int64_t>(it->second->byte_size());
      }
      released->push_back(std::move(it->second));
      it = regions_.erase(it);
    }
    per_owner_.erase(idle);
    used = last_used_.erase(used);
  }
}

absl::Status ShmRegistry::CheckRoom(const std::string& owner, const std::string& name,
                                    uint64_t offset, uint64_t byte_size,
                                    uint64_t host_bytes) const {
  if (limits_.max_mapped_bytes <= 0) {
    return absl::FailedPreconditionError(
        "shared memory is off on this server (--shm_max_mapped_bytes=0)");
  }
  if (!ValidRegionName(name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "name is \"", name, "\": expected 1-128 characters of [A-Za-z0-9._-]"));
  }
  if (byte_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte_size is 0 (region \"", name, "\"): must be > 0"));
  }
  if (offset > UINT64_MAX - byte_size) {
    return absl::InvalidArgumentError(absl::StrCat("offset ", offset, " + byte_size ", byte_size,
                                                   " overflows (region \"", name, "\")"));
  }
  if (host_bytes > static_cast<uint64_t>(limits_.max_mapped_bytes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("byte_size ", byte_size, " of region \"", name,
                     "\" is over the server's --shm_max_mapped_bytes ", limits_.max_mapped_bytes));
  }
  std::vector<std::shared_ptr<MappedRegion>> expired;  // unmapped after the lock
  absl::MutexLock lock(&mu_);
  TouchAndExpire(owner, &expired);
  if (regions_.count({owner, name}) != 0) {
    return RegionTakenError(name);
  }
  auto it = per_owner_.find(owner);
  if (it != per_owner_.end() && it->second >= limits_.max_regions_per_client) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this client holds ", it->second, " regions: at the server's "
        "--shm_max_regions_per_client ", limits_.max_regions_per_client,
        "; unregister one first"));
  }
  if (mapped_bytes_ + static_cast<int64_t>(host_bytes) > limits_.max_mapped_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "region \"", name, "\" of ", byte_size, " bytes would bring the mapped total to ",
        mapped_bytes_ + static_cast<int64_t>(host_bytes), ": over the server's "
        "--shm_max_mapped_bytes ", limits_.max_mapped_bytes));
  }
  return absl::OkStatus();
}

absl::Status ShmRegistry::Add(const std::string& owner, const std::string& name,
                              std::shared_ptr<MappedRegion> region, uint64_t host_bytes) {
  absl::MutexLock lock(&mu_);
  // Checked again: another registration may have won the race meanwhile.
  // (A refused region is released by the caller, outside the lock.)
  if (regions_.count({owner, name}) != 0) {
    return RegionTakenError(name);
  }
  if (per_owner_[owner] >= limits_.max_regions_per_client ||
      mapped_bytes_ + static_cast<int64_t>(host_bytes) > limits_.max_mapped_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "region \"", name, "\": a concurrent registration reached --shm_max_regions_per_client ",
        limits_.max_regions_per_client, " or --shm_max_mapped_bytes ", limits_.max_mapped_bytes));
  }
  if (!region->is_device()) {
    region->guard_slot_ = GuardShmRange(region->map_base_, region->map_length_);
    if (region->guard_slot_ < 0) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the server maps ", kShmGuardSlots, " regions already: its most; unregister some"));
    }
  }
  regions_[{owner, name}] = std::move(region);
  ++per_owner_[owner];
  last_used_[owner] = absl::Now();
  mapped_bytes_ += static_cast<int64_t>(host_bytes);
  return absl::OkStatus();
}

absl::Status ShmRegistry::Register(const std::string& owner, const std::string& name,
                                   const std::string& key, uint64_t offset, uint64_t byte_size) {
  if (const absl::Status room = CheckRoom(owner, name, offset, byte_size, byte_size); !room.ok()) {
    return room;
  }

  absl::StatusOr<int> fd = OpenKey(key, limits_.allowed_dir);
  if (!fd.ok()) return fd.status();
  std::shared_ptr<MappedRegion> region(new MappedRegion());
  region->fd_ = *fd;
  region->name_ = name;
  region->key_ = key;
  region->offset_ = offset;
  region->byte_size_ = byte_size;
  struct stat st = {};
  if (fstat(*fd, &st) != 0) return absl::InternalError(absl::StrCat("fstat of \"", key, "\" failed"));
  if (static_cast<uint64_t>(st.st_size) < offset + byte_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "offset ", offset, " + byte_size ", byte_size, " is past the end of \"", key, "\" (",
        st.st_size, " bytes)"));
  }
  if (absl::Status allocated = CheckAllocated(st, name, key); !allocated.ok()) return allocated;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t map_offset = offset - offset % page;
  region->map_length_ = static_cast<size_t>(offset + byte_size - map_offset);
  void* base = mmap(nullptr, region->map_length_, PROT_READ | PROT_WRITE, MAP_SHARED, *fd,
                    static_cast<off_t>(map_offset));
  if (base == MAP_FAILED) {
    return absl::InvalidArgumentError(
        absl::StrCat("key \"", key, "\" cannot be mapped: ", strerror(errno)));
  }
  region->map_base_ = base;
  region->data_ = static_cast<char*>(base) + (offset - map_offset);
  return Add(owner, name, std::move(region), byte_size);
}

absl::Status ShmRegistry::RegisterDevice(const std::string& owner, const std::string& name,
                                         uint64_t byte_size, const DeviceMemoryOpener& open) {
  if (const absl::Status room = CheckRoom(owner, name, 0, byte_size, 0); !room.ok()) return room;
  absl::StatusOr<std::shared_ptr<DeviceMemoryLease>> memory = open();
  if (!memory.ok()) return memory.status();
  std::shared_ptr<MappedRegion> region(new MappedRegion());
  region->name_ = name;
  region->byte_size_ = byte_size;
  region->data_ = static_cast<char*>((*memory)->data());
  region->device_memory_ = *std::move(memory);
  return Add(owner, name, std::move(region), 0);
}

absl::Status ShmRegistry::Unregister(const std::string& owner, const std::string& name) {
  std::vector<std::shared_ptr<MappedRegion>> released;  // unmapped outside the lock
  absl::MutexLock lock(&mu_);
  TouchAndExpire(owner, &released);
  auto first = name.empty() ? regions_.lower_bound({owner, ""}) : regions_.find({owner, name});
  if (!name.empty() && first == regions_.end()) {
    return absl::NotFoundError(
        absl::StrCat("name: region \"", name, "\" is not registered by this client"));
  }
  auto last = name.empty() ? first : std::next(first);
  while (name.empty() && last != regions_.end() && last->first.first == owner) ++last;
  for (auto it = first; it != last;) {
    if (!it->second->is_device()) mapped_bytes_ -= static_cast<int64_t>(it->second->byte_size());
    if (--per_owner_[owner] == 0) {
      per_owner_.erase(owner);
      last_used_.erase(owner);
    }
    released.push_back(std::move(it->second));
    it = regions_.erase(it);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ShmRegionInfo>> ShmRegistry::Status(const std::string& owner,
                                                               const std::string& name) const {
  std::vector<ShmRegionInfo> out;
  std::vector<std::shared_ptr<MappedRegion>> expired;  // unmapped after the lock
  absl::MutexLock lock(&mu_);
  TouchAndExpire(owner, &expired);
  for (auto it = regions_.lower_bound({owner, name}); it != regions_.end() && it->first.first == owner;
       ++it) {
    if (!name.empty() && it->first.second != name) break;
    const MappedRegion& region = *it->second;
    out.push_back({region.name(), region.key(), region.offset(), region.byte_size(),
                   region.is_device(), region.cuda_device()});
  }
  if (!name.empty() && out.empty()) {
    return absl::NotFoundError(
        absl::StrCat("name: region \"", name, "\" is not registered by this client"));
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const MappedRegion>> ShmRegistry::Find(
    const std::string& owner, const std::string& name, const std::string& field) const {
  std::vector<std::shared_ptr<MappedRegion>> expired;  // unmapped after the lock
  absl::MutexLock lock(&mu_);
  TouchAndExpire(owner, &expired);
  auto it = regions_.find({owner, name});
  if (it == regions_.end()) {
    return absl::NotFoundError(absl::StrCat(field, ".region \"", name,
                                            "\" is not registered by this client"));
  }
  return std::shared_ptr<const MappedRegion>(it->second);
}

void ShmRegistry::Clear() {
  std::map<Key, std::shared_ptr<MappedRegion>> released;
  absl::MutexLock lock(&mu_);
  released.swap(regions_);
  per_owner_.clear();
  last_used_.clear();
  mapped_bytes_ = 0;
}

int64_t ShmRegistry::regions() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(regions_.size());
}

int64_t ShmRegistry::mapped_bytes() const {
  absl::MutexLock lock(&mu_);
  return mapped_bytes_;
}

}  // namespace rope
