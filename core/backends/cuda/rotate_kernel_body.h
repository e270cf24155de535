// The per-thread bodies of the rotation kernels, as functions of the launch
// indices (block, thread, block_dim, grid_dim). The CUDA kernels in
// rotate_kernel.cuh call them with blockIdx/threadIdx; the host tests in
// tests/cuda/ call them for every (block, thread) of the same grid and
// compare with the CPU backend, which catches indexing and layout bugs
// without a GPU. The arithmetic is math::RotatePair, as on the CPU, so that
// (with FMA contraction off) both backends give the same bits.
//
// Framework-free; compiles as plain C++ (ROPE_HOST_DEVICE = inline).
#ifndef ROPE_BACKENDS_CUDA_ROTATE_KERNEL_BODY_H_
#define ROPE_BACKENDS_CUDA_ROTATE_KERNEL_BODY_H_

#include <cstdint>

#include "common/float8.h"
#include "core/backends/cuda/kernel_common.h"
#include "core/engine/rope_math.h"
#include "core/engine/table_rows.h"

namespace rope {
namespace kernels {

// In-place rotation of q [tokens, q_heads, head_dim] and, when k is set,
// k [tokens, k_heads, head_dim] in one launch. Token t of this launch is
// token first_token + t = b * positions.seq + s of the request, whose
// position is positions.At(b, s). `table` finds the float32 cos/sin row of a
// position (half = rotary_dim / 2 values). Features rotary_offset ..
// rotary_offset + rotary_dim - 1 rotate; the others are not touched. On the
// device every pointer (explicit positions and the table's block pointers
// included) is device memory.
struct RotateKernelParams {
  void* q = nullptr;
  int q_heads = 0;
  void* k = nullptr;  // optional
  int k_heads = 0;
  int64_t tokens = 0;
  int64_t first_token = 0;
  int head_dim = 0;
  int rotary_dim = 0;
  int rotary_offset = 0;
  TableRows table;
  math::PositionSpec positions;
  bool inverse = false;
};

// Pairs one thread rotates per item: with 16-byte accesses, one vector of
// the interleaved pairs (kElems / 2 pairs) or one vector of each half
// (kElems pairs); otherwise a single pair.
template <typename Tag, bool kInterleaved, bool kVector>
ROPE_HOST_DEVICE constexpr int RotatePairsPerItem() {
  return kVector ? (kInterleaved ? Vec16<Tag>::kElems / 2 : Vec16<Tag>::kElems) : 1;
}

// Items (thread iterations) of one launch.
template <typename Tag, bool kInterleaved, bool kVector>
ROPE_HOST_DEVICE int64_t RotateItems(const RotateKernelParams& p) {
  const int heads = p.q_heads + (p.k != nullptr ? p.k_heads : 0);
  const int groups = p.rotary_dim / 2 / RotatePairsPerItem<Tag, kInterleaved, kVector>();
  return p.tokens * heads * groups;
}

// Whether the 16-byte path may run: every vector access stays inside one
// head's rotary features and lands on a 16-byte boundary. Pointers are
// checked by the launcher (they are only known there).
template <typename Tag, bool kInterleaved>
ROPE_HOST_DEVICE bool RotateShapeAllowsVectors(int head_dim, int rotary_dim, int rotary_offset) {
  constexpr int kElems = Vec16<Tag>::kElems;
  constexpr int kPairs = RotatePairsPerItem<Tag, kInterleaved, true>();
  return head_dim % kElems == 0 && rotary_offset % kElems == 0 &&
         (rotary_dim / 2) % kPairs == 0;
}

// Whether a launch over `p` takes the 16-byte path: the shape allows it and
// q (and k) start on 16-byte boundaries.
template <typename Tag, bool kInterleaved>
ROPE_HOST_DEVICE bool RotateUsesVectors(const RotateKernelParams& p) {
  const bool q_aligned = reinterpret_cast<uintptr_t>(p.q) % 16 == 0;
  const bool k_aligned = p.k == nullptr || reinterpret_cast<uintptr_t>(p.k) % 16 == 0;
  return q_aligned && k_aligned &&
         RotateShapeAllowsVectors<Tag, kInterleaved>(p.head_dim, p.rotary_dim, p.rotary_offset);
}

// One item: kPairs pairs of one head of one token. Items are ordered
// (token, head, pair group) with the group fastest, so that consecutive
// threads touch consecutive bytes; q heads come before k heads.
template <typename Tag, bool kInterleaved, bool kVector>
ROPE_HOST_DEVICE void RotateItem(const RotateKernelParams& p, int64_t item) {
  using S = typename Tag::Storage;
  constexpr int kPairs = RotatePairsPerItem<Tag, kInterleaved, kVector>();
  const int half = p.rotary_dim / 2;
  const int groups = half / kPairs;
  const int heads = p.q_heads + (p.k != nullptr ? p.k_heads : 0);
  const int64_t per_token = static_cast<int64_t>(heads) * groups;
  const int64_t token = IndexDiv(item, per_token);
  const int rest = static_cast<int>(item - token * per_token);
  const int head = static_cast<int>(IndexDiv(rest, groups));
  const int group = rest - head * groups;

  S* x = (head < p.q_heads
               ? static_cast<S*>(p.q) + (token * p.q_heads + head) * p.head_dim
               : static_cast<S*>(p.k) + (token * p.k_heads + (head - p.q_heads)) * p.head_dim) +
         p.rotary_offset;
  const int64_t t = p.first_token + token;
  const int64_t b = IndexDiv(t, p.positions.seq);
  const int64_t pos = p.positions.At(b, t - b * p.positions.seq);
  const int first_pair = group * kPairs;
  const float* cos_row = p.table.Cos(pos) + first_pair;
  const float* sin_row = p.table.Sin(pos) + first_pair;
  const float sign = p.inverse ? -1.0f : 1.0f;

  float x0[kPairs], x1[kPairs];
  if constexpr (kInterleaved) {
    // Pairs (2i, 2i+1) for i in [first_pair, first_pair + kPairs): one run
    // of 2 * kPairs features.
    float v[2 * kPairs];
    LoadFloats<Tag, 2 * kPairs, kVector>(x + 2 * first_pair, v);
    ROPE_UNROLL
    for (int j = 0; j < kPairs; ++j) {
      math::RotatePair(v[2 * j], v[2 * j + 1], LoadTable(cos_row + j),
                       sign * LoadTable(sin_row + j), &x0[j], &x1[j]);
      v[2 * j] = x0[j];
      v[2 * j + 1] = x1[j];
    }
    StoreFloats<Tag, 2 * kPairs, kVector>(x + 2 * first_pair, v);
  } else {
    // Pairs (i, i + half): a run of kPairs features in each half.
    LoadFloats<Tag, kPairs, kVector>(x + first_pair, x0);
    LoadFloats<Tag, kPairs, kVector>(x + half + first_pair, x1);
    ROPE_UNROLL
    for (int j = 0; j < kPairs; ++j) {
      math::RotatePair(x0[j], x1[j], LoadTable(cos_row + j), sign * LoadTable(sin_row + j), &x0[j],
                       &x1[j]);
    }
    StoreFloats<Tag, kPairs, kVector>(x + first_pair, x0);
    StoreFloats<Tag, kPairs, kVector>(x + half + first_pair, x1);
  }
}

// The whole per-thread body of the rotate kernel.
template <typename Tag, bool kInterleaved, bool kVector>
ROPE_HOST_DEVICE void RotateKernelBody(const RotateKernelParams& p, int64_t block, int thread,
                                       int block_dim, int64_t grid_dim) {
  GridStride(RotateItems<Tag, kInterleaved, kVector>(p), block, thread, block_dim, grid_dim,
             [&p](int64_t item) { RotateItem<Tag, kInterleaved, kVector>(p, item); });
}

// Feature f of the head vector x (storage Tag) of a token at `pos`, rotated:
// features rotary_offset .. rotary_offset + rotary_dim - 1 read both members
// of their pair and keep their own half of math::RotatePair's result (with
// sign -1 the inverse rotation), the others are x[f] widened.
template <typename Tag, bool kInterleaved>
ROPE_HOST_DEVICE float RotatedFeature(const typename Tag::Storage* x, int f, int rotary_offset,
                                      int rotary_dim, const TableRows& table, int64_t pos,
                                      float sign) {
  const int r = f - rotary_offset;
  if (r < 0 || r >= rotary_dim) return math::Load<Tag>(x + f);
  const int half = rotary_dim / 2;
  const int pair = kInterleaved ? r / 2 : (r < half ? r : r - half);
  const bool second = kInterleaved ? (r & 1) != 0 : r >= half;
  int f0, f1;
  math::PairFeatures(kInterleaved, rotary_dim, pair, &f0, &f1);
  const typename Tag::Storage* rotated = x + rotary_offset;
  float y0, y1;
  math::RotatePair(math::Load<Tag>(rotated + f0), math::Load<Tag>(rotated + f1),
                   LoadTable(table.Cos(pos) + pair), sign * LoadTable(table.Sin(pos) + pair), &y0,
                   &y1);
  return second ? y1 : y0;
}

// Rotated float32 copy of a [tokens, heads, head_dim] tensor of storage Tag
// (the attention path's workspaces): out = rotate(in) on features
// rotary_offset .. rotary_offset + rotary_dim - 1, the rest widened
// unchanged. rotary_dim == 0 is a plain widening copy (v, a NoPE layer).
// Tokens are request tokens b * seq + s.
struct RotatedCopyParams {
  const void* in = nullptr;
  float* out = nullptr;
  int64_t tokens = 0;
  int heads = 0;
  int head_dim = 0;
  int rotary_dim = 0;
  int rotary_offset = 0;
  TableRows table;
  math::PositionSpec positions;
};

ROPE_HOST_DEVICE int64_t RotatedCopyItems(const RotatedCopyParams& p) {
  return p.tokens * p.heads * p.head_dim;
}

// One item: one output feature.
template <typename Tag, bool kInterleaved>
ROPE_HOST_DEVICE void RotatedCopyItem(const RotatedCopyParams& p, int64_t item) {
  using S = typename Tag::Storage;
  const int64_t vec = IndexDiv(item, p.head_dim);  // (token, head)
  const int f = static_cast<int>(item - vec * p.head_dim);
  const S* x = static_cast<const S*>(p.in) + vec * p.head_dim;
  const int r = f - p.rotary_offset;
  if (r < 0 || r >= p.rotary_dim) {  // no table row to read
    p.out[item] = math::Load<Tag>(x + f);
    return;
  }
  const int64_t token = IndexDiv(vec, p.heads);
  const int64_t b = IndexDiv(token, p.positions.seq);
  const int64_t pos = p.positions.At(b, token - b * p.positions.seq);
  p.out[item] = RotatedFeature<Tag, kInterleaved>(x, f, p.rotary_offset, p.rotary_dim, p.table,
                                                  pos, 1.0f);
}

template <typename Tag, bool kInterleaved>
ROPE_HOST_DEVICE void RotatedCopyKernelBody(const RotatedCopyParams& p, int64_t block, int thread,
                                            int block_dim, int64_t grid_dim) {
  GridStride(RotatedCopyItems(p), block, thread, block_dim, grid_dim,
             [&p](int64_t item) { RotatedCopyItem<Tag, kInterleaved>(p, item); });
}

// Rotation into float8 (FlashInfer's rope_quantize_fp8): q [tokens,
// q_heads, head_dim] and, when k is set, k [tokens, k_heads, head_dim] of
// storage Tag are read; every feature, rotated (features rotary_offset ..
// rotary_offset + rotary_dim - 1, forward or inverse) or passed through,
// times q_scale (k_scale) in float32, is rounded to float8 (e5m2 or e4m3fn,
// common/float8.h) into q_out (k_out) at the same index. Token t of this
// launch is request token first_token + t; rotary_dim 0 converts only.
struct RotateFloat8Params {
  const void* q = nullptr;
  uint8_t* q_out = nullptr;
  int q_heads = 0;
  float q_scale = 1.0f;
  const void* k = nullptr;  // optional
  uint8_t* k_out = nullptr;
  int k_heads = 0;
  float k_scale = 1.0f;
  int64_t tokens = 0;
  int64_t first_token = 0;
  int head_dim = 0;
  int rotary_dim = 0;
  int rotary_offset = 0;
  TableRows table;
  math::PositionSpec positions;
  bool inverse = false;
  bool e5m2 = false;
};

// Items of one launch: one per output element, q's before k's.
ROPE_HOST_DEVICE int64_t RotateFloat8Items(const RotateFloat8Params& p) {
  return p.tokens * (p.q_heads + (p.k != nullptr ? p.k_heads : 0)) * p.head_dim;
}

template <typename Tag, bool kInterleaved>
ROPE_HOST_DEVICE void RotateFloat8Item(const RotateFloat8Params& p, int64_t item) {
  using S = typename Tag::Storage;
  const int64_t q_items = p.tokens * p.q_heads * p.head_dim;
  const bool is_q = item < q_items;
  const int64_t index = is_q ? item : item - q_items;  // element of q or k
  const int heads = is_q ? p.q_heads : p.k_heads;
  const int64_t vec = IndexDiv(index, p.head_dim);  // (token, head)
  const int f = static_cast<int>(index - vec * p.head_dim);
  const S* x = static_cast<const S*>(is_q ? p.q : p.k) + vec * p.head_dim;
  float value;
  const int r = f - p.rotary_offset;
  if (r < 0 || r >= p.rotary_dim) {  // no table row to read
    value = math::Load<Tag>(x + f);
  } else {
    const int64_t t = p.first_token + IndexDiv(vec, heads);
    const int64_t b = IndexDiv(t, p.positions.seq);
    const int64_t pos = p.positions.At(b, t - b * p.positions.seq);
    value = RotatedFeature<Tag, kInterleaved>(x, f, p.rotary_offset, p.rotary_dim, p.table, pos,
                                              p.inverse ? -1.0f : 1.0f);
  }
  const math::Float8Format fmt = p.e5m2 ? math::Float8E5M2() : math::Float8E4M3();
  (is_q ? p.q_out : p.k_out)[index] =
      math::FloatToFloat8(value * (is_q ? p.q_scale : p.k_scale), fmt);
}

template <typename Tag, bool kInterleaved>
ROPE_HOST_DEVICE void RotateFloat8KernelBody(const RotateFloat8Params& p, int64_t block,
                                             int thread, int block_dim, int64_t grid_dim) {
  GridStride(RotateFloat8Items(p), block, thread, block_dim, grid_dim,
             [&p](int64_t item) { RotateFloat8Item<Tag, kInterleaved>(p, item); });
}

}  // namespace kernels
}  // namespace rope

#endif  // ROPE_BACKENDS_CUDA_ROTATE_KERNEL_BODY_H_
