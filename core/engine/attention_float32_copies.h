// Attention over positions the backend cannot take as its mask positions.
//
// A backend's AttentionScores reads each token's position once, both as its
// row of the table and as its place for the masks and ALiBi. Fractional
// positions make per-request table rows (row indices, not sequence
// indices), so for a call with a mask (causal, a window, chunks) or ALiBi
// the engine rotates float32 copies of q and
// k by those rows first, copies v to float32, and hands the backend the
// copies with nothing left to rotate: the positions it then reads are only
// the tokens' sequence indices, which is what every reference model masks
// by (transformers' cache_position, FlashAttention's row and column).
//
// The result equals the backend rotating on the fly: it too rotates in
// float32 from q's and k's own dtype. Host memory only.
#ifndef ROPE_ENGINE_ATTENTION_FLOAT32_COPIES_H_
#define ROPE_ENGINE_ATTENTION_FLOAT32_COPIES_H_

#include <vector>

#include "absl/status/status.h"
#include "core/engine/backend.h"
#include "core/engine/backend_args.h"
#include "core/engine/rope_table.h"

namespace rope {

// The copies `args` points at once RotateIntoFloat32Copies returns; they
// must outlive the backend call.
struct AttentionFloat32Copies {
  std::vector<float> q, k, v;
};

// Copies q, k (and v when set) of `args` to float32, rotates the q and k
// copies by `table` at args->q_positions / args->k_positions, and points
// `args` at the copies: dtype float32, rotary_dim 0, and positions
// `q_index` / `k_index` (the sequence indices the mask compares).
// INVALID_ARGUMENT with tensors outside host memory; RESOURCE_EXHAUSTED when
// the copies cannot be allocated; a backend's Rotate error as it is.
absl::Status RotateIntoFloat32Copies(Backend& backend, const RopeTable& table,
                                     const math::PositionSpec& q_index,
                                     const math::PositionSpec& k_index, AttentionArgs* args,
                                     AttentionFloat32Copies* copies);

}  // namespace rope

#endif  // ROPE_ENGINE_ATTENTION_FLOAT32_COPIES_H_
