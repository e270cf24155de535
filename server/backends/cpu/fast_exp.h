// A vectorisable exp for softmax on the CPU. glibc's expf is a call per
// element, which keeps the softmax loop scalar; this is plain arithmetic the
// compiler turns into SIMD.
#ifndef ROPE_BACKENDS_CPU_FAST_EXP_H_
#define ROPE_BACKENDS_CPU_FAST_EXP_H_

#include <cstdint>
#include <cstring>

namespace rope {

// exp(x) for x <= 0 (softmax arguments after subtracting the row maximum).
// Relative error below 2e-7 (a few float ulp) for x >= -87; returns 0 below
// that, where exp(x) < 1.7e-38 is no longer a normal float. NaN gives NaN
// (non-finite scores produce it); x > 0, outside the contract, gives 1. Both
// are clamped before the float-to-int conversion, for which they would be
// undefined behaviour.
inline float ExpNonPositive(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // ln 2 split in two so n * kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  // Selects, not branches, so that loops calling this vectorise.
  const float xc = x >= -87.0f ? (x < 0.0f ? x : 0.0f) : -87.0f;  // NaN -> -87
  const float n = (xc * kLog2e + kRoundMagic) - kRoundMagic;  // round(x / ln 2)
  const float r = xc - n * kLn2Hi - n * kLn2Lo;                // |r| <= ln2 / 2
  // Minimax polynomial for exp(r) on [-ln2/2, ln2/2] (Cephes expf).
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;  // 2^n, n in [-126, 0]
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  const float result = p * scale;
  return x >= -87.0f ? result : (x < -87.0f ? 0.0f : x);  // the last: NaN
}

}  // namespace rope

#endif  // ROPE_BACKENDS_CPU_FAST_EXP_H_
