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
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { Release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Ensures at least `bytes` are allocated (contents are not kept when it
  // grows). RESOURCE_EXHAUSTED naming `what`, the size and the device's free
  // memory when the device is out of memory; the buffer is then empty.
  absl::Status Reserve(int64_t bytes, absl::string_view what);
  // Frees the allocation when it is larger than `keep_bytes`.
  void ShrinkTo(int64_t keep_bytes);
  void Release();

  void* data() const { return data_; }
  int64_t capacity() const { return capacity_; }

 private:
  void* data_ = nullptr;
  int64_t capacity_ = 0;
};

// Page-locked host memory for staging copies (the DMA engines read and
// write it directly, and copies from it are truly asynchronous).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { Release(); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  // As DeviceBuffer::Reserve, for pinned host memory.
  absl::Status Reserve(int64_t bytes, absl::string_view what);
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
