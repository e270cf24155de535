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
#include "core/engine/backend.h"
#include "core/engine/engine.h"

namespace rope {

// Fractional positions of one tensor, validated: `rows` rows (S shared by
// every batch row, or B*S), each with `axes` values (3 with M-RoPE, the
// axial axes, else 1) at values[axis * rows + row].
struct FractionalPositions {
  const double* values = nullptr;  // null: the tensor has none
  int64_t rows = 0;
  int axes = 1;
  double max = 0;  // the largest value
};

// A validated rotate request. With one position per token (plain RoPE, or
// M-RoPE / axial without explicit positions, which puts every axis at
// start_pos + s) args is complete. With several positions per token,
// args.positions is left unset: row r of the per-request table takes
// frequency i from position axis_positions[axis(i) * axis_rows + r], and the
// rows are the tokens in order (axis_rows = S shared by every batch row, or
// B*S). With fractional positions, args.positions is left unset likewise and
// `fractional` holds them.
struct ResolvedRotate {
  RotateArgs args;
  const int64_t* axis_positions = nullptr;
  int64_t axis_rows = 0;
  FractionalPositions fractional;
  // The largest position the request uses (fractional: rounded up).
  int64_t max_position = 0;
};

// Resolves a rotate request against `config`, the explicit form of
// params.config (Engine::ExplicitConfig). The result points into `params`
// (tensors and the positions vector), which must outlive it.
// Table-independent: positions are checked against config.max_len, every
// M-RoPE or axial row included (OUT_OF_RANGE naming axis, batch row, token
// and value); fractional positions must also be finite (INVALID_ARGUMENT).
absl::StatusOr<ResolvedRotate> ResolveRotate(const RotateParams& params, const RopeConfig& config,
                                             const EngineLimits& limits);

// With fractional positions for q (k), args.q_positions (k_positions) are
// left start-based and q_fractional (k_fractional) hold them.
struct ResolvedAttention {
  AttentionArgs args;  // result pointers left null for the caller
  FractionalPositions q_fractional;
  FractionalPositions k_fractional;
  // The results to compute: params.results, or the default set (SCORES, and
  // OUTPUT with v) when it is empty.
  bool Wants(AttentionResult result) const {
    return (wanted & (1u << static_cast<int>(result))) != 0;
  }
  uint32_t wanted = 0;
  // Shapes of the results computed (empty for the others).
  std::vector<int64_t> scores_shape;      // [B, Hq, Sq, Sk]
  std::vector<int64_t> output_shape;      // [B, Sq, Hq, Dv]
  std::vector<int64_t> lse_shape;         // [B, Hq, Sq]
  std::vector<int64_t> top_k_shape;       // [B, Hq, Sq, top_k]
  std::vector<int64_t> key_mass_shape;    // [B, Hq, Sk]
  std::vector<int64_t> score_rows_shape;  // [B, Hq, count, Sk]
  int64_t max_position = 0;  // the largest integer position of q or k
};

// `config` is the explicit form of params.config. Start positions (and
// explicit q_positions / k_positions) put every M-RoPE axis at the token's
// one position, which is plain RoPE; axial configs take start positions or
// fractional ones. Beside fractional positions, masks and ALiBi compare
// sequence indices (start + s). The result
// points into `params` (tensors, positions, sinks, slopes), which must
// outlive it.
absl::StatusOr<ResolvedAttention> ResolveAttention(const AttentionParams& params,
                                                   const RopeConfig& config,
                                                   const EngineLimits& limits);

}  // namespace rope

#endif  // ROPE_ENGINE_VALIDATION_H_
