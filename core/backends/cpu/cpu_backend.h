// The CPU backend: rotation and softmax with SIMD kernels (the best path this
// CPU runs, or the one asked for; cpu_simd.h), attention GEMMs with OpenBLAS,
// over a thread pool.
#ifndef ROPE_BACKENDS_CPU_CPU_BACKEND_H_
#define ROPE_BACKENDS_CPU_CPU_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/engine/backend.h"

namespace rope {

struct CpuBackendOptions {
  // <= 0 means one per hardware thread. Work of a single call is split
  // across the pool; concurrent calls share it.
  int threads = 0;
  // SIMD path (cpu_simd.h): "" or "auto" for the best this CPU runs, or a
  // path name to force that one.
  std::string simd;
  // Where `simd` came from, for error messages (e.g. "--cpu_simd").
  std::string simd_origin = "cpu_simd";
};

// INVALID_ARGUMENT for a bad thread count or an unknown SIMD path name;
// FAILED_PRECONDITION for a SIMD path this CPU cannot run.
absl::StatusOr<std::unique_ptr<Backend>> NewCpuBackend(const CpuBackendOptions& options);

// `threads` as above; the SIMD path comes from the ROPE_CPU_SIMD environment
// variable when it is set, else the best this CPU runs.
absl::StatusOr<std::unique_ptr<Backend>> NewCpuBackend(int threads);

}  // namespace rope

#endif  // ROPE_BACKENDS_CPU_CPU_BACKEND_H_
