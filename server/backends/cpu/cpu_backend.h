// The CPU backend: rotation with vectorisable loops over a thread pool, and
// attention scores with OpenBLAS sgemm per (batch, head).
#ifndef ROPE_BACKENDS_CPU_CPU_BACKEND_H_
#define ROPE_BACKENDS_CPU_CPU_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "server/engine/backend.h"

namespace rope {

// `threads` <= 0 means one per hardware thread. Work of a single call is
// split across the pool; concurrent calls share it.
absl::StatusOr<std::unique_ptr<Backend>> NewCpuBackend(int threads);

}  // namespace rope

#endif  // ROPE_BACKENDS_CPU_CPU_BACKEND_H_
