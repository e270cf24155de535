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

// A validated rotate request. Without M-RoPE (or with it but no explicit
// positions, which puts every axis at start_pos + s) args is complete.
// With M-RoPE positions, args.positions is left unset: row r of the
// per-request table (RopeTable::Gather) takes frequency i from position
// mrope_positions[axis(i) * mrope_rows + r], and the rows are the tokens in
// order (mrope_rows = S shared by every batch row, or B*S).
struct ResolvedRotate {
  RotateArgs args;
  const int64_t* mrope_positions = nullptr;
  int64_t mrope_rows = 0;
  int64_t max_position = 0;  // the largest position the request uses
};

// Resolves a rotate request against `config`, the explicit form of
// params.config (Engine::ExplicitConfig). The result points into `params`
// (tensors and the positions vector), which must outlive it.
// Table-independent: positions are checked against config.max_len, every
// M-RoPE row included (OUT_OF_RANGE naming axis, batch row, token and value).
absl::StatusOr<ResolvedRotate> ResolveRotate(const RotateParams& params, const RopeConfig& config,
                                             const EngineLimits& limits);

struct ResolvedAttention {
  AttentionArgs args;  // result pointers left null for the caller
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
  int64_t max_position = 0;  // the largest position of q or k
};

// `config` is the explicit form of params.config. M-RoPE configs put every
// axis at the token's one position, which is plain RoPE. The result points
// into `params` (tensors, positions, sinks, slopes), which must outlive it.
absl::StatusOr<ResolvedAttention> ResolveAttention(const AttentionParams& params,
                                                   const RopeConfig& config,
                                                   const EngineLimits& limits);

}  // namespace rope

#endif  // ROPE_ENGINE_VALIDATION_H_
