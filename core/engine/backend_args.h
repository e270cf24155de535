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

// Scores [batch, q_heads, q_seq, k_seq] float32 of rotated q against rotated
// k, scaled, optionally causally masked (-inf where key position > query
// position) and softmaxed over keys; optional output = softmax(S) v
// [batch, q_seq, q_heads, v_dim]. Query head h reads key/value head
// h / (q_heads / k_heads).
//
// Fully masked rows (every key position after the query position): the
// scores row is all -inf; with softmax, the probabilities row is all 0 and
// the output row is 0 (no NaN), as FlashAttention does.
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
  bool causal = false;
  bool softmax = false;
  float scale = 1.0f;
  float* scores = nullptr;  // [batch, q_heads, q_seq, k_seq]
  float* output = nullptr;  // [batch, q_seq, q_heads, v_dim] when v != null
  // Where q, k, v, scores and output all are (as RotateArgs::memory).
  TensorMemory memory;
  // Polled between pieces of work when set; a backend that sees a non-OK
  // Check() may stop and return that status (outputs then unspecified).
  const Interrupt* interrupt = nullptr;
};

}  // namespace rope

#endif  // ROPE_ENGINE_BACKEND_ARGS_H_
