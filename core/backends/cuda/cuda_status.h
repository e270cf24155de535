// The one place where CUDA runtime and cuBLAS errors become absl::Status.
//
//   out of device or pinned memory         -> RESOURCE_EXHAUSTED
//   no device / no or too old a driver     -> FAILED_PRECONDITION
//   anything else (a bad launch, a fault)  -> INTERNAL
//
// Messages name what was being done, the CUDA error's name and its text.
// A failed runtime call also leaves its error in the thread's last-error
// slot, where the next kernel launcher's cudaGetLastError would report it as
// its own; CudaStatus clears it. Recoverable errors are then gone; a sticky
// error (IsStickyCudaError) is returned again by every later call anyway.
#ifndef ROPE_BACKENDS_CUDA_CUDA_STATUS_H_
#define ROPE_BACKENDS_CUDA_CUDA_STATUS_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace rope {

// OK for cudaSuccess; otherwise the mapped status "`what`: <name>: <text>"
// (for a sticky error, followed by a note that the process must restart).
absl::Status CudaStatus(cudaError_t error, absl::string_view what);

// Whether `error` is one that CUDA documents as leaving the process's CUDA
// context unusable ("any further CUDA work will return the same error. To
// continue using CUDA, the process must be terminated and relaunched"): a
// kernel's illegal address, launch failure, assertion, and the like.
bool IsStickyCudaError(cudaError_t error);

// OK for CUBLAS_STATUS_SUCCESS; otherwise the mapped status.
absl::Status CublasStatus(cublasStatus_t status, absl::string_view what);

}  // namespace rope

// Returns the mapped status from the current function when `expr` (a
// cudaError_t) is not cudaSuccess.
#define ROPE_CUDA_RETURN_IF_ERROR(expr, what)            \
  do {                                                   \
    const cudaError_t rope_cuda_error_ = (expr);         \
    if (rope_cuda_error_ != cudaSuccess) {               \
      return ::rope::CudaStatus(rope_cuda_error_, what); \
    }                                                    \
  } while (0)

#define ROPE_CUBLAS_RETURN_IF_ERROR(expr, what)               \
  do {                                                        \
    const cublasStatus_t rope_cublas_status_ = (expr);        \
    if (rope_cublas_status_ != CUBLAS_STATUS_SUCCESS) {       \
      return ::rope::CublasStatus(rope_cublas_status_, what); \
    }                                                         \
  } while (0)

#endif  // ROPE_BACKENDS_CUDA_CUDA_STATUS_H_
