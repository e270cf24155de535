// skinny_rotated_logits of cpu_kernels.h for one target: the decode's
// logits against keys rotated as they are read, one key head at a time into
// a head-sized buffer that stays in L1, rather than a key tile rotated into
// memory first (32 keys x 8 heads x 128 floats: 128 KiB that went to L2
// and came back for the products). Included once per target by
// cpu_kernels.cc, after rotate_simd-inl.h (widening, table rows, rotation)
// and attention_tile_simd-inl.h (the products). It calls exactly what
// rotate_copy and skinny_logits call, in the same order per key, so every
// logit has the same bits as theirs on every target.

#if defined(ROPE_BACKENDS_CPU_ROTATED_LOGITS_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ROPE_BACKENDS_CPU_ROTATED_LOGITS_SIMD_INL_H_
#undef ROPE_BACKENDS_CPU_ROTATED_LOGITS_SIMD_INL_H_
#else
#define ROPE_BACKENDS_CPU_ROTATED_LOGITS_SIMD_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace rope {
namespace cpu {
namespace HWY_NAMESPACE {

template <class Io, bool kInterleaved>
void RotatedLogitsOf(const RotatedKeysParams& p) {
  using T = typename Io::T;
  RowScratch table_row(p.rotary_dim);
  RowScratch key((p.head_dim + 1) / 2);  // 2 * ceil(head_dim / 2) floats
  float* const rotated = key.data();
  for (int64_t j = 0; j < p.n; ++j) {
    TokenRow row{};
    if (p.rotary_dim > 0) {
      const int64_t pos = p.positions[j];
      row = PrepareRow<F32Io, kInterleaved>(p.table.Cos(pos), p.table.Sin(pos), false,
                                            p.rotary_dim, table_row.data());
    }
    const T* src = static_cast<const T*>(p.k) + j * p.k_token_stride;
    if (p.prefetch != nullptr) {
      const char* bytes = static_cast<const char*>(p.prefetch) + j * p.prefetch_token_stride;
      for (int64_t at = 0; at < p.prefetch_bytes; at += kCacheLine) hwy::Prefetch(bytes + at);
    }
    int64_t head = -1;  // the head in `rotated`
    for (int64_t i = 0; i < p.set_count; ++i) {
      const SkinnyQuerySet& set = p.sets[i];
      if (set.head != head) {
        head = set.head;
        WidenRow<Io>(src + head * p.head_dim, p.head_dim, rotated);
        if (p.rotary_dim > 0) {
          RotateHeads<F32Io, kInterleaved>(rotated + p.rotary_offset, 1, p.head_dim,
                                           p.rotary_dim, row);
        }
      }
      LogitsOfKey(set.q, set.m, rotated, p.head_dim, p.scale, set.s + j, p.n);
    }
  }
}

void SkinnyRotatedLogits(const RotatedKeysParams& p) {
  switch (p.dtype) {
    case DType::kFloat32:
      return p.interleaved ? RotatedLogitsOf<F32Io, true>(p) : RotatedLogitsOf<F32Io, false>(p);
    case DType::kFloat16:
      return p.interleaved ? RotatedLogitsOf<F16Io, true>(p) : RotatedLogitsOf<F16Io, false>(p);
    case DType::kBFloat16:
      return p.interleaved ? RotatedLogitsOf<Bf16Io, true>(p) : RotatedLogitsOf<Bf16Io, false>(p);
    case DType::kFloat8E4M3:
    case DType::kFloat8E5M2:
      return;  // never handed: float8 is an output type only
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace rope
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
