// Scalar IEEE binary16 ("float16") and bfloat16 <-> float32 conversions,
// shared by the server (CPU backend, CUDA kernels) and the client (tensor
// helpers), so that both sides round the same way.
//
// Narrowing rounds to nearest even, keeps NaN a (quiet) NaN and overflows to
// infinity, as torch does. Every function is a header-only inline function
// marked ROPE_HOST_DEVICE: callable from host code and, compiled by nvcc, from
// CUDA device code. Free of any framework type.
#ifndef ROPE_COMMON_HALF_FLOAT_H_
#define ROPE_COMMON_HALF_FLOAT_H_

#include <cstdint>
#include <cstring>

#ifndef ROPE_HOST_DEVICE
#if defined(__CUDACC__)
#define ROPE_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define ROPE_HOST_DEVICE inline
#endif
#endif

namespace rope {
namespace math {

ROPE_HOST_DEVICE uint32_t FloatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

ROPE_HOST_DEVICE float BitsToFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

ROPE_HOST_DEVICE float BFloat16ToFloat(uint16_t h) {
  return BitsToFloat(static_cast<uint32_t>(h) << 16);
}

ROPE_HOST_DEVICE uint16_t FloatToBFloat16(float f) {
  const uint32_t u = FloatBits(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x0040u;  // NaN: keep sign, force quiet bit
  // A select rather than an early return, so that row loops vectorise.
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

ROPE_HOST_DEVICE float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) {  // inf / NaN
    return BitsToFloat(sign | 0x7f800000u | (mant << 13));
  }
  if (exp == 0) {
    if (mant == 0) return BitsToFloat(sign);
    // Subnormal half: value = mant * 2^-24, exact in float.
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return BitsToFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

ROPE_HOST_DEVICE uint16_t FloatToHalf(float f) {
  uint32_t u = FloatBits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {
    // Result is subnormal or zero: round abs * 2^24 to an integer, ties to
    // even. Adding 0.5 (as float, exponent 2^-1) does exactly that in
    // float arithmetic because the sum's ulp is 2^-24.
    float v = BitsToFloat(abs) + 0.5f;
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(FloatBits(v) - 0x3f000000u));
  }
  // Normal: rebias exponent, round mantissa (13 bits dropped) to nearest even.
  uint32_t mant_odd = (abs >> 13) & 1u;
  abs += 0xc8000000u + 0xfffu + mant_odd;  // (-112 << 23) + rounding bias
  return static_cast<uint16_t>(sign | static_cast<uint16_t>(abs >> 13));
}

}  // namespace math
}  // namespace rope

#endif  // ROPE_COMMON_HALF_FLOAT_H_
