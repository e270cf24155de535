// Owners of CUDA resources: device memory, pinned host memory, streams,
// events. Each frees what it holds on destruction (errors there are
// ignored: nothing useful can be done with them). Not thread-safe; each
// object belongs to one worker context or one table at a time.
#ifndef ROPE_BACKENDS_CUDA_DEVICE_MEMORY_H_
#define ROPE_BACKENDS_CUDA_DEVICE_MEMORY_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace rope {

// A device allocation that grows on demand and keeps its size between uses.
//
// Stream-ordered (cudaMallocAsync / cudaFreeAsync from the device's default
// memory pool): unlike cudaMalloc and cudaFree, neither waits for the whole
// device, so growing or freeing a buffer never stalls other calls' work.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { Release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Ensures at least `bytes` are allocated, in order on `stream`: work
  // enqueued on `stream` afterwards, or on a stream ordered after it, may
  // use the memory. When it grows, the old allocation is freed first (on
  // its own stream, so that the pool can reuse it) and the contents are not
  // kept. RESOURCE_EXHAUSTED naming `what`, the size and the device's free
  // memory when the device is out of memory; the buffer is then empty.
  // `stream` must outlive the allocation (its free is ordered there too);
  // cudaStreamPerThread always does.
  absl::Status Reserve(int64_t bytes, absl::string_view what, cudaStream_t stream);
  // Frees the allocation when it is larger than `keep_bytes`.
  void ShrinkTo(int64_t keep_bytes);
  // Frees the allocation in order on the stream it was allocated on: work
  // enqueued there before still sees it; work on other streams must be
  // finished with it.
  void Release();

  void* data() const { return data_; }
  int64_t capacity() const { return capacity_; }

 private:
  void* data_ = nullptr;
  int64_t capacity_ = 0;
  cudaStream_t stream_ = nullptr;
};

// Page-locked host memory for staging copies (the DMA engines read and
// write it directly, and copies from it are truly asynchronous).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { Release(); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  // Ensures at least `bytes` are allocated. The new buffer is allocated
  // before the old one is freed: on failure (RESOURCE_EXHAUSTED naming
  // `what` and the size) the buffer keeps its old allocation, so a context
  // whose buffer could not grow still holds a usable one. Contents are not
  // kept when it grows. Nothing may still be copying to or from it.
  absl::Status Reserve(int64_t bytes, absl::string_view what);
  // Replaces an allocation larger than `bytes` by one of `bytes` (allocated
  // first; on failure the larger one is kept and the error returned).
  absl::Status ShrinkTo(int64_t bytes, absl::string_view what);
  void Release();

  char* data() const { return static_cast<char*>(data_); }
  int64_t capacity() const { return capacity_; }

 private:
  void* data_ = nullptr;
  int64_t capacity_ = 0;
};

// A non-blocking stream (no implicit synchronisation with the legacy
// default stream).
class CudaStream {
 public:
  CudaStream() = default;
  ~CudaStream();
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  absl::Status Create();
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// An event used only for ordering (timing disabled, which makes it cheaper).
class CudaEvent {
 public:
  CudaEvent() = default;
  ~CudaEvent();
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  absl::Status Create();
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace rope

#endif  // ROPE_BACKENDS_CUDA_DEVICE_MEMORY_H_
