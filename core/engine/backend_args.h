// The arguments a Backend receives for one call, after the engine has
// validated everything (backend.h): the one form a request takes from the
// engine to the kernels. The CPU kernels read RotateArgs as they are
// (core/backends/cpu/cpu_kernels.h); the CUDA backend derives its device
// parameters from them per chunk.
//
// Framework-free: no absl, protobuf or gRPC type appears here.
#ifndef ROPE_ENGINE_BACKEND_ARGS_H_
#define ROPE_ENGINE_BACKEND_ARGS_H_

#include <cstdint>

#include "core/engine/attention_math.h"
#include "core/engine/dtype.h"
#include "core/engine/rope_math.h"
#include "core/engine/tensor.h"

namespace rope {

class Interrupt;

// Rotate q (and k when non-null) in place. q is [batch, seq, q_heads, head_dim]
// and k is [batch, seq, k_heads, head_dim], both of `dtype`, contiguous.
// Features rotary_offset .. rotary_offset + rotary_dim - 1 of each head
// rotate (rotary_dim 0: none, and the table is not read); the rest pass
// through.
struct RotateArgs {
  DType dtype = DType::kFloat32;
  Layout layout = Layout::kInterleaved;
  bool inverse = false;
  int64_t batch = 0, seq = 0, head_dim = 0, rotary_dim = 0, rotary_offset = 0;
  void* q = nullptr;
  int64_t q_heads = 0;
  void* k = nullptr;  // optional
  int64_t k_heads = 0;
  // When set, q (k) first receive these bytes (the same size, never
  // overlapping them) and are rotated there: a rotation out of place, into
  // an output the caller named. Null: in place.
  const void* q_source = nullptr;
  const void* k_source = nullptr;
  math::PositionSpec positions;
  // Where every tensor of the call is. Device memory is handed only to a
  // backend with device memory of that device (Backend::device_memory()).
  TensorMemory memory;
  // Out of place to float8 (FlashInfer's rope_quantize_fp8), when
  // IsFloat8(output_dtype): q and k (or q_source and k_source) are only
  // read; every feature of q (k), rotated or passed through, times q_scale
  // (k_scale) in float32, is rounded to output_dtype (to nearest even,
  // saturating to the largest finite value, NaN to 0x7f) and written to
  // q_out (k_out), one byte per element in q's (k's) layout. Host memory
  // only: the engine never hands float8 outputs with device tensors.
  DType output_dtype = DType::kFloat32;
  void* q_out = nullptr;
  void* k_out = nullptr;
  float q_scale = 1.0f;
  float k_scale = 1.0f;
};

// Attention of rotated q against rotated k. Query head h reads key/value
// head h / (q_heads / k_heads). The logits of query i and key j are
//   s = scale * (q . k), then softcap * tanh(s / softcap) when softcap > 0,
//   then - alibi_slopes[h] * |q_pos(i) - k_pos(j)| when alibi_slopes is set,
//   -inf where `mask` hides the key (attention_math.h);
// the probabilities are P = exp(s) / (sum over visible keys of exp(s) +
// exp(sinks[h]) when sinks is set), and LSE is the natural log of that
// denominator (-inf for a row that sees no key and has no sink).
//
// What is computed is what has a non-null pointer:
//   scores      [batch, q_heads, q_seq, k_seq]: P with `softmax`, else the logits
//   output      [batch, q_seq, q_heads, v_dim]: P v (needs v)
//   lse         [batch, q_heads, q_seq]
//   top_k_*     [batch, q_heads, q_seq, top_k]: the top_k visible keys by P,
//               ties to the smaller index; index -1 and P 0 past the keys a
//               row sees
//   key_mass    [batch, q_heads, k_seq]: the sum over queries of P
//   score_rows  [batch, q_heads, score_rows_count, k_seq]: rows
//               score_rows_start.. of what `scores` would hold
//
// Fully masked rows: logits all -inf; probabilities all 0 and output 0 (no
// NaN), as FlashAttention does.
//
// `legacy` marks a call with only today's fields (scores, output, causal):
// a backend computes it exactly as before these results existed (full score
// rows, bit for bit the replies clients have); any other call goes through
// the tiled pass that never holds a q_seq x k_seq buffer unless scores (or
// score_rows) are asked.
struct AttentionArgs {
  DType dtype = DType::kFloat32;  // of q, k and v
  Layout layout = Layout::kInterleaved;
  int64_t batch = 0, q_seq = 0, k_seq = 0, q_heads = 0, k_heads = 0;
  // Features rotary_offset .. rotary_offset + rotary_dim - 1 of q and k
  // rotate (rotary_dim 0: none, and the table is not read).
  int64_t head_dim = 0, rotary_dim = 0, rotary_offset = 0, v_dim = 0;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;  // optional
  math::PositionSpec q_positions;
  math::PositionSpec k_positions;
  bool causal = false;  // mirrors mask.causal
  bool softmax = false;
  float scale = 1.0f;
  math::AttentionMask mask;
  float softcap = 0.0f;                  // 0: none
  const float* sinks = nullptr;          // [q_heads] or null
  const float* alibi_slopes = nullptr;   // [q_heads] or null
  bool legacy = true;
  float* scores = nullptr;  // [batch, q_heads, q_seq, k_seq]
  float* output = nullptr;  // [batch, q_seq, q_heads, v_dim]
  float* lse = nullptr;     // [batch, q_heads, q_seq]
  int32_t* top_k_indices = nullptr;  // [batch, q_heads, q_seq, top_k]
  float* top_k_probs = nullptr;      // [batch, q_heads, q_seq, top_k]
  int64_t top_k = 0;
  float* key_mass = nullptr;  // [batch, q_heads, k_seq]
  float* score_rows = nullptr;  // [batch, q_heads, score_rows_count, k_seq]
  int64_t score_rows_start = 0, score_rows_count = 0;
  // Where q, k, v and every result all are (as RotateArgs::memory).
  TensorMemory memory;
  // Polled between pieces of work when set; a backend that sees a non-OK
  // Check() may stop and return that status (outputs then unspecified).
  const Interrupt* interrupt = nullptr;
};

}  // namespace rope

#endif  // ROPE_ENGINE_BACKEND_ARGS_H_
