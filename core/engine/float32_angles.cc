// Compiled with -ffp-contract=off (core/CMakeLists.txt): every operation
// below is one float32 IEEE operation, as torch's, never fused.
#include "core/engine/float32_angles.h"

#include <sleef.h>

#include <cmath>
#include <variant>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace rope {
namespace {

// _compute_default_rope_parameters:
//   1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
// `base ** t` is torch.pow(float32(base), t), SLEEF's powf (u10) on the
// CPU; `1.0 / x` is torch's reciprocal(x) * 1.0.
std::vector<float> DefaultInvFreq(double theta, uint32_t rotary_dim) {
  const float base = static_cast<float>(theta);
  const float dim = static_cast<float>(rotary_dim);
  std::vector<float> inv(rotary_dim / 2);
  for (uint32_t i = 0; i < rotary_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / dim;
    const float power = Sleef_powf_u10(base, exponent);
    inv[i] = 1.0f / power;
  }
  return inv;
}

// _compute_llama3_parameters on the default frequencies, operation by
// operation: a Python scalar meets a float32 tensor as float32, and
// `scalar / tensor` is reciprocal(tensor) * scalar.
void Llama3(const Llama3Scaling& s, std::vector<float>* inv) {
  const float factor = static_cast<float>(s.factor);
  const float low = static_cast<float>(s.low_freq_factor);
  const double old_len = s.original_max_position_embeddings;
  const float low_wavelen = static_cast<float>(old_len / s.low_freq_factor);
  const float high_wavelen = static_cast<float>(old_len / s.high_freq_factor);
  const float two_pi = static_cast<float>(2 * M_PI);
  const float old_len_f = static_cast<float>(old_len);
  const float band = static_cast<float>(s.high_freq_factor - s.low_freq_factor);
  for (float& f : *inv) {
    const float wavelen = (1.0f / f) * two_pi;
    const float scaled = wavelen > low_wavelen ? f / factor : f;
    const float smooth = ((1.0f / wavelen) * old_len_f - low) / band;
    const float smoothed = ((1.0f - smooth) * scaled) / factor + smooth * scaled;
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    f = medium ? smoothed : scaled;
  }
}

#if defined(__x86_64__)
// SLEEF's AVX2 cosf / sinf, 8 angles at a time: the functions torch's
// float32 kernels use on an AVX2 CPU. Only called when the CPU has AVX2.
// (sleef.h declares the 8-lane functions only where AVX is on for the whole
// file; this one file is built for any x86-64.)
// The target attribute on each function, not `#pragma GCC target`, which
// clang (the fuzz and sanitizer builds) ignores.
#define ROPE_AVX2_FMA __attribute__((target("avx2,fma")))
extern "C" ROPE_AVX2_FMA __m256 Sleef_cosf8_u10(__m256);
extern "C" ROPE_AVX2_FMA __m256 Sleef_sinf8_u10(__m256);

ROPE_AVX2_FMA void CosSinAvx2(const float* angles, int64_t n, float* c, float* s) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 a = _mm256_loadu_ps(angles + i);
    _mm256_storeu_ps(c + i, Sleef_cosf8_u10(a));
    _mm256_storeu_ps(s + i, Sleef_sinf8_u10(a));
  }
  if (i < n) {  // torch loads a partial vector for the tail: the same lanes' values
    alignas(32) float tail[8] = {}, tail_c[8], tail_s[8];
    for (int64_t j = i; j < n; ++j) tail[j - i] = angles[j];
    const __m256 a = _mm256_load_ps(tail);
    _mm256_store_ps(tail_c, Sleef_cosf8_u10(a));
    _mm256_store_ps(tail_s, Sleef_sinf8_u10(a));
    for (int64_t j = i; j < n; ++j) {
      c[j] = tail_c[j - i];
      s[j] = tail_s[j - i];
    }
  }
}
#undef ROPE_AVX2_FMA

bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
#endif

void CosSin(const float* angles, int64_t n, float* c, float* s) {
#if defined(__x86_64__)
  if (HasAvx2()) {
    CosSinAvx2(angles, n, c, s);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) {
    c[i] = static_cast<float>(std::cos(static_cast<double>(angles[i])));
    s[i] = static_cast<float>(std::sin(static_cast<double>(angles[i])));
  }
}

}  // namespace

bool HasFloat32Angles(const ScalingConfig& scaling) {
  return std::holds_alternative<NoScaling>(scaling) ||
         std::holds_alternative<LinearScaling>(scaling) ||
         std::holds_alternative<Llama3Scaling>(scaling);
}

std::vector<float> TransformersFloat32InvFreq(const TableKey& key) {
  std::vector<float> inv = DefaultInvFreq(key.theta, key.rotary_dim);
  if (const auto* linear = std::get_if<LinearScaling>(&key.scaling)) {
    const float factor = static_cast<float>(linear->factor);
    for (float& f : inv) f = f / factor;
  } else if (const auto* llama3 = std::get_if<Llama3Scaling>(&key.scaling)) {
    Llama3(*llama3, &inv);
  }
  return inv;
}

void FillFloat32AngleRows(const std::vector<float>& inv_freq, int64_t first_pos, int64_t count,
                          float* cos_out, float* sin_out) {
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  std::vector<float> angles(static_cast<size_t>(half));
  for (int64_t row = 0; row < count; ++row) {
    const float pos = static_cast<float>(first_pos + row);
    for (int64_t i = 0; i < half; ++i) angles[i] = pos * inv_freq[i];
    CosSin(angles.data(), half, cos_out + row * half, sin_out + row * half);
  }
}

}  // namespace rope
