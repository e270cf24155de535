// skinny_rotated_logits of cpu_kernels.h for one target: the decode's
// logits against keys rotated as they are read, in registers (heads rotated
// whole) or one key head at a time in a head-sized buffer that stays in L1,
// rather than a key tile rotated into memory first (64 keys x 8 heads x 128
// floats would be 256 KiB: out of L1, stored, then loaded again by the
// products, extra work in a pass bound by its instructions). Included once
// per target by cpu_kernels.cc, after rotate_simd-inl.h (widening, table
// rows, rotation) and attention_tile_simd-inl.h (the products). Each
// rotated feature comes from the same operations as rotate_copy's, and the
// products add in skinny_logits' order, so every logit has the same bits
// as theirs on every target.

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

// dst[0, head_dim) = src's head widened, features [offset, offset +
// rotary_dim) rotated by `row` (PrepareRow<F32Io, kInterleaved>'s form):
// what WidenRow then RotateHeads<F32Io, kInterleaved> make, with the same
// operations per feature. Whole vector blocks of the rotated features go
// from the stored values to the rotated ones in registers; the rest is
// widened first and rotated in place by RotateHeads' own remainder loops.
template <class Io, bool kInterleaved>
HWY_INLINE void WidenRotateHead(const typename Io::T* src, int64_t head_dim, int64_t rotary_dim,
                                int64_t offset, const TokenRow& row, float* dst) {
  const IoF<F32Io> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t half = rotary_dim / 2;
  const typename Io::T* x = src + offset;
  float* y = dst + offset;
  int64_t done = 0;  // interleaved: features; half: pairs
  if constexpr (kInterleaved) {
    if (N >= 2) {  // HWY_SCALAR: a pair needs two lanes
      for (; done + N <= rotary_dim; done += N) {
        const auto xv = Io::Load(df, x + done);
        const auto cv = hn::LoadU(df, row.vc + done);
        const auto sv = hn::LoadU(df, row.vs + done);
        hn::StoreU(hn::Add(hn::Mul(xv, cv), hn::Mul(hn::Reverse2(df, xv), sv)), df, y + done);
      }
    }
    WidenRow<Io>(x + done, rotary_dim - done, y + done);
  } else {
    for (; done + N <= half; done += N) {
      const auto x0 = Io::Load(df, x + done);
      const auto x1 = Io::Load(df, x + half + done);
      const auto cv = hn::LoadU(df, row.vc + done);
      const auto sv = hn::LoadU(df, row.vs + done);
      hn::StoreU(hn::Sub(hn::Mul(x0, cv), hn::Mul(x1, sv)), df, y + done);
      hn::StoreU(hn::Add(hn::Mul(x0, sv), hn::Mul(x1, cv)), df, y + half + done);
    }
    WidenRow<Io>(x + done, half - done, y + done);
    WidenRow<Io>(x + half + done, rotary_dim - half - done, y + half + done);
  }
  WidenRow<Io>(src, offset, dst);
  WidenRow<Io>(x + rotary_dim, head_dim - offset - rotary_dim, y + rotary_dim);
  // The remainder, in place, as RotateHeads<F32Io, kInterleaved> finishes.
  int64_t pairs_done;
  if constexpr (kInterleaved) {
    pairs_done = InterleavedOrdered<F32Io>(QuadF(), y, 1, head_dim, done, rotary_dim, row.vc,
                                           row.vs) / 2;
  } else {
    pairs_done = HalfOrdered<F32Io>(QuadF(), y, 1, head_dim, done, half, row.vc, row.vs);
  }
  if (pairs_done < half) ScalarPairs<F32Io, kInterleaved>(y, pairs_done, rotary_dim, row);
}

// Whether RotateDotBlock serves heads of head_dim features, all rotated
// (rotary_dim == head_dim, no offset): whole 16-lane blocks, at most 4
// vectors of D16 per block (LogitsBlock's register path), pairs within a
// vector, and for the half layout no vector straddling the two halves.
HWY_INLINE bool CanRotateInRegisters(bool interleaved, int64_t head_dim) {
  const D16 df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  return N >= 2 && kSumLanes / N <= 4 && head_dim % kSumLanes == 0 &&
         (interleaved || (head_dim / 2) % N == 0);
}

// LogitsBlock<kR> against a key rotated in registers as it is read: each
// vector of rotated features is made with rotate_copy's operations for
// those features (InterleavedOrdered / HalfOrdered on F32Io, which are the
// same per feature on every vector width) and goes straight into the kR
// rows' products, in LogitsBlock's lane order; no rotated key is stored.
// For the half layout, feature f < d/2 is x[f] c - x[f + d/2] s and
// feature f + d/2 is x[f] s + x[f + d/2] c, so each stored vector is read
// twice (once per half), keeping the features in order. Needs
// CanRotateInRegisters.
template <class Io, bool kInterleaved, int kR>
HWY_INLINE void RotateDotBlock(const typename Io::T* k, const float* q, int64_t d,
                               const TokenRow& row, float scale, float* s, int64_t s_stride) {
  const D16 df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t parts = kSumLanes / N;
  const int64_t half = d / 2;
  hn::Vec<D16> acc[kR][4];
  for (int r = 0; r < kR; ++r) {
    for (int64_t u = 0; u < parts; ++u) acc[r][u] = hn::Zero(df);
  }
  for (int64_t f = 0; f < d; f += kSumLanes) {
    for (int64_t u = 0; u < parts; ++u) {
      const int64_t g = f + u * N;  // the feature in lane 0
      hn::Vec<D16> kv;
      if constexpr (kInterleaved) {
        const auto xv = Io::Load(df, k + g);
        kv = hn::Add(hn::Mul(xv, hn::LoadU(df, row.vc + g)),
                     hn::Mul(hn::Reverse2(df, xv), hn::LoadU(df, row.vs + g)));
      } else if (g < half) {
        const auto x0 = Io::Load(df, k + g);
        const auto x1 = Io::Load(df, k + g + half);
        kv = hn::Sub(hn::Mul(x0, hn::LoadU(df, row.vc + g)),
                     hn::Mul(x1, hn::LoadU(df, row.vs + g)));
      } else {
        const auto x0 = Io::Load(df, k + g - half);
        const auto x1 = Io::Load(df, k + g);
        kv = hn::Add(hn::Mul(x0, hn::LoadU(df, row.vs + g - half)),
                     hn::Mul(x1, hn::LoadU(df, row.vc + g - half)));
      }
      for (int r = 0; r < kR; ++r) {
        acc[r][u] = hn::Add(acc[r][u], hn::Mul(hn::LoadU(df, q + r * d + g), kv));
      }
    }
  }
  for (int r = 0; r < kR; ++r) s[r * s_stride] = TreeSumVectors(df, acc[r]) * scale;
}

// LogitsOfKey with RotateDotBlock: m rows by blocks of 4.
template <class Io, bool kInterleaved>
HWY_INLINE void RotateDotKey(const typename Io::T* k, const float* q, int64_t m, int64_t d,
                             const TokenRow& row, float scale, float* s, int64_t s_stride) {
  int64_t r = 0;
  for (; r + 4 <= m; r += 4) {
    RotateDotBlock<Io, kInterleaved, 4>(k, q + r * d, d, row, scale, s + r * s_stride, s_stride);
  }
  switch (m - r) {
    case 3:
      RotateDotBlock<Io, kInterleaved, 3>(k, q + r * d, d, row, scale, s + r * s_stride,
                                          s_stride);
      break;
    case 2:
      RotateDotBlock<Io, kInterleaved, 2>(k, q + r * d, d, row, scale, s + r * s_stride,
                                          s_stride);
      break;
    case 1:
      RotateDotBlock<Io, kInterleaved, 1>(k, q + r * d, d, row, scale, s + r * s_stride,
                                          s_stride);
      break;
    default: break;
  }
}

template <class Io, bool kInterleaved>
void RotatedLogitsOf(const RotatedKeysParams& p) {
  using T = typename Io::T;
  RowScratch table_row(p.rotary_dim);
  RowScratch key((p.head_dim + 1) / 2);  // 2 * ceil(head_dim / 2) floats
  float* const rotated = key.data();
  const bool in_registers = p.rotary_dim == p.head_dim && p.rotary_offset == 0 &&
                            CanRotateInRegisters(kInterleaved, p.head_dim);
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
    if (in_registers) {
      for (int64_t i = 0; i < p.set_count; ++i) {
        const SkinnyQuerySet& set = p.sets[i];
        RotateDotKey<Io, kInterleaved>(src + set.head * p.head_dim, set.q, set.m, p.head_dim, row,
                                       p.scale, set.s + j, p.n);
      }
      continue;
    }
    int64_t head = -1;  // the head in `rotated`
    for (int64_t i = 0; i < p.set_count; ++i) {
      const SkinnyQuerySet& set = p.sets[i];
      if (set.head != head) {
        head = set.head;
        if (p.rotary_dim > 0) {
          WidenRotateHead<Io, kInterleaved>(src + head * p.head_dim, p.head_dim, p.rotary_dim,
                                            p.rotary_offset, row, rotated);
        } else {
          WidenRow<Io>(src + head * p.head_dim, p.head_dim, rotated);
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
