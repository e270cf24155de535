// Validation of engine requests against a config and the server's limits,
// and resolution into the backend's argument structs.
//
// Everything a backend relies on is checked here: ranks, dims, byte sizes,
// element counts (without int64 overflow), GQA divisibility, and every
// position in [0, max_len). Messages name the field and its value.
#ifndef ROPE_ENGINE_VALIDATION_H_
#define ROPE_ENGINE_VALIDATION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/backend.h"
#include "server/engine/engine.h"

namespace rope {

// Resolves a rotate request. The returned args point into `params` (tensors
// and the positions vector), which must outlive them. Table-independent:
// positions are checked against config.max_len.
absl::StatusOr<RotateArgs> ResolveRotate(const RotateParams& params, const EngineLimits& limits);

struct ResolvedAttention {
  AttentionArgs args;  // scores/output pointers left null for the caller
  std::vector<int64_t> scores_shape;  // [B, Hq, Sq, Sk]
  std::vector<int64_t> output_shape;  // [B, Sq, Hq, Dv] when v is present
};

absl::StatusOr<ResolvedAttention> ResolveAttention(const AttentionParams& params,
                                                   const EngineLimits& limits);

}  // namespace rope

#endif  // ROPE_ENGINE_VALIDATION_H_
