#include "core/proto_engine/local_engine.h"

#include <utility>

#include "common/status_macros.h"
#include "core/backends/cpu/cpu_backend.h"

namespace rope {

absl::StatusOr<std::unique_ptr<Engine>> NewLocalCpuEngine(int threads, const EngineLimits& limits) {
  ROPE_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, NewCpuBackend(threads));
  return std::make_unique<Engine>(std::move(backend), limits);
}

}  // namespace rope
