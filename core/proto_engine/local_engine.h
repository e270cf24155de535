// An in-process Engine over the CPU backend, for code outside server/ that
// needs the server's arithmetic without a server: ropeload's --verify oracle
// calls the rope_calls.h entries on it. Keeps client code free of any
// core/backends header; links the CPU backend (target rope_local_engine).
#ifndef ROPE_PROTO_ENGINE_LOCAL_ENGINE_H_
#define ROPE_PROTO_ENGINE_LOCAL_ENGINE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/engine/engine.h"

namespace rope {

// An Engine on a CPU backend with `threads` threads (>= 1) and `limits`.
// INTERNAL when the backend cannot start.
absl::StatusOr<std::unique_ptr<Engine>> NewLocalCpuEngine(int threads, const EngineLimits& limits);

}  // namespace rope

#endif  // ROPE_PROTO_ENGINE_LOCAL_ENGINE_H_
