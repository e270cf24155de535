#include "tests/cuda/fake_runtime/fake_device.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <unordered_map>
#include <utility>
#include <vector>

namespace rope {
namespace fake_cuda {
namespace {

struct Injected {
  int64_t at_call = 0;  // the call number (of its function) that fails
  int error = 0;
};

// Everything, created once and never destroyed (threads may still call in
// while the process exits).
struct State {
  std::recursive_mutex mu;
  Limits limits;
  uint64_t pool_release_threshold = 0;
  cudaError_t sticky = cudaSuccess;
  int64_t misuses = 0;
  std::unordered_map<std::string, int64_t> calls;
  std::unordered_multimap<std::string, Injected> injected;
  std::map<uintptr_t, Allocation> allocations;
  int64_t bytes_in_use[3] = {0, 0, 0};  // by MemoryKind
  std::shared_ptr<Stream> legacy = std::make_shared<Stream>();
  std::unordered_map<cudaStream_t, std::shared_ptr<Stream>> streams;
  std::vector<std::weak_ptr<Stream>> per_thread_streams;
  std::unordered_map<cudaEvent_t, std::unique_ptr<Event>> events;
};

State& S() {
  static State* const state = new State;
  return *state;
}

// The calling thread's default stream; what is still queued on it runs when
// the thread exits.
struct PerThreadStream {
  std::shared_ptr<Stream> stream;
  ~PerThreadStream() {
    if (stream == nullptr) return;
    std::lock_guard<std::recursive_mutex> lock(S().mu);
    RunAll(*stream);
  }
};

thread_local PerThreadStream per_thread;
thread_local cudaError_t last_error = cudaSuccess;

}  // namespace

std::recursive_mutex& Lock() { return S().mu; }

// ---- Errors and faults --------------------------------------------------------

int TakeInjected(const char* function) {
  State& s = S();
  const int64_t call = ++s.calls[function];
  auto range = s.injected.equal_range(function);
  for (auto it = range.first; it != range.second; ++it) {
    if (it->second.at_call == call) {
      const int error = it->second.error;
      s.injected.erase(it);
      return error;
    }
  }
  return 0;
}

cudaError_t Enter(const char* function) {
  const int injected = TakeInjected(function);
  if (Sticky() != cudaSuccess) return Fail(Sticky());
  if (injected != 0) {
    const cudaError_t error = static_cast<cudaError_t>(injected);
    if (IsSticky(error)) Poison(error);
    return Fail(error);
  }
  return cudaSuccess;
}

cudaError_t Fail(cudaError_t error) {
  if (error != cudaSuccess) last_error = error;
  return error;
}

bool IsSticky(cudaError_t error) {
  switch (error) {
    case cudaErrorContained:
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorTensorMemoryLeak:
    case cudaErrorMpsClientTerminated:
    case cudaErrorExternalDevice:
      return true;
    default:
      return false;
  }
}

void Poison(cudaError_t error) {
  if (S().sticky == cudaSuccess) S().sticky = error;
}

cudaError_t Sticky() { return S().sticky; }

cudaError_t& LastError() { return last_error; }

void Inject(const std::string& function, int64_t nth, int error) {
  State& s = S();
  s.injected.emplace(function, Injected{s.calls[function] + nth, error});
}

int64_t Calls(const std::string& function) {
  auto it = S().calls.find(function);
  return it == S().calls.end() ? 0 : it->second;
}

void Misuse(const std::string& what) {
  ++S().misuses;
  std::fprintf(stderr, "fake CUDA runtime: misuse: %s\n", what.c_str());
}

int64_t Misuses() { return S().misuses; }

Limits& CurrentLimits() { return S().limits; }

uint64_t& PoolReleaseThreshold() { return S().pool_release_threshold; }

void ResetState() {
  State& s = S();
  s.limits = Limits();
  s.pool_release_threshold = 0;
  s.sticky = cudaSuccess;
  s.misuses = 0;
  s.calls.clear();
  s.injected.clear();
  last_error = cudaSuccess;
}

int ErrorByName(const std::string& name) {
  if (name == "cudaErrorUnknown") return cudaErrorUnknown;  // also the name of unlisted codes
  for (int e = 0; e < 1000; ++e) {
    if (name == cudaGetErrorName(static_cast<cudaError_t>(e))) return e;
  }
  return -1;
}

void ConfigureFromEnvironment() {
  if (const char* devices = std::getenv("ROPE_FAKE_CUDA_DEVICES")) {
    S().limits.devices = std::atoi(devices);
  }
  const char* faults = std::getenv("ROPE_FAKE_CUDA_FAULTS");
  if (faults == nullptr) return;
  std::stringstream list(faults);
  std::string fault;
  while (std::getline(list, fault, ',')) {
    const size_t a = fault.find(':');
    const size_t b = a == std::string::npos ? a : fault.find(':', a + 1);
    int64_t nth = 0;
    int error = -1;
    if (b != std::string::npos) {
      nth = std::atoll(fault.substr(a + 1, b - a - 1).c_str());
      const std::string code = fault.substr(b + 1);
      error = code.rfind("cudaError", 0) == 0 ? ErrorByName(code) : std::atoi(code.c_str());
    }
    if (nth < 1 || error <= 0) {
      std::fprintf(stderr, "fake CUDA runtime: ignoring \"%s\" in ROPE_FAKE_CUDA_FAULTS\n",
                   fault.c_str());
      continue;
    }
    Inject(fault.substr(0, a), nth, error);
  }
}

// ---- Memory -------------------------------------------------------------------

namespace {

// What an allocation of `bytes` occupies: at least one byte, so that every
// allocation has its own address.
size_t Footprint(int64_t bytes) { return static_cast<size_t>(bytes > 0 ? bytes : 1); }

// Whether `bytes` more of `kind` fit under its limit (kImported has none).
bool Fits(MemoryKind kind, int64_t bytes) {
  const State& s = S();
  if (bytes < 0) return false;
  if (kind == MemoryKind::kImported) return true;
  const int64_t limit = kind == MemoryKind::kDevice ? s.limits.device_bytes : s.limits.pinned_bytes;
  return bytes <= limit - s.bytes_in_use[static_cast<int>(kind)];
}

void Track(void* p, const Allocation& allocation) {
  S().allocations[reinterpret_cast<uintptr_t>(p)] = allocation;
  S().bytes_in_use[static_cast<int>(allocation.kind)] += allocation.bytes;
}

// Untracks the allocation at `it` and gives its memory back.
void Release(std::map<uintptr_t, Allocation>::iterator it) {
  State& s = S();
  const Allocation a = it->second;
  void* const p = reinterpret_cast<void*>(it->first);
  s.bytes_in_use[static_cast<int>(a.kind)] -= a.bytes;
  s.allocations.erase(it);
  if (a.kind == MemoryKind::kImported || a.memfd >= 0) {
    munmap(p, Footprint(a.bytes));
    if (a.memfd >= 0) close(a.memfd);
  } else {
    std::free(p);
  }
}

}  // namespace

cudaError_t Allocate(MemoryKind kind, int64_t bytes, int device, void** p) {
  if (kind == MemoryKind::kImported || !Fits(kind, bytes)) return cudaErrorMemoryAllocation;
  void* memory = nullptr;
  if (posix_memalign(&memory, kind == MemoryKind::kDevice ? 256 : 4096, Footprint(bytes)) != 0) {
    return cudaErrorMemoryAllocation;
  }
  Allocation allocation;
  allocation.bytes = bytes;
  allocation.kind = kind;
  allocation.device = device;
  Track(memory, allocation);
  *p = memory;
  return cudaSuccess;
}

cudaError_t AllocateExportable(int64_t bytes, int device, void** p) {
  if (!Fits(MemoryKind::kDevice, bytes)) return cudaErrorMemoryAllocation;
  const int memfd = memfd_create(kExportedMemoryName, MFD_CLOEXEC);
  if (memfd < 0) return cudaErrorMemoryAllocation;
  void* memory = MAP_FAILED;
  if (ftruncate(memfd, static_cast<off_t>(Footprint(bytes))) == 0) {
    memory = mmap(nullptr, Footprint(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  }
  if (memory == MAP_FAILED) {
    close(memfd);
    return cudaErrorMemoryAllocation;
  }
  Allocation allocation;
  allocation.bytes = bytes;
  allocation.kind = MemoryKind::kDevice;
  allocation.device = device;
  allocation.memfd = memfd;
  Track(memory, allocation);
  *p = memory;
  return cudaSuccess;
}

cudaError_t Free(MemoryKind kind, void* p) {
  if (p == nullptr) return cudaSuccess;
  State& s = S();
  auto it = s.allocations.find(reinterpret_cast<uintptr_t>(p));
  if (it != s.allocations.end() && it->second.kind == MemoryKind::kImported) {
    Misuse("freeing memory opened by cudaIpcOpenMemHandle (close it with cudaIpcCloseMemHandle)");
    return cudaErrorInvalidValue;
  }
  if (it == s.allocations.end() || it->second.kind != kind) {
    Misuse(kind == MemoryKind::kDevice ? "freeing an address that is no live device allocation"
                                       : "freeing an address that is no live pinned allocation");
    return cudaErrorInvalidValue;
  }
  Release(it);
  return cudaSuccess;
}

const Allocation* Find(const void* p, int64_t bytes) {
  State& s = S();
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  auto it = s.allocations.upper_bound(begin);
  if (it == s.allocations.begin()) return nullptr;
  --it;
  if (bytes < 0 || begin + static_cast<uint64_t>(bytes) > it->first + it->second.bytes) {
    return nullptr;
  }
  return &it->second;
}

const Allocation* FindStart(const void* p) {
  auto it = S().allocations.find(reinterpret_cast<uintptr_t>(p));
  return it == S().allocations.end() ? nullptr : &it->second;
}

const Allocation* FindContaining(const void* p, uintptr_t* base) {
  State& s = S();
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  auto it = s.allocations.upper_bound(address);
  if (it == s.allocations.begin()) return nullptr;
  --it;
  if (address - it->first >= Footprint(it->second.bytes)) return nullptr;
  *base = it->first;
  return &it->second;
}

bool IsPinned(const void* p) {
  const Allocation* a = Find(p, 0);
  return a != nullptr && a->kind == MemoryKind::kPinned;
}

int64_t BytesInUse(MemoryKind kind) { return S().bytes_in_use[static_cast<int>(kind)]; }

// ---- CUDA IPC (imported memory) ----------------------------------------------

cudaError_t Import(int fd, int64_t bytes, int device, void** p) {
  State& s = S();
  struct stat file;
  if (bytes < 0 || fstat(fd, &file) != 0 || file.st_size < static_cast<off_t>(bytes)) {
    close(fd);
    return cudaErrorMapBufferObjectFailed;
  }
  for (auto& [address, a] : s.allocations) {
    if (a.kind == MemoryKind::kImported && a.file_device == file.st_dev &&
        a.file_inode == file.st_ino) {
      close(fd);  // open already: the same mapping, one more open of it
      ++a.opens;
      *p = reinterpret_cast<void*>(address);
      return cudaSuccess;
    }
  }
  void* memory = mmap(nullptr, Footprint(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);  // the mapping holds the file
  if (memory == MAP_FAILED) return cudaErrorMapBufferObjectFailed;
  Allocation allocation;
  allocation.bytes = bytes;
  allocation.kind = MemoryKind::kImported;
  allocation.device = device;
  allocation.file_device = file.st_dev;
  allocation.file_inode = file.st_ino;
  allocation.opens = 1;
  Track(memory, allocation);
  *p = memory;
  return cudaSuccess;
}

cudaError_t CloseImport(void* p) {
  State& s = S();
  auto it = s.allocations.find(reinterpret_cast<uintptr_t>(p));
  if (it == s.allocations.end() || it->second.kind != MemoryKind::kImported) {
    Misuse("cudaIpcCloseMemHandle of an address that is no open imported mapping");
    return cudaErrorInvalidValue;
  }
  if (--it->second.opens == 0) Release(it);
  return cudaSuccess;
}

int64_t ImportedMappings() {
  int64_t mappings = 0;
  for (const auto& [address, a] : S().allocations) {
    if (a.kind == MemoryKind::kImported) ++mappings;
  }
  return mappings;
}

// ---- Streams and events -------------------------------------------------------

std::shared_ptr<Stream> StreamOf(cudaStream_t handle) {
  State& s = S();
  if (handle == nullptr || handle == cudaStreamLegacy) return s.legacy;
  if (handle == cudaStreamPerThread) {
    if (per_thread.stream == nullptr) {
      per_thread.stream = std::make_shared<Stream>();
      auto& weak = s.per_thread_streams;
      weak.erase(std::remove_if(weak.begin(), weak.end(),
                                [](const std::weak_ptr<Stream>& w) { return w.expired(); }),
                 weak.end());
      s.per_thread_streams.push_back(per_thread.stream);
    }
    return per_thread.stream;
  }
  auto it = s.streams.find(handle);
  if (it == s.streams.end()) {
    Misuse("an unknown or destroyed stream");
    return nullptr;
  }
  return it->second;
}

cudaStream_t CreateStream() {
  auto stream = std::make_shared<Stream>();
  cudaStream_t handle = reinterpret_cast<cudaStream_t>(stream.get());
  S().streams[handle] = std::move(stream);
  return handle;
}

bool DestroyStream(cudaStream_t handle) {
  State& s = S();
  auto it = s.streams.find(handle);
  if (it == s.streams.end()) {
    Misuse("destroying an unknown or destroyed stream");
    return false;
  }
  std::shared_ptr<Stream> stream = it->second;
  s.streams.erase(it);
  RunAll(*stream);  // a device completes what was enqueued
  return true;
}

void Enqueue(Stream& stream, Op op) {
  stream.queue.push_back(std::move(op));
  ++stream.enqueued;
}

void RunUntil(Stream& stream, uint64_t point) {
  while (stream.executed < point && !stream.queue.empty()) {
    Op op = std::move(stream.queue.front());
    stream.queue.pop_front();
    if (op.wait_for != nullptr) {
      RunUntil(*op.wait_for, op.wait_until);
    } else if (Sticky() == cudaSuccess) {
      if (op.run) op.run();
    } else if (op.discard) {
      op.discard();
    }
    ++stream.executed;
  }
}

void RunAll(Stream& stream) { RunUntil(stream, stream.enqueued); }

void RunEveryStream() {
  State& s = S();
  RunAll(*s.legacy);
  std::vector<std::shared_ptr<Stream>> all;
  for (auto& [handle, stream] : s.streams) all.push_back(stream);
  for (std::weak_ptr<Stream>& weak : s.per_thread_streams) {
    if (std::shared_ptr<Stream> stream = weak.lock()) all.push_back(stream);
  }
  for (std::shared_ptr<Stream>& stream : all) RunAll(*stream);
}

Event* EventOf(cudaEvent_t handle) {
  auto it = S().events.find(handle);
  if (it == S().events.end()) {
    Misuse("an unknown or destroyed event");
    return nullptr;
  }
  return it->second.get();
}

cudaEvent_t CreateEvent() {
  auto event = std::make_unique<Event>();
  cudaEvent_t handle = reinterpret_cast<cudaEvent_t>(event.get());
  S().events[handle] = std::move(event);
  return handle;
}

bool DestroyEvent(cudaEvent_t handle) {
  if (S().events.erase(handle) == 0) {
    Misuse("destroying an unknown or destroyed event");
    return false;
  }
  return true;
}

}  // namespace fake_cuda
}  // namespace rope
