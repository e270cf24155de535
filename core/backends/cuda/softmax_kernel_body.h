// The per-thread phases of the causal-mask + softmax kernel (the GEMM has
// already applied the scale), as functions of (row, thread, block_dim), and
// the shared-memory tree step of its block reductions. One block handles one
// scores row (one query of one head); its threads stride over the row's
// keys. The device kernel in attention_kernels.cuh runs, per row:
//
//   partial[t] = MaskMaxPhase(...)        ; barrier ; tree max  ; barrier
//   partial[t] = ExpSumPhase(..., max)    ; barrier ; tree sum  ; barrier
//   NormalizePhase(..., sum)
//
// and the host tests run the same phases for every thread in turn, so the
// indexing and the reduction order are the ones the GPU runs.
//
// Fully masked rows (every key after the query): scores stay all -inf and
// the probabilities are all 0 (no NaN), as backend.h documents.
//
// Framework-free; compiles as plain C++ (ROPE_HOST_DEVICE = inline).
#ifndef ROPE_BACKENDS_CUDA_SOFTMAX_KERNEL_BODY_H_
#define ROPE_BACKENDS_CUDA_SOFTMAX_KERNEL_BODY_H_

#include <cstdint>

#if !defined(__CUDA_ARCH__)
#include <cmath>
#include <limits>
#endif

#include "core/backends/cuda/kernel_common.h"
#include "core/engine/rope_math.h"

namespace rope {
namespace kernels {

// scores [batch, heads, q_seq, k_seq] float32, already scaled (by the GEMM),
// rewritten in place: masked entries become -inf; with `softmax` each row
// becomes its probabilities. `probs`, when set (the output needs
// probabilities but the caller asked for raw scores), receives the
// probabilities instead and scores keep the masked raw values. Only rows
// [row_begin, row_end) of the batch * heads * q_seq rows (numbered
// (b * heads + h) * q_seq + i) are touched; row_end -1 means the last row.
struct MaskSoftmaxParams {
  float* scores = nullptr;
  float* probs = nullptr;
  int64_t batch = 0, heads = 0, q_seq = 0, k_seq = 0;
  int64_t row_begin = 0, row_end = -1;
  math::PositionSpec q_positions;
  math::PositionSpec k_positions;
  bool causal = false;
  bool softmax = false;
};

ROPE_HOST_DEVICE float NegativeInfinity() {
#if defined(__CUDA_ARCH__)
  return __int_as_float(0xff800000);
#else
  return -std::numeric_limits<float>::infinity();
#endif
}

ROPE_HOST_DEVICE float DeviceExp(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  return std::exp(x);
#endif
}

// One past the last row to touch.
ROPE_HOST_DEVICE int64_t MaskSoftmaxRowEnd(const MaskSoftmaxParams& p) {
  return p.row_end < 0 ? p.batch * p.heads * p.q_seq : p.row_end;
}

// How many rows are touched: blocks stride over them from row_begin.
ROPE_HOST_DEVICE int64_t MaskSoftmaxRows(const MaskSoftmaxParams& p) {
  return MaskSoftmaxRowEnd(p) - p.row_begin;
}

// Whether the row's probabilities are computed at all.
ROPE_HOST_DEVICE bool NeedsProbabilities(const MaskSoftmaxParams& p) {
  return p.softmax || p.probs != nullptr;
}

// Key j of row `row` is hidden when causal and its position is after the
// query's.
struct RowMask {
  bool causal;
  int64_t b;
  int64_t q_pos;
  ROPE_HOST_DEVICE bool Hidden(const MaskSoftmaxParams& p, int64_t j) const {
    return causal && p.k_positions.At(b, j) > q_pos;
  }
};

ROPE_HOST_DEVICE RowMask MaskOfRow(const MaskSoftmaxParams& p, int64_t row) {
  const int64_t bh = IndexDiv(row, p.q_seq);  // (b, h)
  const int64_t i = row - bh * p.q_seq;
  const int64_t b = IndexDiv(bh, p.heads);
  RowMask m;
  m.causal = p.causal;
  m.b = b;
  m.q_pos = p.causal ? p.q_positions.At(b, i) : 0;
  return m;
}

// Phase 1: writes -inf over hidden keys of the scores row (raw scores are
// what the caller keeps unless softmax) and returns this thread's maximum
// of the visible ones (-inf if none).
ROPE_HOST_DEVICE float MaskMaxPhase(const MaskSoftmaxParams& p, int64_t row, int thread,
                                    int block_dim) {
  const RowMask mask = MaskOfRow(p, row);
  float* s = p.scores + row * p.k_seq;
  float local_max = NegativeInfinity();
  for (int64_t j = thread; j < p.k_seq; j += block_dim) {
    if (mask.Hidden(p, j)) {
      s[j] = NegativeInfinity();
    } else {
      local_max = s[j] > local_max ? s[j] : local_max;
    }
  }
  return local_max;
}

// Phase 2: writes exp(s - row_max) (0 for hidden keys) to the probabilities
// row and returns this thread's sum of them. A fully masked row has
// row_max == -inf and every key hidden: all zeros.
ROPE_HOST_DEVICE float ExpSumPhase(const MaskSoftmaxParams& p, int64_t row, int thread,
                                   int block_dim, float row_max) {
  const RowMask mask = MaskOfRow(p, row);
  const float* s = p.scores + row * p.k_seq;
  float* out = (p.probs != nullptr ? p.probs : p.scores) + row * p.k_seq;
  float local_sum = 0.0f;
  for (int64_t j = thread; j < p.k_seq; j += block_dim) {
    const float e = mask.Hidden(p, j) ? 0.0f : DeviceExp(s[j] - row_max);
    out[j] = e;
    local_sum += e;
  }
  return local_sum;
}

// Phase 3: divides the probabilities row by its sum (a zero sum, a fully
// masked row, leaves the zeros).
ROPE_HOST_DEVICE void NormalizePhase(const MaskSoftmaxParams& p, int64_t row, int thread,
                                     int block_dim, float row_sum) {
  float* out = (p.probs != nullptr ? p.probs : p.scores) + row * p.k_seq;
  const float inv = row_sum > 0.0f ? 1.0f / row_sum : 0.0f;
  for (int64_t j = thread; j < p.k_seq; j += block_dim) out[j] *= inv;
}

// One step of the block's tree reduction over partial[0, 2 * stride):
// thread t < stride combines its value with partial[t + stride]. The caller
// runs strides block_dim/2, block_dim/4, .., 1 (block_dim a power of two)
// with a barrier after each; partial[0] is the result.
ROPE_HOST_DEVICE void TreeMaxStep(float* partial, int thread, int stride) {
  if (thread < stride) {
    const float other = partial[thread + stride];
    partial[thread] = other > partial[thread] ? other : partial[thread];
  }
}

ROPE_HOST_DEVICE void TreeSumStep(float* partial, int thread, int stride) {
  if (thread < stride) partial[thread] += partial[thread + stride];
}

// Threads per block for rows of k_seq keys: a power of two in [32, 256],
// about one key per thread for short rows.
inline int MaskSoftmaxBlockDim(int64_t k_seq) {
  int threads = 32;
  while (threads < 256 && threads < k_seq) threads *= 2;
  return threads;
}

}  // namespace kernels
}  // namespace rope

#endif  // ROPE_BACKENDS_CUDA_SOFTMAX_KERNEL_BODY_H_
