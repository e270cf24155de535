#include "core/backends/cuda/device_memory.h"

#include "absl/strings/str_cat.h"
#include "core/backends/cuda/cuda_status.h"
#include "common/status_macros.h"

namespace rope {
namespace {

// "(device has N of M bytes free)" for out-of-memory messages.
std::string FreeMemoryNote() {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return "";
  }
  return absl::StrCat(" (device has ", free_bytes, " of ", total_bytes, " bytes free)");
}

}  // namespace

absl::Status DeviceBuffer::Reserve(int64_t bytes, absl::string_view what, cudaStream_t stream) {
  if (bytes <= capacity_) return absl::OkStatus();
  Release();
  void* p = nullptr;
  const cudaError_t error = cudaMallocAsync(&p, static_cast<size_t>(bytes), stream);
  if (error != cudaSuccess) {
    const absl::Status status =
        CudaStatus(error, absl::StrCat("allocating ", bytes, " bytes of device memory for ", what));
    if (absl::IsResourceExhausted(status)) {
      return absl::ResourceExhaustedError(absl::StrCat(status.message(), FreeMemoryNote()));
    }
    return status;
  }
  data_ = p;
  capacity_ = bytes;
  stream_ = stream;
  return absl::OkStatus();
}

void DeviceBuffer::ShrinkTo(int64_t keep_bytes) {
  if (capacity_ > keep_bytes) Release();
}

void DeviceBuffer::Release() {
  if (data_ != nullptr) (void)cudaFreeAsync(data_, stream_);
  data_ = nullptr;
  capacity_ = 0;
  stream_ = nullptr;
}

namespace {

absl::Status AllocatePinned(int64_t bytes, absl::string_view what, void** p) {
  ROPE_CUDA_RETURN_IF_ERROR(
      cudaMallocHost(p, static_cast<size_t>(bytes)),
      absl::StrCat("allocating ", bytes, " bytes of pinned host memory for ", what));
  return absl::OkStatus();
}

}  // namespace

absl::Status PinnedBuffer::Reserve(int64_t bytes, absl::string_view what) {
  if (bytes <= capacity_) return absl::OkStatus();
  void* p = nullptr;
  ROPE_RETURN_IF_ERROR(AllocatePinned(bytes, what, &p));
  Release();
  data_ = p;
  capacity_ = bytes;
  return absl::OkStatus();
}

absl::Status PinnedBuffer::ShrinkTo(int64_t bytes, absl::string_view what) {
  if (capacity_ <= bytes) return absl::OkStatus();
  void* p = nullptr;
  ROPE_RETURN_IF_ERROR(AllocatePinned(bytes, what, &p));
  Release();
  data_ = p;
  capacity_ = bytes;
  return absl::OkStatus();
}

void PinnedBuffer::Release() {
  if (data_ != nullptr) (void)cudaFreeHost(data_);
  data_ = nullptr;
  capacity_ = 0;
}

CudaStream::~CudaStream() {
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

absl::Status CudaStream::Create() {
  ROPE_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                            "creating a CUDA stream");
  return absl::OkStatus();
}

CudaEvent::~CudaEvent() {
  if (event_ != nullptr) (void)cudaEventDestroy(event_);
}

absl::Status CudaEvent::Create() {
  ROPE_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming),
                            "creating a CUDA event");
  return absl::OkStatus();
}

}  // namespace rope
