// The row kernels of the tiled attention pass (cpu_tiled_attention.cc) on
// Highway vectors: row_max, softcap_row, alibi_row, add_row,
// skinny_logits and skinny_values of cpu_kernels.h for one target (exp_sum_row is
// softmax_simd-inl.h's ExpSumRow). Included once per target by cpu_kernels.cc,
// after softmax_simd-inl.h, whose ExpNonPositive and 16-lane summation they
// share: every target gives the same bits.

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

// The sum of 16 lanes as a fixed tree, (l, l + 8), then (l, l + 4),
// (l, l + 2), (l, l + 1): every target adds in this order, and the depth is
// 4 adds rather than a chain of 15.
HWY_INLINE float TreeSum16(const float* lanes) {
  float t[8];
  for (int l = 0; l < 8; ++l) t[l] = lanes[l] + lanes[l + 8];
  for (int l = 0; l < 4; ++l) t[l] = t[l] + t[l + 4];
  return (t[0] + t[2]) + (t[1] + t[3]);
}

// TreeSum16 of the 16 lanes held in `parts` vectors of D16 (lane l of
// vector u is lane u * N + l), in registers on the fixed-width targets: the
// same additions in the same order, without a round trip through memory
// and fifteen scalar adds per logit.
template <class D>
HWY_INLINE float TreeSumVectors(D d, const hn::Vec<D>* v) {
#if !HWY_HAVE_SCALABLE && HWY_TARGET != HWY_SCALAR
  constexpr size_t kN = hn::MaxLanes(D());
  if constexpr (kN == 16 || kN == 8 || kN == 4) {
    const hn::CappedTag<float, 4> d4;
    // t[l] + t[l + 4] for l < 4, where t[l] = lanes[l] + lanes[l + 8].
    auto quarter = hn::Zero(d4);
    if constexpr (kN == 16) {
      const hn::Half<D> d8;
      const auto t = hn::Add(hn::LowerHalf(d8, v[0]), hn::UpperHalf(d8, v[0]));
      quarter = hn::Add(hn::LowerHalf(d4, t), hn::UpperHalf(d4, t));
    } else if constexpr (kN == 8) {
      const auto t = hn::Add(v[0], v[1]);
      quarter = hn::Add(hn::LowerHalf(d4, t), hn::UpperHalf(d4, t));
    } else {
      quarter = hn::Add(hn::Add(v[0], v[2]), hn::Add(v[1], v[3]));
    }
    // Lanes 0, 1: t0 + t2, t1 + t3; then lane 0: their sum.
    const auto pairs = hn::Add(quarter, hn::Shuffle1032(quarter));
    return hn::GetLane(hn::Add(pairs, hn::Shuffle2301(pairs)));
  }
#endif
  HWY_ALIGN float lanes[kSumLanes];
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t u = 0; u * N < kSumLanes; ++u) hn::StoreU(v[u], d, lanes + u * N);
  return TreeSum16(lanes);
}

// kR query rows against key row k: each row's d products in its 16 fixed
// lanes (features l, l + 16, ... in lane l), the key's loads shared by the
// rows; then each row's lanes by TreeSum16.
template <int kR>
HWY_INLINE void LogitsBlock(const float* q, const float* k, int64_t d, float scale, float* s,
                            int64_t s_stride) {
  const D16 df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t parts = kSumLanes / N;  // 1, 2 or 4 (16 on HWY_SCALAR)
  HWY_ALIGN float lanes[kR][kSumLanes];
  int64_t whole = 0;
  if (parts <= 4) {
    whole = d / kSumLanes * kSumLanes;
    hn::Vec<D16> acc[kR][4];
    for (int r = 0; r < kR; ++r) {
      for (int64_t u = 0; u < parts; ++u) acc[r][u] = hn::Zero(df);
    }
    for (int64_t f = 0; f < whole; f += kSumLanes) {
      for (int64_t u = 0; u < parts; ++u) {
        const auto kv = hn::LoadU(df, k + f + u * N);
        for (int r = 0; r < kR; ++r) {
          acc[r][u] = hn::Add(acc[r][u], hn::Mul(hn::LoadU(df, q + r * d + f + u * N), kv));
        }
      }
    }
    if (whole == d) {
      for (int r = 0; r < kR; ++r) s[r * s_stride] = TreeSumVectors(df, acc[r]) * scale;
      return;
    }
    for (int r = 0; r < kR; ++r) {
      for (int64_t u = 0; u < parts; ++u) hn::StoreU(acc[r][u], df, lanes[r] + u * N);
    }
  } else {
    for (int r = 0; r < kR; ++r) {
      for (int64_t l = 0; l < kSumLanes; ++l) lanes[r][l] = 0.0f;
    }
  }
  for (int r = 0; r < kR; ++r) {
    for (int64_t f = whole; f < d; ++f) lanes[r][f % kSumLanes] += q[r * d + f] * k[f];
    s[r * s_stride] = TreeSum16(lanes[r]) * scale;
  }
}

// s[r * s_stride] = scale * (q[r] . k) for r < m: one key's logits, by
// blocks of 4 query rows.
HWY_INLINE void LogitsOfKey(const float* q, int64_t m, const float* k, int64_t d, float scale,
                            float* s, int64_t s_stride) {
  int64_t r = 0;
  for (; r + 4 <= m; r += 4) LogitsBlock<4>(q + r * d, k, d, scale, s + r * s_stride, s_stride);
  switch (m - r) {
    case 3: LogitsBlock<3>(q + r * d, k, d, scale, s + r * s_stride, s_stride); break;
    case 2: LogitsBlock<2>(q + r * d, k, d, scale, s + r * s_stride, s_stride); break;
    case 1: LogitsBlock<1>(q + r * d, k, d, scale, s + r * s_stride, s_stride); break;
    default: break;
  }
}

// s[r * n + j] = scale * (q[r] . k[j]) for r < m, j < n (rows of d floats):
// the logits of a few query rows (decode), where a GEMM would spend its time
// packing the key tile. The d products are added in 16 fixed lanes (lane l
// takes features l, l + 16, ...), then the lanes by TreeSum16: every target
// gives the same bits.
void SkinnyLogits(const float* q, int64_t m, const float* k, int64_t n, int64_t d, float scale,
                  float* s) {
  for (int64_t j = 0; j < n; ++j) LogitsOfKey(q, m, k + j * d, d, scale, s + j, n);
}

// kR output rows, two vectors of columns from c, kept in registers while
// the keys go by: acc[r] += p[r][j] * v[j] for j in order, v read as Io's
// storage and widened in registers.
template <class Io, int kR, class DF>
HWY_INLINE void ValuesBlock(DF df, const float* p, int64_t n, const typename Io::T* v,
                            int64_t ld, int64_t dv, int64_t c, float* o) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  hn::Vec<DF> acc0[kR], acc1[kR];
  for (int r = 0; r < kR; ++r) {
    acc0[r] = hn::LoadU(df, o + r * dv + c);
    acc1[r] = hn::LoadU(df, o + r * dv + c + N);
  }
  for (int64_t j = 0; j < n; ++j) {
    const auto v0 = Io::Load(df, v + j * ld + c);
    const auto v1 = Io::Load(df, v + j * ld + c + N);
    for (int r = 0; r < kR; ++r) {
      const auto w = hn::Set(df, p[r * n + j]);
      acc0[r] = hn::Add(acc0[r], hn::Mul(w, v0));
      acc1[r] = hn::Add(acc1[r], hn::Mul(w, v1));
    }
  }
  for (int r = 0; r < kR; ++r) {
    hn::StoreU(acc0[r], df, o + r * dv + c);
    hn::StoreU(acc1[r], df, o + r * dv + c + N);
  }
}

template <class Io>
void SkinnyValuesOf(const float* p, int64_t m, int64_t n, const typename Io::T* v, int64_t ld,
                    int64_t dv, float* o) {
  const FullF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t c = 0;
  for (; c + 2 * N <= dv; c += 2 * N) {
    int64_t r = 0;
    for (; r + 4 <= m; r += 4) ValuesBlock<Io, 4>(df, p + r * n, n, v, ld, dv, c, o + r * dv);
    switch (m - r) {
      case 3: ValuesBlock<Io, 3>(df, p + r * n, n, v, ld, dv, c, o + r * dv); break;
      case 2: ValuesBlock<Io, 2>(df, p + r * n, n, v, ld, dv, c, o + r * dv); break;
      case 1: ValuesBlock<Io, 1>(df, p + r * n, n, v, ld, dv, c, o + r * dv); break;
      default: break;
    }
  }
  const hn::CappedTag<float, 1> d1;
  for (; c < dv; ++c) {
    for (int64_t r = 0; r < m; ++r) {
      float acc = o[r * dv + c];
      for (int64_t j = 0; j < n; ++j) {
        acc = acc + p[r * n + j] * hn::GetLane(Io::Load(d1, v + j * ld + c));
      }
      o[r * dv + c] = acc;
    }
  }
}

// o[r][c] += sum over j < n, in order, of p[r * n + j] * v[j * ld + c], for
// r < m, c < dv, v of `dtype` (widened in registers): P v for a few query
// rows, their outputs in registers by blocks of 4 rows x 2 vectors while
// the keys go by. Element-wise (each output adds its terms in key order), so
// any vector width gives the same bits.
void SkinnyValues(const float* p, int64_t m, int64_t n, DType dtype, const void* v, int64_t ld,
                  int64_t dv, float* o) {
  switch (dtype) {
    case DType::kFloat32:
      return SkinnyValuesOf<F32Io>(p, m, n, static_cast<const float*>(v), ld, dv, o);
    case DType::kFloat16:
      return SkinnyValuesOf<F16Io>(p, m, n, static_cast<const uint16_t*>(v), ld, dv, o);
    case DType::kBFloat16:
      return SkinnyValuesOf<Bf16Io>(p, m, n, static_cast<const uint16_t*>(v), ld, dv, o);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace rope
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
