// Scalar float32 -> float8 (OCP FP8: E4M3FN and E5M2) conversions as
// FlashInfer's rope_quantize_fp8 stores its outputs, and float8 -> float32
// for readers of them. Shared by the server (CPU backend, CUDA kernels) and
// clients, so that every side rounds the same way.
//
// Narrowing is CUDA's __nv_cvt_float_to_fp8 with __NV_SATFINITE (the
// conversion FlashInfer's vec_t::cast_store performs): round to nearest
// even; a magnitude past the largest finite value, infinities included,
// becomes that value with its sign (E4M3FN: 448, code 0x7e; E5M2: 57344,
// 0x7b); NaN becomes 0x7f, whatever its sign; magnitudes at or under half
// the smallest subnormal become a signed zero. Written from those rules
// (the bits of the sign, exponent and mantissa fields), not from CUDA's
// header, and free of any framework type: header-only ROPE_HOST_DEVICE
// functions, callable from host code and from CUDA device code.
#ifndef ROPE_COMMON_FLOAT8_H_
#define ROPE_COMMON_FLOAT8_H_

#include <cstdint>

#include "common/half_float.h"  // FloatBits, BitsToFloat, ROPE_HOST_DEVICE

namespace rope {
namespace math {

// The parameters of a float8 format, and of its conversion from float32.
struct Float8Format {
  int mantissa_bits;          // 3 (E4M3FN) or 2 (E5M2)
  int exponent_bias;          // 7 or 15
  uint32_t saturate_at;       // float bits from which a magnitude saturates
  uint8_t max_code;           // the largest finite value's code
  uint32_t min_normal;        // float bits of the smallest normal value
  uint32_t subnormal_magic;   // float bits of 2^k whose ulp is the smallest subnormal
};

// E4M3FN: no infinities; 464 (halfway between 448 and the NaN code's 480)
// rounds to even, which is 448, so only what is above it saturates.
ROPE_HOST_DEVICE Float8Format Float8E4M3() {
  return Float8Format{3, 7, 0x43E80001u /* just above 464 */, 0x7eu, 0x3C800000u /* 2^-6 */,
                      0x46800000u /* 2^14 */};
}

// E5M2: 61440 (halfway between 57344 and the infinity 65536) rounds to even,
// which is infinity, so it saturates too.
ROPE_HOST_DEVICE Float8Format Float8E5M2() {
  return Float8Format{2, 15, 0x47700000u /* 61440 */, 0x7bu, 0x38800000u /* 2^-14 */,
                      0x43000000u /* 2^7 */};
}

ROPE_HOST_DEVICE uint8_t FloatToFloat8(float f, const Float8Format& fmt) {
  const uint32_t u = FloatBits(f);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;
  uint32_t code;
  if (a >= fmt.min_normal) {
    // Round the mantissa from 23 bits to the format's, to nearest even; a
    // carry moves into the exponent as it should.
    const int shift = 23 - fmt.mantissa_bits;
    const uint32_t rounded = a + ((1u << (shift - 1)) - 1u) + ((a >> shift) & 1u);
    code = (rounded >> shift) - (static_cast<uint32_t>(127 - fmt.exponent_bias)
                                 << fmt.mantissa_bits);
  } else {
    // Subnormal (or zero): adding 2^k, whose ulp is the smallest subnormal,
    // rounds the magnitude to a multiple of it, to nearest even (float32
    // addition), and leaves that multiple in the low mantissa bits.
    code = FloatBits(BitsToFloat(a) + BitsToFloat(fmt.subnormal_magic)) - fmt.subnormal_magic;
  }
  if (a >= fmt.saturate_at) code = fmt.max_code;
  code |= sign;
  if (a > 0x7f800000u) code = 0x7fu;  // NaN
  return static_cast<uint8_t>(code);
}

ROPE_HOST_DEVICE uint8_t FloatToFloat8E4M3(float f) { return FloatToFloat8(f, Float8E4M3()); }
ROPE_HOST_DEVICE uint8_t FloatToFloat8E5M2(float f) { return FloatToFloat8(f, Float8E5M2()); }

// Exact: every float8 value is a float32 value.
ROPE_HOST_DEVICE float Float8E4M3ToFloat(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xfu;
  const uint32_t mant = b & 0x7u;
  if (exp == 0xfu && mant == 0x7u) return BitsToFloat(sign | 0x7fc00000u);  // NaN
  if (exp == 0) {
    // mant * 2^-9, exact in float.
    const float v = static_cast<float>(mant) * 0.001953125f;
    return BitsToFloat(FloatBits(v) | sign);
  }
  return BitsToFloat(sign | ((exp + 127u - 7u) << 23) | (mant << 20));
}

ROPE_HOST_DEVICE float Float8E5M2ToFloat(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 2) & 0x1fu;
  const uint32_t mant = b & 0x3u;
  if (exp == 0x1fu) return BitsToFloat(sign | 0x7f800000u | (mant << 21));  // inf / NaN
  if (exp == 0) {
    // mant * 2^-16, exact in float.
    const float v = static_cast<float>(mant) * 1.52587890625e-5f;
    return BitsToFloat(FloatBits(v) | sign);
  }
  return BitsToFloat(sign | ((exp + 127u - 15u) << 23) | (mant << 21));
}

}  // namespace math
}  // namespace rope

#endif  // ROPE_COMMON_FLOAT8_H_
