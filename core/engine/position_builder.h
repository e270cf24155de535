// Positions built on the server (the BuildPositions RPC, and Rotate when a
// request gives the grids instead of positions), so that clients need not
// re-implement them:
//
//   - Qwen2-VL / Qwen2.5-VL / Qwen3-VL M-RoPE positions from the token
//     sequence: transformers' get_rope_index (the 4.5x form, which scans
//     input_ids for vision_start_token_id followed by image_token_id or
//     video_token_id), and the decode positions that follow it
//     (position + rope_delta);
//   - axial grids: a sequence of blocks of tokens laid out on a grid
//     (Flux's text and image ids, Wan's and HunyuanVideo's video latents,
//     SAM 2's and Llama 4's patch grids), each position start + k * step.
//
// Transport-free: plain structs in and out; config.json text is read with
// nlohmann-json as hf_config.h reads it. Thread-safe (no state).
#ifndef ROPE_ENGINE_POSITION_BUILDER_H_
#define ROPE_ENGINE_POSITION_BUILDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/engine/interrupt.h"

namespace rope {

// One block of tokens on a grid. Tokens are in row-major order over `size`
// (the last dimension fastest, as a tensor [size[0], size[1], ...] is laid
// out); the token at index (k_0, .., k_{n-1}) sits at
//   position on RoPE axis rope_axis[d] = start[d] + k_d * step[d].
// Flux's image ids are a grid [1, H, W]; its text ids (all zero) a grid
// [L, 1, 1] with step [0, 0, 0]; SAM 2's and Llama 4's patches a grid
// [rows, cols] with rope_axis [1, 0] (x, the column, is their first axis).
struct PositionGrid {
  std::vector<int64_t> size;        // one per dimension, each > 0
  std::vector<double> start;        // empty: 0 on every dimension
  std::vector<double> step;         // empty: 1 on every dimension
  std::vector<uint32_t> rope_axis;  // empty: dimension d is axis d; else a permutation
};

struct PositionsRequest {
  // Qwen2-VL family: the model's config.json (model_type, image_token_id,
  // video_token_id, vision_start_token_id, vision_config.spatial_merge_size
  // and, for Qwen2.5-VL, vision_config.tokens_per_second).
  std::string hf_config_json;
  std::vector<int64_t> input_ids;       // B * S, row-major [B, S]
  std::vector<int64_t> attention_mask;  // empty, or B * S values, each 0 or 1
  std::vector<int64_t> image_grid_thw;  // 3 per image (t, h, w, in patches)
  std::vector<int64_t> video_grid_thw;  // 3 per video
  std::vector<double> second_per_grid_ts;  // Qwen2.5-VL: empty, or one per video
  int64_t batch = 0;                       // B; 0 means 1
  // Decode: instead of get_rope_index, the positions that follow it:
  // cache_position + s + rope_deltas[b] on every axis, for the S new
  // tokens of each row (input_ids gives B * S; their values are unused).
  std::vector<int64_t> rope_deltas;
  int64_t cache_position = 0;
  // Which transformers release's get_rope_index the Qwen forms follow
  // (rope.proto's RopeIndexLayout, same values, says how the two differ);
  // kDefault is kTransformers4. Any other value is refused.
  enum class Layout : int32_t { kDefault = 0, kTransformers4 = 1, kTransformers5 = 2 };
  Layout layout = Layout::kDefault;
  // Axial: the grids, in sequence order (instead of everything above).
  std::vector<PositionGrid> grids;
};

// Positions [axis][row] with `rows` rows per axis: B * S rows ([b][s]) from
// the Qwen forms, the grids' total token count from the grid form (shared
// by every batch row). `positions` holds them when every value is an
// integer, else `fractional_positions` does (and `positions` is empty).
struct BuiltPositions {
  int axes = 0;
  int64_t rows = 0;
  std::vector<int64_t> positions;
  std::vector<double> fractional_positions;
  std::vector<int64_t> rope_deltas;  // Qwen forms: B values
};

// Builds the positions `request` describes, producing at most
// `max_values` values (axes * rows). INVALID_ARGUMENT naming the field and
// value for: both forms or neither, a config.json that is not a Qwen2-VL,
// Qwen2.5-VL or Qwen3-VL one or lacks a key, input_ids not a multiple of
// batch, a mask of another length or with values other than 0 and 1, a grid
// with a dimension < 1, a token sequence whose vision tokens do not match
// the grids (where transformers' get_rope_index raises), rope_deltas not B
// values, grids of different ranks, a start or step that is not finite, a
// rope_axis that is not a permutation. RESOURCE_EXHAUSTED when the
// positions would be more than max_values values. `interrupt` (may be null)
// is polled while a config.json is parsed: CANCELLED or DEADLINE_EXCEEDED.
absl::StatusOr<BuiltPositions> BuildPositions(const PositionsRequest& request,
                                              int64_t max_values,
                                              const Interrupt* interrupt = nullptr);

}  // namespace rope

#endif  // ROPE_ENGINE_POSITION_BUILDER_H_
