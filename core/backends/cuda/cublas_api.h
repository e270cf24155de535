// cuBLAS, loaded at run time with dlopen instead of linked.
//
// Why: a library linked into the executable puts its thread-local storage
// in every thread's static TLS block, carved from the thread's stack;
// libcublasLt's is ~94 KB, which makes threads with small fixed stacks fail
// to start (civetweb's, behind the Prometheus /metrics endpoint, did:
// "Cannot create first worker thread"). A dlopen'ed library's TLS is
// allocated on demand instead. It also lets ropeserve start on a machine
// without cuBLAS, where only the CUDA backend then fails, with a clear
// FAILED_PRECONDITION.
#ifndef ROPE_BACKENDS_CUDA_CUBLAS_API_H_
#define ROPE_BACKENDS_CUDA_CUBLAS_API_H_

#include <cublas_v2.h>  // types only; nothing here links against cuBLAS

#include "absl/status/statusor.h"

namespace rope {

// The few cuBLAS entry points the backend uses.
struct CublasApi {
  decltype(&::cublasCreate_v2) create = nullptr;
  decltype(&::cublasDestroy_v2) destroy = nullptr;
  decltype(&::cublasSetStream_v2) set_stream = nullptr;
  decltype(&::cublasSetMathMode) set_math_mode = nullptr;
  decltype(&::cublasSgemmStridedBatched) sgemm_strided_batched = nullptr;
};

// Loads cuBLAS once (thread-safe) and returns its entry points; the same
// result on every call. FAILED_PRECONDITION naming the library and the
// loader's error when it cannot be loaded.
absl::StatusOr<const CublasApi*> LoadCublas();

}  // namespace rope

#endif  // ROPE_BACKENDS_CUDA_CUBLAS_API_H_
