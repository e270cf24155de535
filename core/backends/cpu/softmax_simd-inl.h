// Attention rows on Highway vectors: the exp_row, scale_row, store_row and
// stream_fence kernels of cpu_kernels.h for one target. Included once per
// target by cpu_kernels.cc.
//
// The softmax makes two passes over a row that stays in cache, the maximum
// and exp(x - max) with its sum; the scaling by 1 / sum rides on the pass
// that writes the row out (StoreRow) or runs on its own (ScaleRow). The sum
// runs in 16 fixed lanes (lane l adds elements l, l + 16, ...), vectors of 16,
// 8 or 4 lanes alike, and the 16 lanes are then added in order, so that every
// target gives the same bits.

#if defined(ROPE_BACKENDS_CPU_SOFTMAX_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ROPE_BACKENDS_CPU_SOFTMAX_SIMD_INL_H_
#undef ROPE_BACKENDS_CPU_SOFTMAX_SIMD_INL_H_
#else
#define ROPE_BACKENDS_CPU_SOFTMAX_SIMD_INL_H_
#endif

#include <cstdint>
#include <cstring>
#include <limits>

#include "hwy/cache_control.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace rope {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// exp(x) for x <= 0 (softmax arguments after subtracting the row maximum).
// Relative error below 2e-7 for x >= -87; 0 below -87, where exp(x) is no
// longer a normal float; NaN stays NaN; x > 0 (outside the contract) gives 1.
// Hand-written because Highway's contrib Exp uses fused multiply-adds where
// the target has them, which would make targets disagree.
template <class D>
HWY_INLINE hn::Vec<D> ExpNonPositive(D d, hn::Vec<D> x) {
  const hn::RebindToSigned<D> di;
  const auto lowest = hn::Set(d, -87.0f);
  const auto zero = hn::Zero(d);
  // x clamped to [-87, 0]. Only finite lanes in range keep this result (see
  // the selects at the end), so how Min/Max treat NaN does not matter.
  const auto xc = hn::Min(hn::Max(x, lowest), zero);
  // t = 1.5 * 2^23 + round(x / ln 2): adding 1.5 * 2^23 rounds to an
  // integer, n in [-126, 0], which also sits in t's low mantissa bits.
  const auto round_magic = hn::Set(d, 12582912.0f);
  const auto t = hn::Add(hn::Mul(xc, hn::Set(d, 1.44269504088896341f)), round_magic);
  const auto n = hn::Sub(t, round_magic);
  // ln 2 in two parts so that n * ln2_hi is exact.
  const auto r = hn::Sub(hn::Sub(xc, hn::Mul(n, hn::Set(d, 0.693359375f))),
                         hn::Mul(n, hn::Set(d, -2.12194440e-4f)));
  // Minimax polynomial for exp(r) on [-ln2/2, ln2/2] (Cephes expf's
  // coefficients): 1 + r + r^2 q(r), q of degree 5 evaluated by Estrin's
  // scheme (pairs, then r^2 and r^4) rather than Horner's. Same accuracy; the
  // chain of dependent operations is 8 long instead of 14, and that chain,
  // not the operation count, bounded the row loop (2.5 cycles per element
  // with Horner on AVX2: a vector's chain outlasted what the scheduler holds).
  const auto r2 = hn::Mul(r, r);
  const auto r4 = hn::Mul(r2, r2);
  const auto q01 = hn::Add(hn::Mul(hn::Set(d, 1.6666665459e-1f), r), hn::Set(d, 5.0000001201e-1f));
  const auto q23 = hn::Add(hn::Mul(hn::Set(d, 8.3334519073e-3f), r), hn::Set(d, 4.1665795894e-2f));
  const auto q45 = hn::Add(hn::Mul(hn::Set(d, 1.9875691500e-4f), r), hn::Set(d, 1.3981999507e-3f));
  const auto q = hn::Add(hn::Add(q01, hn::Mul(r2, q23)), hn::Mul(r4, q45));
  const auto p = hn::Add(hn::Add(hn::Mul(r2, q), r), hn::Set(d, 1.0f));
  // 2^n built in the exponent field straight from t's bits (t's bits are
  // 0x4B400000 + n), without a float-to-int conversion.
  const auto scale = hn::BitCast(
      d, hn::ShiftLeft<23>(hn::Add(hn::BitCast(di, t), hn::Set(di, 127 - 0x4B400000))));
  const auto result = hn::Mul(p, scale);
  // In range: the result. Below -87: 0. NaN: itself.
  return hn::IfThenElse(hn::Ge(x, lowest), result, hn::IfThenElse(hn::Lt(x, lowest), zero, x));
}

// 16 lanes whatever the vector width: D16 holds 16, 8 or 4 floats and each
// step handles 16 elements as 1, 2 or 4 vectors.
using D16 = hn::CappedTag<float, 16>;
constexpr int64_t kSumLanes = 16;

// Writes exp(in - max) to out and returns it.
HWY_INLINE hn::Vec<D16> ExpStore(D16 d, const float* in, hn::Vec<D16> max_vec, float* out) {
  const auto e = ExpNonPositive(d, hn::Sub(hn::LoadU(d, in), max_vec));
  hn::StoreU(e, d, out);
  return e;
}

// row[j] = exp(row[j] - shift) for j < n, and the sum of the results in 16
// fixed lanes (lane l adds elements l, l + 16, ...; the lanes then in
// order), so that every target gives the same bits. -inf entries become 0;
// row[j] - shift <= 0 up to rounding (a larger argument gives 1). The one
// exponential loop of the softmax (ExpRow) and of the tiled attention pass.
float ExpSumRow(float* row, int64_t n, float shift) {
  const D16 d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t parts = kSumLanes / N;  // 1, 2 or 4 (16 on HWY_SCALAR)
  HWY_ALIGN float lanes[kSumLanes];
  const auto shift_vec = hn::Set(d, shift);
  int64_t j = 0;
  if (parts <= 4) {
    auto s0 = hn::Zero(d), s1 = s0, s2 = s0, s3 = s0;
    for (; j + kSumLanes <= n; j += kSumLanes) {
      s0 = hn::Add(s0, ExpStore(d, row + j, shift_vec, row + j));
      if (parts > 1) s1 = hn::Add(s1, ExpStore(d, row + j + N, shift_vec, row + j + N));
      if (parts > 2) {
        s2 = hn::Add(s2, ExpStore(d, row + j + 2 * N, shift_vec, row + j + 2 * N));
        s3 = hn::Add(s3, ExpStore(d, row + j + 3 * N, shift_vec, row + j + 3 * N));
      }
    }
    hn::StoreU(s0, d, lanes);
    if (parts > 1) hn::StoreU(s1, d, lanes + N);
    if (parts > 2) {
      hn::StoreU(s2, d, lanes + 2 * N);
      hn::StoreU(s3, d, lanes + 3 * N);
    }
  } else {
    for (int64_t l = 0; l < kSumLanes; ++l) lanes[l] = 0.0f;
  }
  const hn::CappedTag<float, 1> d1;
  for (; j < n; ++j) {
    const float e = hn::GetLane(ExpNonPositive(d1, hn::Set(d1, row[j] - shift)));
    row[j] = e;
    lanes[j % kSumLanes] += e;
  }
  float sum = 0.0f;
  for (int64_t l = 0; l < kSumLanes; ++l) sum += lanes[l];
  return sum;
}

float ExpRow(float* row, int64_t visible) {
  if (visible == 0) return 0.0f;
  const float* in = row;
  const D16 d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t parts = kSumLanes / N;  // 1, 2 or 4 (16 on HWY_SCALAR)

  // Maximum (order does not matter for it).
  const float kNegInf = -std::numeric_limits<float>::infinity();
  float max_v = kNegInf;
  int64_t j = 0;
  if (parts <= 4) {
    auto m0 = hn::Set(d, kNegInf), m1 = m0, m2 = m0, m3 = m0;
    for (; j + kSumLanes <= visible; j += kSumLanes) {
      m0 = hn::Max(m0, hn::LoadU(d, in + j));
      if (parts > 1) m1 = hn::Max(m1, hn::LoadU(d, in + j + N));
      if (parts > 2) {
        m2 = hn::Max(m2, hn::LoadU(d, in + j + 2 * N));
        m3 = hn::Max(m3, hn::LoadU(d, in + j + 3 * N));
      }
    }
    max_v = hn::GetLane(hn::MaxOfLanes(d, hn::Max(hn::Max(m0, m1), hn::Max(m2, m3))));
  }
  for (; j < visible; ++j) max_v = in[j] > max_v ? in[j] : max_v;
  return 1.0f / ExpSumRow(row, visible, max_v);
}

void ScaleRow(float* row, int64_t n, float scale) {
  const hn::ScalableTag<float> df;
  const auto scale_vec = hn::Set(df, scale);
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t j = 0;
  for (; j + N <= n; j += N) hn::StoreU(hn::Mul(hn::LoadU(df, row + j), scale_vec), df, row + j);
  for (; j < n; ++j) row[j] *= scale;
}

// out[0, visible) = src[0, visible) * scale, out[visible, n) = fill. With
// `stream`, non-temporal stores where `out` is vector-aligned: for scores too
// large to stay in cache until they are read, bypassing the cache saves
// reading each line before overwriting it; StreamFence() must follow before
// another thread reads `out`.
template <bool kStream>
void StoreRowT(const float* src, int64_t visible, int64_t n, float scale, float fill, float* out) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const uintptr_t vector_bytes = static_cast<uintptr_t>(N) * sizeof(float);
  auto aligned = [&](int64_t j) {
    return !kStream || reinterpret_cast<uintptr_t>(out + j) % vector_bytes == 0;
  };
  auto store = [&](hn::Vec<decltype(df)> v, float* p) {
    if constexpr (kStream) {
      hn::Stream(v, df, p);
    } else {
      hn::StoreU(v, df, p);
    }
  };
  const auto scale_vec = hn::Set(df, scale);
  int64_t j = 0;
  for (; j < visible && !aligned(j); ++j) out[j] = src[j] * scale;
  for (; j + N <= visible; j += N) store(hn::Mul(hn::LoadU(df, src + j), scale_vec), out + j);
  for (; j < visible; ++j) out[j] = src[j] * scale;
  for (; j < n && !aligned(j); ++j) out[j] = fill;
  const auto fill_vec = hn::Set(df, fill);
  for (; j + N <= n; j += N) store(fill_vec, out + j);
  for (; j < n; ++j) out[j] = fill;
}

void StoreRow(const float* src, int64_t visible, int64_t n, float scale, float fill, bool stream,
              float* out) {
  if (stream) {
    StoreRowT<true>(src, visible, n, scale, fill, out);
  } else {
    StoreRowT<false>(src, visible, n, scale, fill, out);
  }
}

void StreamFence() { hwy::FlushStream(); }

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace rope
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
