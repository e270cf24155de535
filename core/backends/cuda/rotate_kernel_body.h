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

#include "core/backends/cuda/kernel_common.h"
#include "core/engine/rope_math.h"
#include "core/engine/table_rows.h"

namespace rope {
namespace kernels {

// In-place rotation of q [tokens, q_heads, head_dim] and, when k is set,
// k [tokens, k_heads, head_dim] in one launch. Token t of this launch is
// token first_token + t = b * positions.seq + s of the request, whose
// position is positions.At(b, s). `table` finds the float32 cos/sin row of a
// position (half = rotary_dim / 2 values). Features rotary_dim.. are not
// touched. On the device every pointer (explicit positions and the table's
// block pointers included) is device memory.
struct RotateKernelParams {
  void* q = nullptr;
  int q_heads = 0;
  void* k = nullptr;  // optional
  int k_heads = 0;
  int64_t tokens = 0;
  int64_t first_token = 0;
  int head_dim = 0;
  int rotary_dim = 0;
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
ROPE_HOST_DEVICE bool RotateShapeAllowsVectors(int head_dim, int rotary_dim) {
  constexpr int kElems = Vec16<Tag>::kElems;
  constexpr int kPairs = RotatePairsPerItem<Tag, kInterleaved, true>();
  return head_dim % kElems == 0 && (rotary_dim / 2) % kPairs == 0;
}

// Whether a launch over `p` takes the 16-byte path: the shape allows it and
// q (and k) start on 16-byte boundaries.
template <typename Tag, bool kInterleaved>
ROPE_HOST_DEVICE bool RotateUsesVectors(const RotateKernelParams& p) {
  const bool q_aligned = reinterpret_cast<uintptr_t>(p.q) % 16 == 0;
  const bool k_aligned = p.k == nullptr || reinterpret_cast<uintptr_t>(p.k) % 16 == 0;
  return q_aligned && k_aligned &&
         RotateShapeAllowsVectors<Tag, kInterleaved>(p.head_dim, p.rotary_dim);
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

  S* x = head < p.q_heads
             ? static_cast<S*>(p.q) + (token * p.q_heads + head) * p.head_dim
             : static_cast<S*>(p.k) + (token * p.k_heads + (head - p.q_heads)) * p.head_dim;
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

// Rotated float32 copy of a [tokens, heads, head_dim] tensor of storage Tag
// (the attention path's workspaces): out = rotate(in) on the first
// rotary_dim features, the rest widened unchanged. rotary_dim == 0 is a
// plain widening copy (v). Tokens are request tokens b * seq + s.
struct RotatedCopyParams {
  const void* in = nullptr;
  float* out = nullptr;
  int64_t tokens = 0;
  int heads = 0;
  int head_dim = 0;
  int rotary_dim = 0;
  TableRows table;
  math::PositionSpec positions;
};

ROPE_HOST_DEVICE int64_t RotatedCopyItems(const RotatedCopyParams& p) {
  return p.tokens * p.heads * p.head_dim;
}

// One item: one output feature. A rotated feature reads both members of its
// pair and keeps its own half of math::RotatePair's result.
template <typename Tag, bool kInterleaved>
ROPE_HOST_DEVICE void RotatedCopyItem(const RotatedCopyParams& p, int64_t item) {
  using S = typename Tag::Storage;
  const int64_t vec = IndexDiv(item, p.head_dim);  // (token, head)
  const int f = static_cast<int>(item - vec * p.head_dim);
  const S* x = static_cast<const S*>(p.in) + vec * p.head_dim;
  if (f >= p.rotary_dim) {
    p.out[item] = math::Load<Tag>(x + f);
    return;
  }
  const int half = p.rotary_dim / 2;
  const int pair = kInterleaved ? f / 2 : (f < half ? f : f - half);
  const bool second = kInterleaved ? (f & 1) != 0 : f >= half;
  int f0, f1;
  math::PairFeatures(kInterleaved, p.rotary_dim, pair, &f0, &f1);
  const int64_t token = IndexDiv(vec, p.heads);
  const int64_t b = IndexDiv(token, p.positions.seq);
  const int64_t pos = p.positions.At(b, token - b * p.positions.seq);
  float y0, y1;
  math::RotatePair(math::Load<Tag>(x + f0), math::Load<Tag>(x + f1),
                   LoadTable(p.table.Cos(pos) + pair), LoadTable(p.table.Sin(pos) + pair), &y0,
                   &y1);
  p.out[item] = second ? y1 : y0;
}

template <typename Tag, bool kInterleaved>
ROPE_HOST_DEVICE void RotatedCopyKernelBody(const RotatedCopyParams& p, int64_t block, int thread,
                                            int block_dim, int64_t grid_dim) {
  GridStride(RotatedCopyItems(p), block, thread, block_dim, grid_dim,
             [&p](int64_t item) { RotatedCopyItem<Tag, kInterleaved>(p, item); });
}

}  // namespace kernels
}  // namespace rope

#endif  // ROPE_BACKENDS_CUDA_ROTATE_KERNEL_BODY_H_
