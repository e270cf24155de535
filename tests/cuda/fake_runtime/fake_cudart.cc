// The CUDA runtime API of the fake libcudart.so.13 (fake_cuda_control.h has
// the model), over the state in fake_device.h, and the control functions.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tests/cuda/fake_runtime/fake_cuda_control.h"
#include "tests/cuda/fake_runtime/fake_device.h"

using rope::fake_cuda::Enter;
using rope::fake_cuda::Fail;
using rope::fake_cuda::MemoryKind;
using rope::fake_cuda::Op;
using rope::fake_cuda::Stream;

namespace {

using Guard = std::lock_guard<std::recursive_mutex>;

constexpr int kMultiprocessors = 4;

thread_local int current_device = 0;

// The default memory pool's handle: an address nothing else has.
char default_pool_tag;
cudaMemPool_t DefaultPool() { return reinterpret_cast<cudaMemPool_t>(&default_pool_tag); }

// Configures from the environment when the library is loaded.
struct EnvironmentConfig {
  EnvironmentConfig() {
    Guard lock(rope::fake_cuda::Lock());
    rope::fake_cuda::ConfigureFromEnvironment();
  }
} environment_config;

cudaError_t CheckDevice(int device) {
  if (device < 0 || device >= rope::fake_cuda::CurrentLimits().devices) {
    return Fail(cudaErrorInvalidDevice);
  }
  return cudaSuccess;
}

// The stream of `handle`, or null after counting a misuse and leaving
// cudaErrorInvalidResourceHandle as the last error.
std::shared_ptr<Stream> StreamOrFail(cudaStream_t handle) {
  std::shared_ptr<Stream> stream = rope::fake_cuda::StreamOf(handle);
  if (stream == nullptr) Fail(cudaErrorInvalidResourceHandle);
  return stream;
}

// After the device ran queued work: the sticky error it raised, if any.
cudaError_t AfterRunning() {
  const cudaError_t sticky = rope::fake_cuda::Sticky();
  return sticky == cudaSuccess ? cudaSuccess : Fail(sticky);
}

// Checks, when a copy runs, that its device side is live memory; raises
// cudaErrorIllegalAddress otherwise.
bool CopyMayTouch(const void* p, size_t bytes, const char* side) {
  if (bytes == 0 || rope::fake_cuda::Find(p, static_cast<int64_t>(bytes)) != nullptr) return true;
  std::fprintf(stderr, "fake CUDA runtime: a copy's %s (%p, %zu bytes) is not live memory\n", side,
               p, bytes);
  rope::fake_cuda::Poison(cudaErrorIllegalAddress);
  return false;
}

bool IsDeviceSide(cudaMemcpyKind kind, bool destination) {
  switch (kind) {
    case cudaMemcpyHostToDevice:
      return destination;
    case cudaMemcpyDeviceToHost:
      return !destination;
    case cudaMemcpyDeviceToDevice:
      return true;
    default:
      return false;
  }
}

// Enqueues a copy on `stream` with the semantics CUDA gives pageable host
// memory (see fake_cuda_control.h).
cudaError_t EnqueueCopy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                        Stream& stream) {
  if (kind == cudaMemcpyDefault || kind == cudaMemcpyHostToHost) {
    return Fail(cudaErrorInvalidMemcpyDirection);  // the backend names every direction
  }
  const bool dst_device = IsDeviceSide(kind, true);
  const bool src_device = IsDeviceSide(kind, false);
  auto check = [=]() {
    return (!dst_device || CopyMayTouch(dst, bytes, "destination")) &&
           (!src_device || CopyMayTouch(src, bytes, "source"));
  };
  if (!src_device && !rope::fake_cuda::IsPinned(src)) {
    // From pageable memory: the source is read now.
    auto copy = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                    static_cast<const char*>(src) + bytes);
    Op op;
    op.run = [=]() {
      if (check()) std::memcpy(dst, copy->data(), bytes);
    };
    rope::fake_cuda::Enqueue(stream, std::move(op));
    return cudaSuccess;
  }
  Op op;
  op.run = [=]() {
    if (check()) std::memcpy(dst, src, bytes);
  };
  rope::fake_cuda::Enqueue(stream, std::move(op));
  if (!dst_device && !rope::fake_cuda::IsPinned(dst)) {
    // To pageable memory: complete before returning.
    rope::fake_cuda::RunAll(stream);
    return AfterRunning();
  }
  return cudaSuccess;
}

// A launched kernel: runs `run(data, 1)` when its stream gets there (or
// `run(data, 0)` if it will not), after raising the "kernel" fault chosen
// for it at launch, if any.
cudaError_t LaunchOnStream(cudaStream_t handle, void (*run)(void*, int), void* data) {
  const cudaError_t launched = Enter("cudaLaunchKernel");
  std::shared_ptr<Stream> stream =
      launched == cudaSuccess ? StreamOrFail(handle) : std::shared_ptr<Stream>();
  if (stream == nullptr) {
    if (run != nullptr) run(data, 0);
    return launched != cudaSuccess ? launched : cudaErrorInvalidResourceHandle;
  }
  const cudaError_t fault = static_cast<cudaError_t>(rope::fake_cuda::TakeInjected("kernel"));
  Op op;
  op.run = [=]() {
    if (fault != cudaSuccess) {
      rope::fake_cuda::Poison(fault);
      if (run != nullptr) run(data, 0);
      return;
    }
    if (run != nullptr) run(data, 1);
  };
  op.discard = [=]() {
    if (run != nullptr) run(data, 0);
  };
  rope::fake_cuda::Enqueue(*stream, std::move(op));
  return cudaSuccess;
}

// ---- CUDA IPC --------------------------------------------------------------------

// What a cudaIpcMemHandle_t holds (the format is in fake_cuda_control.h).
struct IpcHandle {
  char magic[8];
  int32_t pid;
  int32_t fd;
  int64_t bytes;
  int32_t device;
};
static_assert(sizeof(IpcHandle) <= sizeof(cudaIpcMemHandle_t), "an IPC handle has 64 bytes");
constexpr char kIpcMagic[8] = {'R', 'o', 'p', 'e', 'I', 'P', 'C', '1'};

cudaIpcMemHandle_t EncodeIpcHandle(const IpcHandle& fields) {
  cudaIpcMemHandle_t handle;
  std::memset(&handle, 0, sizeof(handle));
  std::memcpy(&handle, &fields, sizeof(fields));
  return handle;
}

// False when `handle` is not one of the fake's (its magic).
bool DecodeIpcHandle(const cudaIpcMemHandle_t& handle, IpcHandle* fields) {
  std::memcpy(fields, &handle, sizeof(*fields));
  return std::memcmp(fields->magic, kIpcMagic, sizeof(kIpcMagic)) == 0 && fields->bytes >= 0;
}

// The exporter's memfd, opened read-write through /proc/<pid>/fd/<fd>; -1
// when that fails (the exporter exited or closed it) or is no cudaMalloc
// memfd (the number was reused for something else).
int OpenExported(const IpcHandle& h) {
  const std::string path = "/proc/" + std::to_string(h.pid) + "/fd/" + std::to_string(h.fd);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return -1;
  char target[256] = {};
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t length = readlink(self.c_str(), target, sizeof(target) - 1);
  const std::string want = std::string("/memfd:") + rope::fake_cuda::kExportedMemoryName;
  if (length < 0 || std::string(target, static_cast<size_t>(length)).rfind(want, 0) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// The driver's cuMemGetAddressRange (_v2), over the fake's device memory:
// what cudaGetDriverEntryPointByVersion hands out for it. Counted and
// faulted as "cuMemGetAddressRange" (an injected code is a CUresult).
CUresult FakeCuMemGetAddressRange(CUdeviceptr* base, size_t* size, CUdeviceptr dptr) {
  Guard lock(rope::fake_cuda::Lock());
  if (const int injected = rope::fake_cuda::TakeInjected("cuMemGetAddressRange")) {
    return static_cast<CUresult>(injected);
  }
  // The sticky errors have the same values in the driver's API.
  if (rope::fake_cuda::Sticky() != cudaSuccess) {
    return static_cast<CUresult>(rope::fake_cuda::Sticky());
  }
  uintptr_t start = 0;
  const rope::fake_cuda::Allocation* allocation =
      rope::fake_cuda::FindContaining(reinterpret_cast<const void*>(dptr), &start);
  if (allocation == nullptr || allocation->kind == MemoryKind::kPinned) {
    return CUDA_ERROR_NOT_FOUND;
  }
  if (base != nullptr) *base = static_cast<CUdeviceptr>(start);
  if (size != nullptr) *size = static_cast<size_t>(allocation->bytes);
  return CUDA_SUCCESS;
}

struct LaunchConfiguration {
  dim3 grid, block;
  size_t shared_memory = 0;
  cudaStream_t stream = nullptr;
};

thread_local std::vector<LaunchConfiguration> launch_configurations;

}  // namespace

extern "C" {

// ---- Control (fake_cuda_control.h) ----------------------------------------------

void RopeFakeCudaReset() {
  Guard lock(rope::fake_cuda::Lock());
  rope::fake_cuda::ResetState();
}

void RopeFakeCudaFailCall(const char* function, int64_t nth, int error) {
  Guard lock(rope::fake_cuda::Lock());
  rope::fake_cuda::Inject(function, nth, error);
}

int64_t RopeFakeCudaCalls(const char* function) {
  Guard lock(rope::fake_cuda::Lock());
  return rope::fake_cuda::Calls(function);
}

int64_t RopeFakeCudaDeviceBytes() {
  Guard lock(rope::fake_cuda::Lock());
  return rope::fake_cuda::BytesInUse(MemoryKind::kDevice);
}

int64_t RopeFakeCudaPinnedBytes() {
  Guard lock(rope::fake_cuda::Lock());
  return rope::fake_cuda::BytesInUse(MemoryKind::kPinned);
}

int64_t RopeFakeCudaImportedMappings() {
  Guard lock(rope::fake_cuda::Lock());
  return rope::fake_cuda::ImportedMappings();
}

void RopeFakeCudaSetDeviceMemory(int64_t bytes) {
  Guard lock(rope::fake_cuda::Lock());
  rope::fake_cuda::CurrentLimits().device_bytes = bytes;
}

void RopeFakeCudaSetPinnedMemory(int64_t bytes) {
  Guard lock(rope::fake_cuda::Lock());
  rope::fake_cuda::CurrentLimits().pinned_bytes = bytes;
}

void RopeFakeCudaSetDeviceCount(int count) {
  Guard lock(rope::fake_cuda::Lock());
  rope::fake_cuda::CurrentLimits().devices = count;
}

void RopeFakeCudaSetMemoryPoolsSupported(int supported) {
  Guard lock(rope::fake_cuda::Lock());
  rope::fake_cuda::CurrentLimits().memory_pools = supported != 0;
}

uint64_t RopeFakeCudaPoolReleaseThreshold() {
  Guard lock(rope::fake_cuda::Lock());
  return rope::fake_cuda::PoolReleaseThreshold();
}

int RopeFakeCudaStickyError() {
  Guard lock(rope::fake_cuda::Lock());
  return rope::fake_cuda::Sticky();
}

int64_t RopeFakeCudaMisuses() {
  Guard lock(rope::fake_cuda::Lock());
  return rope::fake_cuda::Misuses();
}

int RopeFakeCudaCheckAccess(const void* p, int64_t bytes) {
  Guard lock(rope::fake_cuda::Lock());
  if (bytes == 0 || rope::fake_cuda::Find(p, bytes) != nullptr) return 1;
  std::fprintf(stderr, "fake CUDA runtime: a kernel touched %p (%lld bytes): not live memory\n", p,
               static_cast<long long>(bytes));
  rope::fake_cuda::Poison(cudaErrorIllegalAddress);
  return 0;
}

cudaError_t RopeFakeCudaLaunchKernel(cudaStream_t stream, void (*run)(void*, int), void* data) {
  Guard lock(rope::fake_cuda::Lock());
  return LaunchOnStream(stream, run, data);
}

int RopeFakeCudaEnter(const char* function) {
  Guard lock(rope::fake_cuda::Lock());
  return rope::fake_cuda::TakeInjected(function);
}

// ---- Errors --------------------------------------------------------------------

cudaError_t cudaGetLastError() {
  Guard lock(rope::fake_cuda::Lock());
  const cudaError_t sticky = rope::fake_cuda::Sticky();
  if (sticky != cudaSuccess) return sticky;  // cannot be cleared
  const cudaError_t error = rope::fake_cuda::LastError();
  rope::fake_cuda::LastError() = cudaSuccess;
  return error;
}

cudaError_t cudaPeekAtLastError() {
  Guard lock(rope::fake_cuda::Lock());
  const cudaError_t sticky = rope::fake_cuda::Sticky();
  return sticky != cudaSuccess ? sticky : rope::fake_cuda::LastError();
}

// ---- Devices ---------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  Guard lock(rope::fake_cuda::Lock());
  *count = 0;
  if (const cudaError_t e = Enter("cudaGetDeviceCount"); e != cudaSuccess) return e;
  const int devices = rope::fake_cuda::CurrentLimits().devices;
  if (devices <= 0) return Fail(cudaErrorNoDevice);
  *count = devices;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  Guard lock(rope::fake_cuda::Lock());
  if (const cudaError_t e = Enter("cudaSetDevice"); e != cudaSuccess) return e;
  if (const cudaError_t e = CheckDevice(device); e != cudaSuccess) return e;
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  Guard lock(rope::fake_cuda::Lock());
  if (const cudaError_t e = Enter("cudaGetDevice"); e != cudaSuccess) return e;
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device) {
  Guard lock(rope::fake_cuda::Lock());
  if (const cudaError_t e = Enter("cudaGetDeviceProperties"); e != cudaSuccess) return e;
  if (const cudaError_t e = CheckDevice(device); e != cudaSuccess) return e;
  std::memset(properties, 0, sizeof(*properties));
  std::snprintf(properties->name, sizeof(properties->name),
                "ropeserve fake CUDA device (host memory)");
  properties->major = 9;
  properties->minor = 0;
  properties->multiProcessorCount = kMultiprocessors;
  properties->totalGlobalMem = static_cast<size_t>(rope::fake_cuda::CurrentLimits().device_bytes);
  properties->warpSize = 32;
  properties->maxThreadsPerBlock = 1024;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  Guard lock(rope::fake_cuda::Lock());
  if (const cudaError_t e = Enter("cudaDeviceGetAttribute"); e != cudaSuccess) return e;
  if (const cudaError_t e = CheckDevice(device); e != cudaSuccess) return e;
  switch (attribute) {
    case cudaDevAttrMemoryPoolsSupported:
      *value = rope::fake_cuda::CurrentLimits().memory_pools ? 1 : 0;
      break;
    case cudaDevAttrMultiProcessorCount:
      *value = kMultiprocessors;
      break;
    default:
      *value = 0;
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  Guard lock(rope::fake_cuda::Lock());
  if (const cudaError_t e = Enter("cudaDeviceGetDefaultMemPool"); e != cudaSuccess) return e;
  if (const cudaError_t e = CheckDevice(device); e != cudaSuccess) return e;
  if (!rope::fake_cuda::CurrentLimits().memory_pools) return Fail(cudaErrorNotSupported);
  *pool = DefaultPool();
  return cudaSuccess;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attribute, void* value) {
  Guard lock(rope::fake_cuda::Lock());
  if (const cudaError_t e = Enter("cudaMemPoolSetAttribute"); e != cudaSuccess) return e;
  if (pool != DefaultPool()) {
    rope::fake_cuda::Misuse("an unknown memory pool");
    return Fail(cudaErrorInvalidValue);
  }
  if (attribute == cudaMemPoolAttrReleaseThreshold) {
    rope::fake_cuda::PoolReleaseThreshold() = *static_cast<const uint64_t*>(value);
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  Guard lock(rope::fake_cuda::Lock());
  if (const cudaError_t e = Enter("cudaDeviceSynchronize"); e != cudaSuccess) return e;
  rope::fake_cuda::RunEveryStream();
  return AfterRunning();
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  Guard lock(rope::fake_cuda::Lock());
  if (const cudaError_t e = Enter("cudaMemGetInfo"); e != cudaSuccess) return e;
  const int64_t total = rope::fake_cuda::CurrentLimits().device_bytes;
  *total_bytes = static_cast<size_t>(total);
  *free_bytes = static_cast<size_t>(total - rope::fake_cuda::BytesInUse(MemoryKind::kDevice));
  return cudaSuccess;
}

cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attributes, const void* function) {
  Guard lock(rope::fake_cuda::Lock());
  if (const cudaError_t e = Enter("cudaFuncGetAttributes"); e != cudaSuccess) return e;
  std::memset(attributes, 0, sizeof(*attributes));
  attributes->maxThreadsPerBlock = 1024;
  return cudaSuccess;
}

// ---- Memory ------------------------------------------------------------------------

cudaError_t cudaMalloc(void** p, size_t bytes) {
  Guard lock(rope::fake_cuda::Lock());
  *p = nullptr;
  if (const cudaError_t e = Enter("cudaMalloc"); e != cudaSuccess) return e;
  return Fail(rope::fake_cuda::AllocateExportable(static_cast<int64_t>(bytes), current_device, p));
}

cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t stream) {
  Guard lock(rope::fake_cuda::Lock());
  *p = nullptr;
  if (const cudaError_t e = Enter("cudaMallocAsync"); e != cudaSuccess) return e;
  if (StreamOrFail(stream) == nullptr) return cudaErrorInvalidResourceHandle;
  return Fail(rope::fake_cuda::Allocate(MemoryKind::kDevice, static_cast<int64_t>(bytes),
                                        current_device, p));
}

cudaError_t cudaMallocHost(void** p, size_t bytes) {
  Guard lock(rope::fake_cuda::Lock());
  *p = nullptr;
  if (const cudaError_t e = Enter("cudaMallocHost"); e != cudaSuccess) return e;
  return Fail(rope::fake_cuda::Allocate(MemoryKind::kPinned, static_cast<int64_t>(bytes),
                                        current_device, p));
}

// Frees go through even in a poisoned context (returning its error), so
// that a test process can go on after a sticky fault.
cudaError_t cudaFree(void* p) {
  Guard lock(rope::fake_cuda::Lock());
  const cudaError_t entered = Enter("cudaFree");
  if (entered != cudaSuccess && entered != rope::fake_cuda::Sticky()) return entered;
  rope::fake_cuda::RunEveryStream();  // cudaFree waits for the whole device
  const cudaError_t freed = rope::fake_cuda::Free(MemoryKind::kDevice, p);
  return entered != cudaSuccess ? entered : Fail(freed);
}

cudaError_t cudaFreeAsync(void* p, cudaStream_t stream_handle) {
  Guard lock(rope::fake_cuda::Lock());
  const cudaError_t entered = Enter("cudaFreeAsync");
  if (entered != cudaSuccess && entered != rope::fake_cuda::Sticky()) return entered;
  std::shared_ptr<Stream> stream = StreamOrFail(stream_handle);
  if (stream == nullptr) return cudaErrorInvalidResourceHandle;
  const rope::fake_cuda::Allocation* allocation = rope::fake_cuda::FindStart(p);
  if (allocation == nullptr || allocation->kind != MemoryKind::kDevice) {
    rope::fake_cuda::Misuse("cudaFreeAsync of an address that is no live device allocation");
    return Fail(cudaErrorInvalidValue);
  }
  if (entered != cudaSuccess || stream->executed == stream->enqueued) {
    // The stream is at this point already: free now.
    rope::fake_cuda::Free(MemoryKind::kDevice, p);
    return entered;
  }
  Op op;
  op.run = [p]() { rope::fake_cuda::Free(MemoryKind::kDevice, p); };
  op.discard = op.run;
  rope::fake_cuda::Enqueue(*stream, std::move(op));
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* p) {
  Guard lock(rope::fake_cuda::Lock());
  const cudaError_t entered = Enter("cudaFreeHost");
  if (entered != cudaSuccess && entered != rope::fake_cuda::Sticky()) return entered;
  rope::fake_cuda::RunEveryStream();  // like cudaFree, waits for the device
  const cudaError_t freed = rope::fake_cuda::Free(MemoryKind::kPinned, p);
  return entered != cudaSuccess ? entered : Fail(freed);
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  Guard lock(rope::fake_cuda::Lock());
  if (const cudaError_t e = Enter("cudaMemcpy"); e != cudaSuccess) return e;
  std::shared_ptr<Stream> legacy = rope::fake_cuda::StreamOf(nullptr);
  if (const cudaError_t e = EnqueueCopy(dst, src, bytes, kind, *legacy); e != cudaSuccess) {
    return e;
  }
  rope::fake_cuda::RunAll(*legacy);
  return AfterRunning();
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream_handle) {
  Guard lock(rope::fake_cuda::Lock());
  if (const cudaError_t e = Enter("cudaMemcpyAsync"); e != cudaSuccess) return e;
  std::shared_ptr<Stream> stream = StreamOrFail(stream_handle);
  if (stream == nullptr) return cudaErrorInvalidResourceHandle;
  return EnqueueCopy(dst, src, bytes, kind, *stream);
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* p) {
  Guard lock(rope::fake_cuda::Lock());
  if (const cudaError_t e = Enter("cudaPointerGetAttributes"); e != cudaSuccess) return e;
  if (attributes == nullptr) return Fail(cudaErrorInvalidValue);
  std::memset(attributes, 0, sizeof(*attributes));
  uintptr_t base = 0;
  const rope::fake_cuda::Allocation* allocation = rope::fake_cuda::FindContaining(p, &base);
  if (allocation == nullptr) {
    // Not CUDA's: an error before CUDA 11, this since.
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = cudaInvalidDeviceId;
    attributes->hostPointer = const_cast<void*>(p);
    return cudaSuccess;
  }
  attributes->device = allocation->device;
  attributes->devicePointer = const_cast<void*>(p);
  if (allocation->kind == MemoryKind::kPinned) {
    attributes->type = cudaMemoryTypeHost;
    attributes->hostPointer = const_cast<void*>(p);
  } else {
    attributes->type = cudaMemoryTypeDevice;
  }
  return cudaSuccess;
}

// ---- CUDA IPC ----------------------------------------------------------------------

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* p) {
  Guard lock(rope::fake_cuda::Lock());
  if (const cudaError_t e = Enter("cudaIpcGetMemHandle"); e != cudaSuccess) return e;
  const rope::fake_cuda::Allocation* allocation = rope::fake_cuda::FindStart(p);
  if (handle == nullptr || allocation == nullptr || allocation->memfd < 0) {
    return Fail(cudaErrorInvalidValue);  // not the start of a cudaMalloc allocation
  }
  IpcHandle fields;
  std::memcpy(fields.magic, kIpcMagic, sizeof(kIpcMagic));
  fields.pid = static_cast<int32_t>(getpid());
  fields.fd = allocation->memfd;
  fields.bytes = allocation->bytes;
  fields.device = allocation->device;
  *handle = EncodeIpcHandle(fields);
  return cudaSuccess;
}

cudaError_t cudaIpcOpenMemHandle(void** p, cudaIpcMemHandle_t handle, unsigned int flags) {
  Guard lock(rope::fake_cuda::Lock());
  *p = nullptr;
  if (const cudaError_t e = Enter("cudaIpcOpenMemHandle"); e != cudaSuccess) return e;
  IpcHandle fields;
  if (flags != cudaIpcMemLazyEnablePeerAccess || !DecodeIpcHandle(handle, &fields)) {
    return Fail(cudaErrorInvalidValue);
  }
  if (fields.pid == static_cast<int32_t>(getpid())) {
    return Fail(cudaErrorInvalidValue);  // the real runtime refuses it too
  }
  const int fd = OpenExported(fields);
  if (fd < 0) return Fail(cudaErrorMapBufferObjectFailed);
  return Fail(rope::fake_cuda::Import(fd, fields.bytes, fields.device, p));
}

// Goes through even in a poisoned context (returning its error), as frees
// do.
cudaError_t cudaIpcCloseMemHandle(void* p) {
  Guard lock(rope::fake_cuda::Lock());
  const cudaError_t entered = Enter("cudaIpcCloseMemHandle");
  if (entered != cudaSuccess && entered != rope::fake_cuda::Sticky()) return entered;
  const cudaError_t closed = rope::fake_cuda::CloseImport(p);
  return entered != cudaSuccess ? entered : Fail(closed);
}

// ---- Driver entry points -----------------------------------------------------------

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** function,
                                             unsigned int cuda_version, unsigned long long flags,
                                             cudaDriverEntryPointQueryResult* status) {
  Guard lock(rope::fake_cuda::Lock());
  if (const cudaError_t e = Enter("cudaGetDriverEntryPointByVersion"); e != cudaSuccess) return e;
  if (symbol == nullptr || function == nullptr) return Fail(cudaErrorInvalidValue);
  const bool found = std::strcmp(symbol, "cuMemGetAddressRange") == 0;
  *function = found ? reinterpret_cast<void*>(&FakeCuMemGetAddressRange) : nullptr;
  if (status != nullptr) {
    *status = found ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  }
  return found ? cudaSuccess : Fail(cudaErrorSymbolNotFound);
}

cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char* symbol, void** function,
                                                  unsigned int cuda_version,
                                                  unsigned long long flags,
                                                  cudaDriverEntryPointQueryResult* status) {
  return cudaGetDriverEntryPointByVersion(symbol, function, cuda_version, flags, status);
}

// ---- Streams -----------------------------------------------------------------------

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  Guard lock(rope::fake_cuda::Lock());
  *stream = nullptr;
  if (const cudaError_t e = Enter("cudaStreamCreateWithFlags"); e != cudaSuccess) return e;
  *stream = rope::fake_cuda::CreateStream();
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  Guard lock(rope::fake_cuda::Lock());
  const cudaError_t entered = Enter("cudaStreamDestroy");
  if (entered != cudaSuccess && entered != rope::fake_cuda::Sticky()) return entered;
  if (!rope::fake_cuda::DestroyStream(stream)) return Fail(cudaErrorInvalidResourceHandle);
  return entered;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream_handle) {
  Guard lock(rope::fake_cuda::Lock());
  if (const cudaError_t e = Enter("cudaStreamSynchronize"); e != cudaSuccess) return e;
  std::shared_ptr<Stream> stream = StreamOrFail(stream_handle);
  if (stream == nullptr) return cudaErrorInvalidResourceHandle;
  rope::fake_cuda::RunAll(*stream);
  return AfterRunning();
}

cudaError_t cudaStreamQuery(cudaStream_t stream_handle) {
  Guard lock(rope::fake_cuda::Lock());
  if (const cudaError_t e = Enter("cudaStreamQuery"); e != cudaSuccess) return e;
  std::shared_ptr<Stream> stream = StreamOrFail(stream_handle);
  if (stream == nullptr) return cudaErrorInvalidResourceHandle;
  return stream->executed == stream->enqueued ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream_handle, cudaEvent_t event_handle,
                                unsigned int flags) {
  Guard lock(rope::fake_cuda::Lock());
  if (const cudaError_t e = Enter("cudaStreamWaitEvent"); e != cudaSuccess) return e;
  std::shared_ptr<Stream> stream = StreamOrFail(stream_handle);
  if (stream == nullptr) return cudaErrorInvalidResourceHandle;
  rope::fake_cuda::Event* event = rope::fake_cuda::EventOf(event_handle);
  if (event == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  if (event->stream == nullptr) return cudaSuccess;  // never recorded: nothing to wait for
  Op op;
  op.wait_for = event->stream;
  op.wait_until = event->point;
  rope::fake_cuda::Enqueue(*stream, std::move(op));
  return cudaSuccess;
}

// ---- Events ------------------------------------------------------------------------

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  Guard lock(rope::fake_cuda::Lock());
  *event = nullptr;
  if (const cudaError_t e = Enter("cudaEventCreateWithFlags"); e != cudaSuccess) return e;
  *event = rope::fake_cuda::CreateEvent();
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  Guard lock(rope::fake_cuda::Lock());
  const cudaError_t entered = Enter("cudaEventDestroy");
  if (entered != cudaSuccess && entered != rope::fake_cuda::Sticky()) return entered;
  if (!rope::fake_cuda::DestroyEvent(event)) return Fail(cudaErrorInvalidResourceHandle);
  return entered;
}

cudaError_t cudaEventRecord(cudaEvent_t event_handle, cudaStream_t stream_handle) {
  Guard lock(rope::fake_cuda::Lock());
  if (const cudaError_t e = Enter("cudaEventRecord"); e != cudaSuccess) return e;
  std::shared_ptr<Stream> stream = StreamOrFail(stream_handle);
  if (stream == nullptr) return cudaErrorInvalidResourceHandle;
  rope::fake_cuda::Event* event = rope::fake_cuda::EventOf(event_handle);
  if (event == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  event->stream = stream;
  event->point = stream->enqueued;
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event_handle) {
  Guard lock(rope::fake_cuda::Lock());
  if (const cudaError_t e = Enter("cudaEventSynchronize"); e != cudaSuccess) return e;
  rope::fake_cuda::Event* event = rope::fake_cuda::EventOf(event_handle);
  if (event == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  if (event->stream != nullptr) rope::fake_cuda::RunUntil(*event->stream, event->point);
  return AfterRunning();
}

cudaError_t cudaEventQuery(cudaEvent_t event_handle) {
  Guard lock(rope::fake_cuda::Lock());
  if (const cudaError_t e = Enter("cudaEventQuery"); e != cudaSuccess) return e;
  rope::fake_cuda::Event* event = rope::fake_cuda::EventOf(event_handle);
  if (event == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  const bool done = event->stream == nullptr || event->stream->executed >= event->point;
  return done ? cudaSuccess : cudaErrorNotReady;
}

// ---- nvcc's launch ABI (the real kernels, inside the plugin): they run nothing -------

void** __cudaRegisterFatBinary(void* fat_cubin) {
  static void* handle = nullptr;
  return &handle;
}

void __cudaRegisterFatBinaryEnd(void** handle) {}

void __cudaUnregisterFatBinary(void** handle) {}

void __cudaRegisterFunction(void** handle, const char* host_function, char* device_function,
                            const char* device_name, int thread_limit, uint3* tid, uint3* bid,
                            dim3* block, dim3* grid, int* warp_size) {}

void __cudaRegisterVar(void** handle, char* host_var, char* device_address, const char* device_name,
                       int ext, size_t size, int constant, int global) {}

unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared_memory,
                                     cudaStream_t stream) {
  launch_configurations.push_back(LaunchConfiguration{grid, block, shared_memory, stream});
  return 0;
}

cudaError_t __cudaPopCallConfiguration(dim3* grid, dim3* block, size_t* shared_memory,
                                       void* stream) {
  if (launch_configurations.empty()) return cudaErrorInvalidConfiguration;
  const LaunchConfiguration c = launch_configurations.back();
  launch_configurations.pop_back();
  *grid = c.grid;
  *block = c.block;
  *shared_memory = c.shared_memory;
  *static_cast<cudaStream_t*>(stream) = c.stream;
  return cudaSuccess;
}

cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* host_function) {
  *kernel = reinterpret_cast<cudaKernel_t>(const_cast<void*>(host_function));
  return cudaSuccess;
}

cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args,
                               size_t shared_memory, cudaStream_t stream) {
  Guard lock(rope::fake_cuda::Lock());
  return LaunchOnStream(stream, nullptr, nullptr);
}

cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 grid, dim3 block, void** args,
                                    size_t shared_memory, cudaStream_t stream) {
  return __cudaLaunchKernel(kernel, grid, block, args, shared_memory, stream);
}

cudaError_t cudaLaunchKernel(const void* function, dim3 grid, dim3 block, void** args,
                             size_t shared_memory, cudaStream_t stream) {
  Guard lock(rope::fake_cuda::Lock());
  return LaunchOnStream(stream, nullptr, nullptr);
}

}  // extern "C"
