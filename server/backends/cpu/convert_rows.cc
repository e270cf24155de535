#include "server/backends/cpu/convert_rows.h"

#include "server/engine/rope_math.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#define ROPE_HAVE_F16C_PATH 1
#endif

namespace rope {
namespace {

#if ROPE_HAVE_F16C_PATH
bool CpuHasF16c() {
  // F16C straight from CPUID: clang 14's __builtin_cpu_supports does not know
  // "f16c". Its "avx" also checks that the OS saves the AVX registers.
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
    return (ecx & bit_F16C) != 0 && __builtin_cpu_supports("avx");
  }();
  return has;
}

__attribute__((target("avx,f16c"))) void HalfRowToFloatF16c(const uint16_t* src, int64_t n,
                                                            float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = math::HalfToFloat(src[i]);
}

__attribute__((target("avx,f16c"))) void FloatRowToHalfF16c(const float* src, int64_t n,
                                                            uint16_t* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = math::FloatToHalf(src[i]);
}
#endif

}  // namespace

void HalfRowToFloat(const uint16_t* src, int64_t n, float* dst) {
#if ROPE_HAVE_F16C_PATH
  if (CpuHasF16c()) return HalfRowToFloatF16c(src, n, dst);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = math::HalfToFloat(src[i]);
}

void FloatRowToHalf(const float* src, int64_t n, uint16_t* dst) {
#if ROPE_HAVE_F16C_PATH
  if (CpuHasF16c()) return FloatRowToHalfF16c(src, n, dst);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = math::FloatToHalf(src[i]);
}

void BFloat16RowToFloat(const uint16_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = math::BFloat16ToFloat(src[i]);
}

void FloatRowToBFloat16(const float* src, int64_t n, uint16_t* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = math::FloatToBFloat16(src[i]);
}

}  // namespace rope
