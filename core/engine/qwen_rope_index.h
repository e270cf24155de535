// Qwen2-VL / Qwen2.5-VL / Qwen3-VL M-RoPE positions from a token sequence:
// transformers' get_rope_index (the 4.5x releases: the sequence is scanned
// for vision_start_token_id, and the token after it, image_token_id or
// video_token_id, says which grid comes next), written from its semantics:
//
//   per batch row, over the tokens whose attention_mask is 1 (all without a
//   mask): text runs get equal positions on the three axes, counting on
//   from the previous block's largest position + 1; a vision block of grid
//   (t, h, w) gets (t_index, h_index, w_index) + text_len + st_idx with
//   h' = h / m and w' = w / m tokens (m = spatial_merge_size) and
//     Qwen2-VL:   t_index = frame k
//     Qwen2.5-VL: t_index = int64(k * second_per_grid_t * tokens_per_second)
//                 for videos (second_per_grid_t 1 when not given), 0 for
//                 images
//     Qwen3-VL:   every video split into t grids of one frame (timestamps
//                 separate them in the text), t_index 0;
//   masked-out tokens get 1, and rope_delta = largest position + 1 - S.
//   Without grids: positions count the mask's ones from 0 (cumsum - 1,
//   masked-out tokens 1), or 0 .. S-1 without a mask.
//
// With request.layout kTransformers5, transformers 5.x's get_rope_index
// (which reads the processor's mm_token_type_ids; here derived from
// input_ids as the processor derives them: image_token_id 1,
// video_token_id 2, else 0):
//
//   each run of image (video) tokens is one grid and must have its
//   t * h' * w' tokens; its positions are (int64(k * interval), h_index,
//   w_index) + current, interval tokens_per_second * second_per_grid_t
//   for Qwen2.5-VL's videos and 1 otherwise; current (from 0) moves on by
//   a text run's length, and by max(h', w') after a vision run whatever its
//   temporal positions; masked-out tokens get 0, and rope_delta = largest
//   position + 1 - the row's unmasked tokens. Without grids: cumsum - 1
//   (masked-out tokens 0), rope_delta 0.
//
// Grids are consumed in order across batch rows, as transformers does.
#ifndef ROPE_ENGINE_QWEN_ROPE_INDEX_H_
#define ROPE_ENGINE_QWEN_ROPE_INDEX_H_

#include "absl/status/statusor.h"
#include "core/engine/position_builder.h"

namespace rope {

// The Qwen forms of BuildPositions (position_builder.h): get_rope_index, or
// the decode positions when request.rope_deltas is set. Three axes,
// B * S rows. `interrupt` (may be null) as BuildPositions'.
absl::StatusOr<BuiltPositions> QwenRopeIndex(const PositionsRequest& request, int64_t max_values,
                                             const Interrupt* interrupt = nullptr);

}  // namespace rope

#endif  // ROPE_ENGINE_QWEN_ROPE_INDEX_H_
