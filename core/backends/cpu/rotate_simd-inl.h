// RoPE rotation on Highway vectors: the rotate and rotate_copy kernels of
// cpu_kernels.h for one target. Included once per target by cpu_kernels.cc.
//
// Every output is math::RotatePair's (x0 c - x1 s, x0 s + x1 c) with the same
// float operations, so results are bit-identical to the scalar code, to the
// CUDA kernels and across targets. Per token, the table row is first put in
// the form the head loop wants (below), once for all of the token's heads;
// the 16-bit storage types are converted inside the head loop, with no
// staging copy of the row.
//
//   layout       storage                  vector step               table form
//   half         float32, float16 (F16C)  N pairs (i, i + r/2)      cos, +-sin rows
//   half         bfloat16, float16        2N pairs, split even/odd  per block: even then odd values
//   interleaved  float32, float16 (F16C)  N features, pair-swapped  [c0 c0 c1 c1 ..], [-s0 s0 -s1 s1 ..]
//   interleaved  bfloat16, float16        N pairs, split even/odd   cos, +-sin rows
//
// Remainders run on 4-lane vectors, then as scalars (math::RotatePair).
//
// Float8 outputs widen each head to float32, rotate it there with the
// float32 forms above (the same operations, so the same float results as in
// place), and round it to float8 with integer operations on the float bits
// that are common/float8.h's, lane for lane.

#if defined(ROPE_BACKENDS_CPU_ROTATE_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ROPE_BACKENDS_CPU_ROTATE_SIMD_INL_H_
#undef ROPE_BACKENDS_CPU_ROTATE_SIMD_INL_H_
#else
#define ROPE_BACKENDS_CPU_ROTATE_SIMD_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "core/backends/cpu/cpu_kernels.h"
#include "common/float8.h"
#include "core/backends/cpu/half_float_simd-inl.h"
#include "core/engine/rope_math.h"

HWY_BEFORE_NAMESPACE();
namespace rope {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ---- Storage access, per type -------------------------------------------------

struct F32Io {
  using T = float;
  using MathTag = math::F32;
  static constexpr bool kSplit = false;
  // At most 8 lanes (256 bits) even on AVX-512: float32 rotation is bound by
  // memory, and tensors sit at 16 bytes past a 64-byte line (malloc's
  // alignment), so every 512-bit access splits two lines. On an AVX-512
  // AMD EPYC host, prefill [1,4096,32|8,128] ran at 0.64x memcpy with 512-bit
  // vectors, 1.42x with 256-bit ones (bench/results/engine_bench_avx512.md).
  static constexpr size_t kLanesCap = 8;
  template <class DF>
  static HWY_INLINE hn::Vec<DF> Load(DF df, const T* p) {
    return hn::LoadU(df, p);
  }
  template <class DF>
  static HWY_INLINE void Store(DF df, hn::Vec<DF> v, T* p) {
    hn::StoreU(v, df, p);
  }
};

struct F16Io {
  using T = uint16_t;
  using MathTag = math::F16;
  static constexpr bool kSplit = !kNativeF16 && kCanSplit;
  static constexpr size_t kLanesCap = 64;  // full vectors: bound by operations
  template <class DF>
  static HWY_INLINE hn::Vec<DF> Load(DF df, const T* p) {
    return LoadF16(df, p);
  }
  template <class DF>
  static HWY_INLINE void Store(DF df, hn::Vec<DF> v, T* p) {
    StoreF16(df, v, p);
  }
  template <class DF>
  static HWY_INLINE void LoadSplit(DF df, const T* p, hn::Vec<DF>& even, hn::Vec<DF>& odd) {
    LoadF16Split(df, p, even, odd);
  }
  template <class DF>
  static HWY_INLINE void StoreSplit(DF df, hn::Vec<DF> even, hn::Vec<DF> odd, T* p) {
    StoreF16Split(df, even, odd, p);
  }
};

struct Bf16Io {
  using T = uint16_t;
  using MathTag = math::BF16;
  static constexpr bool kSplit = kCanSplit;
  static constexpr size_t kLanesCap = 64;  // full vectors: bound by operations
  template <class DF>
  static HWY_INLINE hn::Vec<DF> Load(DF df, const T* p) {
    return LoadBf16(df, p);
  }
  template <class DF>
  static HWY_INLINE void Store(DF df, hn::Vec<DF> v, T* p) {
    StoreBf16(df, v, p);
  }
  template <class DF>
  static HWY_INLINE void LoadSplit(DF df, const T* p, hn::Vec<DF>& even, hn::Vec<DF>& odd) {
    LoadBf16Split(df, p, even, odd);
  }
  template <class DF>
  static HWY_INLINE void StoreSplit(DF df, hn::Vec<DF> even, hn::Vec<DF> odd, T* p) {
    StoreBf16Split(df, even, odd, p);
  }
};

#if ROPE_HAS_BF16_NARROWING
// bfloat16 stored by AVX-512 BF16's narrowing (StoreBf16SplitNative): the
// same bits as Bf16Io, fewer operations. Used only for calls whose data sits
// in cache (RotateTokens): on rotations bound by memory it measured slower
// than the integer rounding (bench/results/cpu_simd_notes.md, "Session 10").
struct Bf16NativeIo : Bf16Io {
  template <class DF>
  static HWY_INLINE void StoreSplit(DF df, hn::Vec<DF> even, hn::Vec<DF> odd, T* p) {
    StoreBf16SplitNative(df, even, odd, p);
  }
};
#endif

using FullF = hn::ScalableTag<float>;
using QuadF = hn::CappedTag<float, 4>;
// The widest vectors the rotation loops of Io use (Io::kLanesCap).
template <class Io>
using IoF = hn::CappedTag<float, Io::kLanesCap>;

// ---- One token's table row, in the form the head loop reads --------------------

// `cos`/`sin`: the table row (rotary_dim / 2 values); `sign` -1 for the
// inverse rotation. `vc`/`vs`: what the vector loops read (see the table at
// the top of this file). The scalar remainder uses cos, sign * sin.
struct TokenRow {
  const float* cos;
  const float* sin;
  float sign;
  const float* vc;
  const float* vs;
};

// Negated sin row (inverse rotation), for the forms that read rows as they are.
template <class DF>
HWY_INLINE int64_t NegateRow(DF df, const float* s, int64_t i, int64_t n, float* out) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (; i + N <= n; i += N) hn::StoreU(hn::Neg(hn::LoadU(df, s + i)), df, out + i);
  return i;
}

// [c0 c0 c1 c1 ..] and [-s0 s0 -s1 s1 ..] (inverse: [s0 -s0 ..]) for pairs [p, n).
template <class DF>
HWY_INLINE int64_t ExpandRow(DF df, const float* c, const float* s, bool inverse, int64_t p,
                             int64_t n, float* c2, float* s2) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (; p + N <= n; p += N) {
    const auto cv = hn::LoadU(df, c + p);
    const auto sv = hn::LoadU(df, s + p);
    hn::StoreInterleaved2(cv, cv, df, c2 + 2 * p);
    if (inverse) {
      hn::StoreInterleaved2(sv, hn::Neg(sv), df, s2 + 2 * p);
    } else {
      hn::StoreInterleaved2(hn::Neg(sv), sv, df, s2 + 2 * p);
    }
  }
  return p;
}

// Per block of 2N values: the even-indexed N, then the odd-indexed N.
template <class DF>
HWY_INLINE int64_t SplitRow(DF df, const float* row, bool negate, int64_t i, int64_t n,
                            float* out) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (; i + 2 * N <= n; i += 2 * N) {
    auto lo = hn::LoadU(df, row + i);
    auto hi = hn::LoadU(df, row + i + N);
    if (negate) {
      lo = hn::Neg(lo);
      hi = hn::Neg(hi);
    }
#if HWY_TARGET != HWY_SCALAR  // which has no ConcatEven, and no split access either
    hn::StoreU(hn::ConcatEven(df, hi, lo), df, out + i);
    hn::StoreU(hn::ConcatOdd(df, hi, lo), df, out + i + N);
#endif
  }
  return i;
}

// Fills `scratch` (2 * rotary_dim floats) as the form of Io x layout needs.
template <class Io, bool kInterleaved>
HWY_INLINE TokenRow PrepareRow(const float* c, const float* s, bool inverse, int64_t rotary_dim,
                               float* scratch) {
  const int64_t half = rotary_dim / 2;
  TokenRow row{c, s, inverse ? -1.0f : 1.0f, c, s};
  if constexpr (kInterleaved && !Io::kSplit) {
    float* c2 = scratch;
    float* s2 = scratch + rotary_dim;
    int64_t p = ExpandRow(FullF(), c, s, inverse, 0, half, c2, s2);
    p = ExpandRow(QuadF(), c, s, inverse, p, half, c2, s2);
    for (; p < half; ++p) {
      c2[2 * p] = c2[2 * p + 1] = c[p];
      s2[2 * p] = inverse ? s[p] : -s[p];
      s2[2 * p + 1] = inverse ? -s[p] : s[p];
    }
    row.vc = c2;
    row.vs = s2;
  } else if constexpr (!kInterleaved && Io::kSplit) {
    float* cs = scratch;
    float* ss = scratch + half;
    SplitRow(QuadF(), c, false, SplitRow(IoF<Io>(), c, false, 0, half, cs), half, cs);
    SplitRow(QuadF(), s, inverse, SplitRow(IoF<Io>(), s, inverse, 0, half, ss), half, ss);
    row.vc = cs;
    row.vs = ss;
  } else {
    if (inverse) {
      NegateRow(QuadF(), s, NegateRow(FullF(), s, 0, half, scratch), half, scratch);
      row.vs = scratch;  // the scalar remainder negates the table's own values
    }
  }
  return row;
}

// ---- Block loops ------------------------------------------------------------------
// The outer loop walks the rotated features in vector blocks and loads the
// block's table values once; the inner loop applies them to each of `heads`
// head vectors (head_dim elements apart from x). Each returns where it
// stopped (a pair index, or a feature index for the interleaved forms).

template <class Io, class DF>
HWY_INLINE int64_t HalfOrdered(DF df, typename Io::T* x, int64_t heads, int64_t head_dim,
                               int64_t i, int64_t half, const float* c, const float* s) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (; i + N <= half; i += N) {
    const auto cv = hn::LoadU(df, c + i);
    const auto sv = hn::LoadU(df, s + i);
    typename Io::T* lo = x + i;
    for (int64_t h = 0; h < heads; ++h, lo += head_dim) {
      typename Io::T* hi = lo + half;
      const auto x0 = Io::Load(df, lo);
      const auto x1 = Io::Load(df, hi);
      Io::Store(df, hn::Sub(hn::Mul(x0, cv), hn::Mul(x1, sv)), lo);
      Io::Store(df, hn::Add(hn::Mul(x0, sv), hn::Mul(x1, cv)), hi);
    }
  }
  return i;
}

template <class Io, class DF>
HWY_INLINE int64_t HalfSplit(DF df, typename Io::T* x, int64_t heads, int64_t head_dim,
                             int64_t i, int64_t half, const float* cs, const float* ss) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (; i + 2 * N <= half; i += 2 * N) {
    const auto ce = hn::LoadU(df, cs + i), co = hn::LoadU(df, cs + i + N);
    const auto se = hn::LoadU(df, ss + i), so = hn::LoadU(df, ss + i + N);
    typename Io::T* lo = x + i;
    for (int64_t h = 0; h < heads; ++h, lo += head_dim) {
      typename Io::T* hi = lo + half;
      hn::Vec<DF> le, lo_odd, he, hi_odd;
      Io::LoadSplit(df, lo, le, lo_odd);
      Io::LoadSplit(df, hi, he, hi_odd);
      const auto ye0 = hn::Sub(hn::Mul(le, ce), hn::Mul(he, se));
      const auto yo0 = hn::Sub(hn::Mul(lo_odd, co), hn::Mul(hi_odd, so));
      const auto ye1 = hn::Add(hn::Mul(le, se), hn::Mul(he, ce));
      const auto yo1 = hn::Add(hn::Mul(lo_odd, so), hn::Mul(hi_odd, co));
      Io::StoreSplit(df, ye0, yo0, lo);
      Io::StoreSplit(df, ye1, yo1, hi);
    }
  }
  return i;
}

// Features [f, rotary_dim); c2/s2 in the expanded form.
template <class Io, class DF>
HWY_INLINE int64_t InterleavedOrdered(DF df, typename Io::T* x, int64_t heads, int64_t head_dim,
                                      int64_t f, int64_t rotary_dim, const float* c2,
                                      const float* s2) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  if (N < 2) return f;  // HWY_SCALAR: a pair needs two lanes
  for (; f + N <= rotary_dim; f += N) {
    const auto cv = hn::LoadU(df, c2 + f);
    const auto sv = hn::LoadU(df, s2 + f);
    typename Io::T* v = x + f;
    for (int64_t h = 0; h < heads; ++h, v += head_dim) {
      const auto xv = Io::Load(df, v);
      // Lane 2i: x0 c + x1 (-s); lane 2i+1: x1 c + x0 s. Equal bit for bit
      // to x0 c - x1 s and x0 s + x1 c (negation is exact, addition commutes).
      Io::Store(df, hn::Add(hn::Mul(xv, cv), hn::Mul(hn::Reverse2(df, xv), sv)), v);
    }
  }
  return f;
}

template <class Io, class DF>
HWY_INLINE int64_t InterleavedSplit(DF df, typename Io::T* x, int64_t heads, int64_t head_dim,
                                    int64_t f, int64_t rotary_dim, const float* c,
                                    const float* s) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (; f + 2 * N <= rotary_dim; f += 2 * N) {
    const auto cv = hn::LoadU(df, c + f / 2);
    const auto sv = hn::LoadU(df, s + f / 2);
    typename Io::T* v = x + f;
    for (int64_t h = 0; h < heads; ++h, v += head_dim) {
      hn::Vec<DF> x0, x1;
      Io::LoadSplit(df, v, x0, x1);
      Io::StoreSplit(df, hn::Sub(hn::Mul(x0, cv), hn::Mul(x1, sv)),
                     hn::Add(hn::Mul(x0, sv), hn::Mul(x1, cv)), v);
    }
  }
  return f;
}

// Pairs [p, half) of one head as scalars.
template <class Io, bool kInterleaved>
HWY_INLINE void ScalarPairs(typename Io::T* v, int64_t p, int64_t rotary_dim,
                            const TokenRow& row) {
  using Tag = typename Io::MathTag;
  const int64_t half = rotary_dim / 2;
  for (; p < half; ++p) {
    const int64_t f0 = kInterleaved ? 2 * p : p;
    const int64_t f1 = kInterleaved ? 2 * p + 1 : p + half;
    float y0, y1;
    math::RotatePair(math::Load<Tag>(v + f0), math::Load<Tag>(v + f1), row.cos[p],
                     row.sign * row.sin[p], &y0, &y1);
    math::Store<Tag>(v + f0, y0);
    math::Store<Tag>(v + f1, y1);
  }
}

// Rotates `heads` head vectors of one token (head_dim elements apart).
template <class Io, bool kInterleaved>
HWY_INLINE void RotateHeads(typename Io::T* x, int64_t heads, int64_t head_dim,
                            int64_t rotary_dim, const TokenRow& row) {
  const int64_t half = rotary_dim / 2;
  int64_t pairs_done;
  if constexpr (kInterleaved) {
    int64_t f;
    if constexpr (Io::kSplit) {
      f = InterleavedSplit<Io>(IoF<Io>(), x, heads, head_dim, 0, rotary_dim, row.vc, row.vs);
      f = InterleavedSplit<Io>(QuadF(), x, heads, head_dim, f, rotary_dim, row.vc, row.vs);
    } else {
      f = InterleavedOrdered<Io>(IoF<Io>(), x, heads, head_dim, 0, rotary_dim, row.vc, row.vs);
      f = InterleavedOrdered<Io>(QuadF(), x, heads, head_dim, f, rotary_dim, row.vc, row.vs);
    }
    pairs_done = f / 2;
  } else {
    if constexpr (Io::kSplit) {
      pairs_done = HalfSplit<Io>(IoF<Io>(), x, heads, head_dim, 0, half, row.vc, row.vs);
      pairs_done = HalfSplit<Io>(QuadF(), x, heads, head_dim, pairs_done, half, row.vc, row.vs);
    } else {
      pairs_done = HalfOrdered<Io>(IoF<Io>(), x, heads, head_dim, 0, half, row.vc, row.vs);
      pairs_done = HalfOrdered<Io>(QuadF(), x, heads, head_dim, pairs_done, half, row.vc, row.vs);
    }
  }
  if (pairs_done < half) {
    for (int64_t h = 0; h < heads; ++h) {
      ScalarPairs<Io, kInterleaved>(x + h * head_dim, pairs_done, rotary_dim, row);
    }
  }
}

// Scratch for one token's prepared row: on the stack for rotary_dim <= 512.
class RowScratch {
 public:
  explicit RowScratch(int64_t rotary_dim) {
    if (2 * rotary_dim > kStackFloats) {
      heap_.resize(2 * rotary_dim);
      data_ = heap_.data();
    }
  }
  float* data() { return data_; }

 private:
  static constexpr int64_t kStackFloats = 1024;
  HWY_ALIGN float stack_[kStackFloats];
  std::vector<float> heap_;
  float* data_ = stack_;
};

// Above this many bytes per call, heads are rotated one after the other:
// the data then streams from memory, and the hardware prefetchers follow one
// row at a time far better than the strided walk of a block over every head
// (prefill float32 ran at 0.6x memcpy that way, 1.2x row by row). Below it
// the data is in cache, and loading each block's table values once for all
// heads wins (decode).
constexpr int64_t kCachedCallBytes = int64_t{1} << 20;
// How far ahead partial-rotary heads are prefetched (RotateTokens), in bytes
// of tensor, and the line size it assumes (x86 and most Arm cores). Once
// every line of a head is prefetched, 4 KiB to 32 KiB ahead measured alike
// (bench/results/cpu_simd_notes.md, "Session 11").
constexpr int64_t kPrefetchAheadBytes = int64_t{8} << 10;
constexpr int64_t kCacheLine = 64;

// CachedIo: the storage access of calls whose data sits in cache (all heads
// of a token block by block); the same type and row form as Io.
template <class Io, bool kInterleaved, class CachedIo = Io>
void RotateTokens(const RotateArgs& p, const TableRows& table, int64_t begin, int64_t end) {
  using T = typename Io::T;
  static_assert(std::is_same_v<T, typename CachedIo::T> && Io::kSplit == CachedIo::kSplit &&
                Io::kLanesCap == CachedIo::kLanesCap);
  const int64_t heads_per_token = p.q_heads + (p.k != nullptr ? p.k_heads : 0);
  const bool head_by_head = (end - begin) * heads_per_token * p.head_dim *
                                static_cast<int64_t>(sizeof(T)) > kCachedCallBytes;
  RowScratch scratch(p.rotary_dim);
  // Partial rotary, head by head: only the first rotary_dim features of each
  // head are read, a run of cache lines then a gap, which the hardware
  // prefetchers do not follow; the lines kPrefetchAheadBytes ahead are asked
  // for explicitly (AVX2, bf16 [1,4096,32|8,128] rotary 64: 0.35-0.41x ->
  // 0.66x memcpy with the lines the rotated bytes fill, 1.2-1.6x with every
  // line they touch, bench/results/cpu_simd_notes.md). A prefetch past the
  // end of the tensor is a hint, never a fault.
  // Whole heads ahead, so that the prefetched bytes are a later head's
  // rotated ones, not the gap after them.
  const int64_t head_bytes = p.head_dim * static_cast<int64_t>(sizeof(T));
  const uintptr_t prefetch_distance =
      static_cast<uintptr_t>(std::max<int64_t>(1, kPrefetchAheadBytes / head_bytes) * head_bytes);
  const int64_t prefetch_bytes =
      head_by_head && p.rotary_dim < p.head_dim ? p.rotary_dim * static_cast<int64_t>(sizeof(T))
                                                : 0;
  int64_t b = begin / p.seq, s = begin % p.seq;  // token t = b * seq + s
  for (int64_t t = begin; t < end; ++t) {
    const int64_t pos = p.positions.At(b, s);
    if (++s == p.seq) s = 0, ++b;
    const TokenRow row = PrepareRow<Io, kInterleaved>(
        table.Cos(pos), table.Sin(pos), p.inverse, p.rotary_dim,
        scratch.data());
    for (int tensor = 0; tensor < 2; ++tensor) {
      void* base = tensor == 0 ? p.q : p.k;
      const int64_t heads = tensor == 0 ? p.q_heads : p.k_heads;
      if (base == nullptr) continue;
      T* x = static_cast<T*>(base) + t * heads * p.head_dim + p.rotary_offset;
      if (head_by_head) {
        for (int64_t h = 0; h < heads; ++h) {
          if (prefetch_bytes > 0) {
            // An address, not a pointer into x: it may lie past the tensor.
            // Every line the head's rotated bytes touch: a head that starts
            // past a line boundary (tensors sit 16 bytes past one) can span
            // one line more than its bytes fill, and that line, not
            // prefetched, cost a wait on memory at every head.
            const uintptr_t ahead = reinterpret_cast<uintptr_t>(x + h * p.head_dim) +
                                    prefetch_distance;
            for (uintptr_t line = ahead & ~uintptr_t{kCacheLine - 1}; line < ahead + prefetch_bytes;
                 line += kCacheLine) {
              hwy::Prefetch(reinterpret_cast<const char*>(line));
            }
          }
          RotateHeads<Io, kInterleaved>(x + h * p.head_dim, 1, p.head_dim, p.rotary_dim, row);
        }
      } else {
        RotateHeads<CachedIo, kInterleaved>(x, heads, p.head_dim, p.rotary_dim, row);
      }
    }
  }
}

// ---- Float8 outputs ------------------------------------------------------------------

// dst[0, n) = float8 of src[0, n) * scale (common/float8.h's rounding), on
// full vectors, then 4-lane vectors, then scalars.
template <class DF>
HWY_INLINE int64_t Float8Lanes(DF df, const float* src, int64_t i, int64_t n, float scale,
                               const math::Float8Format& fmt, uint8_t* dst) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  if (N < 4) return i;  // HWY_SCALAR: the scalar loop below
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<uint8_t, DF> du8;
  const int shift = 23 - fmt.mantissa_bits;
  const auto half_ulp = hn::Set(di, (1 << (shift - 1)) - 1);
  const auto one = hn::Set(di, 1);
  const auto bias = hn::Set(di, (127 - fmt.exponent_bias) << fmt.mantissa_bits);
  const auto magic = hn::Set(df, math::BitsToFloat(fmt.subnormal_magic));
  const auto magic_bits = hn::Set(di, static_cast<int32_t>(fmt.subnormal_magic));
  const auto min_normal = hn::Set(di, static_cast<int32_t>(fmt.min_normal));
  const auto saturate_at = hn::Set(di, static_cast<int32_t>(fmt.saturate_at));
  const auto max_code = hn::Set(di, fmt.max_code);
  const auto infinity = hn::Set(di, 0x7f800000);
  const auto nan_code = hn::Set(di, 0x7f);
  const auto sign_bit = hn::Set(di, 0x80);
  const auto magnitude = hn::Set(di, 0x7fffffff);
  const auto vscale = hn::Set(df, scale);
  for (; i + N <= n; i += N) {
    const auto u = hn::BitCast(di, hn::Mul(hn::LoadU(df, src + i), vscale));
    const auto a = hn::And(u, magnitude);
    // Arithmetic shift: bit 7 of u >> 24 is u's sign.
    const auto sign = hn::And(hn::ShiftRight<24>(u), sign_bit);
    const auto rounded = hn::Add(hn::Add(a, half_ulp), hn::And(hn::ShiftRightSame(a, shift), one));
    const auto normal = hn::Sub(hn::ShiftRightSame(rounded, shift), bias);
    const auto subnormal =
        hn::Sub(hn::BitCast(di, hn::Add(hn::BitCast(df, a), magic)), magic_bits);
    auto code = hn::IfThenElse(hn::Lt(a, min_normal), subnormal, normal);
    code = hn::IfThenElse(hn::Lt(a, saturate_at), code, max_code);
    code = hn::Or(code, sign);
    code = hn::IfThenElse(hn::Gt(a, infinity), nan_code, code);
    hn::StoreU(hn::DemoteTo(du8, code), du8, dst + i);
  }
  return i;
}

HWY_INLINE void Float8Row(const float* src, int64_t n, float scale, const math::Float8Format& fmt,
                          uint8_t* dst) {
  int64_t i = Float8Lanes(FullF(), src, 0, n, scale, fmt, dst);
  i = Float8Lanes(QuadF(), src, i, n, scale, fmt, dst);
  for (; i < n; ++i) dst[i] = math::FloatToFloat8(src[i] * scale, fmt);
}

math::Float8Format Float8FormatOf(DType dtype) {
  return dtype == DType::kFloat8E5M2 ? math::Float8E5M2() : math::Float8E4M3();
}

template <class Io>
void WidenRow(const typename Io::T* src, int64_t n, float* dst);

// RotateArgs with a float8 output_dtype: each head of q (k), or of
// q_source (k_source) when set, widened to float32, rotated there, scaled
// and rounded into q_out / k_out.
template <class Io, bool kInterleaved>
void RotateToFloat8Tokens(const RotateArgs& p, const TableRows& table, int64_t begin,
                          int64_t end) {
  using T = typename Io::T;
  const math::Float8Format fmt = Float8FormatOf(p.output_dtype);
  RowScratch scratch(p.rotary_dim);
  RowScratch head((p.head_dim + 1) / 2);  // 2 * ceil(head_dim / 2) floats
  int64_t b = begin / p.seq, s = begin % p.seq;  // token t = b * seq + s
  for (int64_t t = begin; t < end; ++t) {
    const int64_t pos = p.positions.At(b, s);
    if (++s == p.seq) s = 0, ++b;
    TokenRow row{};
    if (p.rotary_dim > 0) {
      row = PrepareRow<F32Io, kInterleaved>(table.Cos(pos), table.Sin(pos), p.inverse,
                                            p.rotary_dim, scratch.data());
    }
    for (int tensor = 0; tensor < 2; ++tensor) {
      if ((tensor == 0 ? p.q : p.k) == nullptr) continue;
      const void* source = tensor == 0 ? (p.q_source != nullptr ? p.q_source : p.q)
                                       : (p.k_source != nullptr ? p.k_source : p.k);
      const T* src = static_cast<const T*>(source);
      uint8_t* out = static_cast<uint8_t*>(tensor == 0 ? p.q_out : p.k_out);
      const int64_t heads = tensor == 0 ? p.q_heads : p.k_heads;
      const float scale = tensor == 0 ? p.q_scale : p.k_scale;
      if (src == nullptr) continue;
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t at = (t * heads + h) * p.head_dim;
        WidenRow<Io>(src + at, p.head_dim, head.data());
        if (p.rotary_dim > 0) {
          RotateHeads<F32Io, kInterleaved>(head.data() + p.rotary_offset, 1, p.head_dim,
                                           p.rotary_dim, row);
        }
        Float8Row(head.data(), p.head_dim, scale, fmt, out + at);
      }
    }
  }
}

void Rotate(const RotateArgs& p, const TableRows& table, int64_t begin, int64_t end) {
  const bool interleaved = p.layout == Layout::kInterleaved;
  if (IsFloat8(p.output_dtype)) {
    switch (p.dtype) {
      case DType::kFloat32:
        return interleaved ? RotateToFloat8Tokens<F32Io, true>(p, table, begin, end)
                           : RotateToFloat8Tokens<F32Io, false>(p, table, begin, end);
      case DType::kFloat16:
        return interleaved ? RotateToFloat8Tokens<F16Io, true>(p, table, begin, end)
                           : RotateToFloat8Tokens<F16Io, false>(p, table, begin, end);
      case DType::kBFloat16:
        return interleaved ? RotateToFloat8Tokens<Bf16Io, true>(p, table, begin, end)
                           : RotateToFloat8Tokens<Bf16Io, false>(p, table, begin, end);
      case DType::kFloat8E4M3:
      case DType::kFloat8E5M2:
        return;  // never handed: float8 is an output type only
    }
  }
  if (p.rotary_dim == 0) return;
  switch (p.dtype) {
    case DType::kFloat32:
      return interleaved ? RotateTokens<F32Io, true>(p, table, begin, end)
                         : RotateTokens<F32Io, false>(p, table, begin, end);
    case DType::kFloat16:
      return interleaved ? RotateTokens<F16Io, true>(p, table, begin, end)
                         : RotateTokens<F16Io, false>(p, table, begin, end);
    case DType::kBFloat16:
      return interleaved ? RotateTokens<Bf16Io, true>(p, table, begin, end)
                         : RotateTokens<Bf16Io, false>(p, table, begin, end);
    case DType::kFloat8E4M3:
    case DType::kFloat8E5M2:
      return;  // never handed: float8 is an output type only
  }
}

#if ROPE_HAS_BF16_NARROWING
// Rotate for CPUs with AVX-512 BF16 (the avx512_bf16 path): bfloat16 calls
// narrow with its instruction; the other types are Rotate's.
void RotateWithBf16Instructions(const RotateArgs& p, const TableRows& table, int64_t begin,
                                int64_t end) {
  if (p.dtype != DType::kBFloat16 || IsFloat8(p.output_dtype) || p.rotary_dim == 0) {
    return Rotate(p, table, begin, end);
  }
  return p.layout == Layout::kInterleaved
             ? RotateTokens<Bf16Io, true, Bf16NativeIo>(p, table, begin, end)
             : RotateTokens<Bf16Io, false, Bf16NativeIo>(p, table, begin, end);
}
#endif

// ---- Widening, narrowing, rotated float32 copies ------------------------------------

// n elements in order, on full vectors, then 4-lane, then 1-lane vectors (the
// same operations throughout, so every element converts identically).
template <class Io>
void WidenRow(const typename Io::T* src, int64_t n, float* dst) {
  int64_t i = 0;
  auto run = [&](auto df) {
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    for (; i + N <= n; i += N) hn::StoreU(Io::Load(df, src + i), df, dst + i);
  };
  run(FullF());
  run(QuadF());
  run(hn::CappedTag<float, 1>());
}

template <class Io>
void NarrowRow(const float* src, int64_t n, typename Io::T* dst) {
  int64_t i = 0;
  auto run = [&](auto df) {
    const int64_t N = static_cast<int64_t>(hn::Lanes(df));
    for (; i + N <= n; i += N) Io::Store(df, hn::LoadU(df, src + i), dst + i);
  };
  run(FullF());
  run(QuadF());
  run(hn::CappedTag<float, 1>());
}

void Widen(DType dtype, const void* src, int64_t n, float* dst) {
  switch (dtype) {
    case DType::kFloat32:
      return WidenRow<F32Io>(static_cast<const float*>(src), n, dst);
    case DType::kFloat16:
      return WidenRow<F16Io>(static_cast<const uint16_t*>(src), n, dst);
    case DType::kBFloat16:
      return WidenRow<Bf16Io>(static_cast<const uint16_t*>(src), n, dst);
    case DType::kFloat8E4M3:
    case DType::kFloat8E5M2:
      return;  // never handed: float8 is an output type only
  }
}

void Narrow(DType dtype, const float* src, int64_t n, void* dst) {
  switch (dtype) {
    case DType::kFloat32:
      return NarrowRow<F32Io>(src, n, static_cast<float*>(dst));
    case DType::kFloat16:
      return NarrowRow<F16Io>(src, n, static_cast<uint16_t*>(dst));
    case DType::kBFloat16:
      return NarrowRow<Bf16Io>(src, n, static_cast<uint16_t*>(dst));
    case DType::kFloat8E4M3:
    case DType::kFloat8E5M2:
      return Float8Row(src, n, 1.0f, Float8FormatOf(dtype), static_cast<uint8_t*>(dst));
  }
}

template <class Io, bool kInterleaved>
void RotateCopyTokens(const RotateCopyParams& p, int64_t begin, int64_t end) {
  using T = typename Io::T;
  RowScratch scratch(p.rotary_dim);
  for (int64_t t = begin; t < end; ++t) {
    TokenRow row{};
    if (p.rotary_dim > 0) {
      const int64_t pos = p.positions.At(t / p.seq, t % p.seq);
      row = PrepareRow<F32Io, kInterleaved>(p.table.Cos(pos), p.table.Sin(pos), false,
                                            p.rotary_dim, scratch.data());
    }
    const T* src = static_cast<const T*>(p.src) + t * p.src_token_stride;
    float* dst = p.dst + (t - p.dst_first_token) * p.dst_token_stride;
    for (int64_t h = 0; h < p.heads; ++h) {
      float* out = dst + h * p.dst_head_stride;
      WidenRow<Io>(src + h * p.head_dim, p.head_dim, out);
      if (p.rotary_dim > 0) {
        RotateHeads<F32Io, kInterleaved>(out + p.rotary_offset, 1, p.head_dim, p.rotary_dim, row);
      }
    }
  }
}

void RotateCopy(const RotateCopyParams& p, int64_t begin, int64_t end) {
  switch (p.dtype) {
    case DType::kFloat32:
      return p.interleaved ? RotateCopyTokens<F32Io, true>(p, begin, end)
                           : RotateCopyTokens<F32Io, false>(p, begin, end);
    case DType::kFloat16:
      return p.interleaved ? RotateCopyTokens<F16Io, true>(p, begin, end)
                           : RotateCopyTokens<F16Io, false>(p, begin, end);
    case DType::kBFloat16:
      return p.interleaved ? RotateCopyTokens<Bf16Io, true>(p, begin, end)
                           : RotateCopyTokens<Bf16Io, false>(p, begin, end);
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
