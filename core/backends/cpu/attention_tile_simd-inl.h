// The row kernels of the tiled attention pass (cpu_tiled_attention.cc) on
// Highway vectors: row_max, exp_sum_row, softcap_row, alibi_row and
// add_row of cpu_kernels.h for one target. Included once per target by
// cpu_kernels.cc, after softmax_simd-inl.h, whose ExpNonPositive and 16-lane
// summation they share: every target gives the same bits.

#if defined(ROPE_BACKENDS_CPU_ATTENTION_TILE_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ROPE_BACKENDS_CPU_ATTENTION_TILE_SIMD_INL_H_
#undef ROPE_BACKENDS_CPU_ATTENTION_TILE_SIMD_INL_H_
#else
#define ROPE_BACKENDS_CPU_ATTENTION_TILE_SIMD_INL_H_
#endif

#include <cstdint>
#include <limits>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace rope {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The largest of row[0, n) (-inf for n == 0). Order does not matter for a
// maximum, so any vector width gives the same value (NaN aside).
float RowMax(const float* row, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const float kNegInf = -std::numeric_limits<float>::infinity();
  float max_v = kNegInf;
  int64_t j = 0;
  if (n >= 2 * N) {
    auto m0 = hn::Set(d, kNegInf), m1 = m0;
    for (; j + 2 * N <= n; j += 2 * N) {
      m0 = hn::Max(m0, hn::LoadU(d, row + j));
      m1 = hn::Max(m1, hn::LoadU(d, row + j + N));
    }
    max_v = hn::GetLane(hn::MaxOfLanes(d, hn::Max(m0, m1)));
  }
  for (; j < n; ++j) max_v = row[j] > max_v ? row[j] : max_v;
  return max_v;
}

// row[j] = exp(row[j] - shift) for j < n, and the sum of the results,
// added in 16 fixed lanes as ExpRow does (so every target gives the same
// bits). -inf entries become 0; shift must be finite, and row[j] - shift
// <= 0 up to rounding (a larger argument gives 1).
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

// tanh(x), with Cephes tanhf's split: an odd polynomial for |x| < 0.625,
// else 1 - 2 / (exp(2|x|) + 1), written with e = exp(-2|x|) <= 0.29 as
// (1 - e) / (1 + e) so that ExpNonPositive serves. Relative error a few
// float32 ulp; |x| > 43.5 gives +-1 exactly; NaN stays NaN.
template <class D>
HWY_INLINE hn::Vec<D> TanhVec(D d, hn::Vec<D> x) {
  const auto ax = hn::Abs(x);
  const auto z = hn::Mul(ax, ax);
  auto p = hn::Set(d, -5.70498872745e-3f);
  p = hn::Add(hn::Mul(p, z), hn::Set(d, 2.06390887954e-2f));
  p = hn::Sub(hn::Mul(p, z), hn::Set(d, 5.37397155531e-2f));
  p = hn::Add(hn::Mul(p, z), hn::Set(d, 1.33314422036e-1f));
  p = hn::Sub(hn::Mul(p, z), hn::Set(d, 3.33332819422e-1f));
  const auto small = hn::Add(hn::Mul(hn::Mul(p, z), ax), ax);
  const auto e = ExpNonPositive(d, hn::Mul(hn::Set(d, -2.0f), ax));
  const auto one = hn::Set(d, 1.0f);
  const auto large = hn::Div(hn::Sub(one, e), hn::Add(one, e));
  const auto t = hn::IfThenElse(hn::Lt(ax, hn::Set(d, 0.625f)), small, large);
  // Sign of x back on; NaN keeps its own (the large branch's).
  return hn::CopySign(t, x);
}

// row[j] = cap * tanh(row[j] / cap) for j < n (cap > 0).
void SoftcapRow(float* row, int64_t n, float cap) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto cap_vec = hn::Set(d, cap);
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const auto x = hn::Div(hn::LoadU(d, row + j), cap_vec);
    hn::StoreU(hn::Mul(cap_vec, TanhVec(d, x)), d, row + j);
  }
  const hn::CappedTag<float, 1> d1;
  for (; j < n; ++j) {
    const auto x = hn::Div(hn::Set(d1, row[j]), hn::Set(d1, cap));
    row[j] = cap * hn::GetLane(TanhVec(d1, x));
  }
}

// row[j] -= slope * |q_pos - k_pos[j]| for j < n (ALiBi; positions as
// floats, exact below 2^24).
void AlibiRow(float* row, int64_t n, float slope, float q_pos, const float* k_pos) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto slope_vec = hn::Set(d, slope);
  const auto q_vec = hn::Set(d, q_pos);
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const auto dist = hn::Abs(hn::Sub(q_vec, hn::LoadU(d, k_pos + j)));
    hn::StoreU(hn::Sub(hn::LoadU(d, row + j), hn::Mul(slope_vec, dist)), d, row + j);
  }
  for (; j < n; ++j) {
    const float dist = q_pos > k_pos[j] ? q_pos - k_pos[j] : k_pos[j] - q_pos;
    row[j] = row[j] - slope * dist;
  }
}

// acc[j] += row[j] for j < n.
void AddRow(float* acc, const float* row, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    hn::StoreU(hn::Add(hn::LoadU(d, acc + j), hn::LoadU(d, row + j)), d, acc + j);
  }
  for (; j < n; ++j) acc[j] += row[j];
}

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace rope
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
