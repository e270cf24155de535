#include "tests/unit/reference_rope.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace rope {
namespace reference {
namespace {

// Rounds a non-negative double holding an exact multiple of 2^-k to the
// nearest integer, ties to even, without depending on the FPU rounding mode.
double RoundHalfToEven(double x) {
  const double floor = std::floor(x);
  const double frac = x - floor;
  if (frac > 0.5) return floor + 1;
  if (frac < 0.5) return floor;
  return std::fmod(floor, 2.0) == 0.0 ? floor : floor + 1;
}

// A binary format with `mant_bits` stored mantissa bits and smallest normal
// 2^min_exp. Returns the spacing of representable values around magnitude a.
double Spacing(double a, int mant_bits, int min_exp) {
  if (a < std::ldexp(1.0, min_exp)) return std::ldexp(1.0, min_exp - mant_bits);
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): binade [2^(e-1), 2^e)
  return std::ldexp(1.0, e - 1 - mant_bits);
}

// Rounds |value| to the format's grid; returns the rounded magnitude (may be
// 2^max_exp_plus_one, meaning overflow).
double RoundToFormat(double a, int mant_bits, int min_exp) {
  const double quantum = Spacing(a, mant_bits, min_exp);
  return RoundHalfToEven(a / quantum) * quantum;
}

// Decodes sign/exponent/mantissa fields of a binary format with the given
// widths (IEEE semantics: all-ones exponent is inf/NaN, zero is subnormal).
float DecodeFields(uint32_t bits, int exp_bits, int mant_bits) {
  const uint32_t mant_mask = (1u << mant_bits) - 1;
  const uint32_t exp_mask = (1u << exp_bits) - 1;
  const bool negative = (bits >> (exp_bits + mant_bits)) & 1u;
  const uint32_t exp = (bits >> mant_bits) & exp_mask;
  const uint32_t mant = bits & mant_mask;
  const int bias = static_cast<int>(exp_mask >> 1);
  double magnitude;
  if (exp == exp_mask) {
    magnitude = mant == 0 ? std::numeric_limits<double>::infinity()
                          : std::numeric_limits<double>::quiet_NaN();
  } else if (exp == 0) {
    magnitude = std::ldexp(static_cast<double>(mant), 1 - bias - mant_bits);
  } else {
    magnitude = std::ldexp(static_cast<double>(mant | (1u << mant_bits)),
                           static_cast<int>(exp) - bias - mant_bits);
  }
  return static_cast<float>(negative ? -magnitude : magnitude);
}

// Encodes a magnitude that is exactly representable (finite, on the grid).
uint32_t EncodeMagnitude(double a, int exp_bits, int mant_bits) {
  const int bias = (1 << (exp_bits - 1)) - 1;
  const int min_exp = 1 - bias;
  if (a < std::ldexp(1.0, min_exp)) {
    return static_cast<uint32_t>(a / std::ldexp(1.0, min_exp - mant_bits));
  }
  int e = 0;
  std::frexp(a, &e);
  const int unbiased = e - 1;
  const double mant = (a / std::ldexp(1.0, unbiased) - 1.0) * std::ldexp(1.0, mant_bits);
  return (static_cast<uint32_t>(unbiased + bias) << mant_bits) | static_cast<uint32_t>(mant);
}

uint16_t Narrow(float value, int exp_bits, int mant_bits) {
  const uint32_t sign = std::signbit(value) ? (1u << (exp_bits + mant_bits)) : 0u;
  const uint32_t exp_all_ones = ((1u << exp_bits) - 1) << mant_bits;
  if (std::isnan(value)) return static_cast<uint16_t>(sign | exp_all_ones | (1u << (mant_bits - 1)));
  const double a = std::fabs(static_cast<double>(value));
  const int bias = (1 << (exp_bits - 1)) - 1;
  if (std::isinf(a)) return static_cast<uint16_t>(sign | exp_all_ones);
  const double rounded = RoundToFormat(a, mant_bits, 1 - bias);
  if (rounded >= std::ldexp(1.0, bias + 1)) return static_cast<uint16_t>(sign | exp_all_ones);
  return static_cast<uint16_t>(sign | EncodeMagnitude(rounded, exp_bits, mant_bits));
}

std::vector<double> InvFreqOf(const Rope& rope) { return InvFreq(rope.theta, rope.rotary_dim); }

void RotateHeadWith(const Rope& rope, const std::vector<double>& inv_freq, int64_t pos,
                    bool inverse, double* x) {
  for (int i = 0; i < rope.rotary_dim / 2; ++i) {
    int f0, f1;
    Pair(rope, i, &f0, &f1);
    double angle = static_cast<double>(pos) * inv_freq[i];
    if (inverse) angle = -angle;
    const double c = std::cos(angle), s = std::sin(angle);
    const double x0 = x[f0], x1 = x[f1];
    x[f0] = x0 * c - x1 * s;
    x[f1] = x0 * s + x1 * c;
  }
}

}  // namespace

float HalfToFloat(uint16_t bits) { return DecodeFields(bits, 5, 10); }
uint16_t FloatToHalf(float value) { return Narrow(value, 5, 10); }
float BFloat16ToFloat(uint16_t bits) { return DecodeFields(bits, 8, 7); }
uint16_t FloatToBFloat16(float value) { return Narrow(value, 8, 7); }

double HalfUlp(double value) { return Spacing(std::fabs(value), 10, -14); }
double BFloat16Ulp(double value) { return Spacing(std::fabs(value), 7, -126); }

std::vector<double> InvFreq(double theta, int rotary_dim) {
  std::vector<double> out(rotary_dim / 2);
  for (int i = 0; i < rotary_dim / 2; ++i) {
    out[i] = std::pow(theta, -2.0 * i / rotary_dim);
  }
  return out;
}

std::vector<long double> InvFreqLong(long double theta, int rotary_dim) {
  std::vector<long double> out(rotary_dim / 2);
  for (int i = 0; i < rotary_dim / 2; ++i) {
    out[i] = std::pow(theta, -2.0L * i / rotary_dim);
  }
  return out;
}

MaxError CompareRows(long double theta, int rotary_dim, long double factor, int64_t first_pos,
                     int64_t count, const float* cos, const float* sin) {
  const std::vector<long double> inv_freq = reference::InvFreqLong(theta, rotary_dim);
  const int half = rotary_dim / 2;
  MaxError worst;
  for (int64_t r = 0; r < count; ++r) {
    const long double pos = static_cast<long double>(first_pos + r);
    for (int i = 0; i < half; ++i) {
      const long double angle = pos * inv_freq[i];
      const double err_cos = static_cast<double>(
          std::fabs(static_cast<long double>(cos[r * half + i]) - factor * std::cos(angle)));
      const double err_sin = static_cast<double>(
          std::fabs(static_cast<long double>(sin[r * half + i]) - factor * std::sin(angle)));
      const double err = std::max(err_cos, err_sin);
      if (!(err <= worst.value) || worst.pos < 0) {  // NaN counts as worst
        worst = {err, first_pos + r, i};
      }
    }
  }
  return worst;
}

void Pair(const Rope& rope, int i, int* f0, int* f1) {
  if (rope.interleaved) {
    *f0 = rope.rotary_offset + 2 * i;
    *f1 = rope.rotary_offset + 2 * i + 1;
  } else {
    *f0 = rope.rotary_offset + i;
    *f1 = rope.rotary_offset + i + rope.rotary_dim / 2;
  }
}

double Float8ToDouble(uint8_t code, bool e5m2) {
  const int mantissa_bits = e5m2 ? 2 : 3;
  const int exponent_bits = e5m2 ? 5 : 4;
  const int bias = e5m2 ? 15 : 7;
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  const int exponent = (code >> mantissa_bits) & ((1 << exponent_bits) - 1);
  const int mantissa = code & ((1 << mantissa_bits) - 1);
  const int top = (1 << exponent_bits) - 1;
  if (e5m2 && exponent == top) {
    return mantissa == 0 ? sign * std::numeric_limits<double>::infinity()
                         : std::numeric_limits<double>::quiet_NaN();
  }
  if (!e5m2 && exponent == top && mantissa == 7) return std::numeric_limits<double>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(mantissa, 1 - bias - mantissa_bits);
  return sign * std::ldexp(1.0 + std::ldexp(mantissa, -mantissa_bits), exponent - bias);
}

uint8_t DoubleToFloat8(double value, bool e5m2) {
  if (std::isnan(value)) return 0x7f;
  // Halfway from the largest finite value to the next step (E4M3FN's NaN
  // slot at 480, E5M2's infinity at 65536): a tie there rounds to the even
  // code, which is E4M3FN's 448 (0x7e) but E5M2's infinity (saturated).
  const double halfway = e5m2 ? 61440.0 : 464.0;
  const double magnitude = std::fabs(value);
  uint8_t best = 0;
  if (magnitude > halfway || (e5m2 && magnitude == halfway)) {
    best = e5m2 ? 0x7b : 0x7e;
  } else {
    double best_distance = std::numeric_limits<double>::infinity();
    for (int code = 0; code < 0x80; ++code) {
      const double v = Float8ToDouble(static_cast<uint8_t>(code), e5m2);
      if (!std::isfinite(v)) continue;
      const double distance = std::fabs(v - magnitude);
      if (distance < best_distance || (distance == best_distance && code % 2 == 0)) {
        best_distance = distance;
        best = static_cast<uint8_t>(code);
      }
    }
  }
  return static_cast<uint8_t>(best | (std::signbit(value) ? 0x80 : 0));
}

void RotateHead(const Rope& rope, int64_t pos, bool inverse, double* x) {
  RotateHeadWith(rope, InvFreqOf(rope), pos, inverse, x);
}

void RotateTensor(const Rope& rope, int64_t batch, int64_t seq, int64_t heads,
                  const std::vector<int64_t>& positions, bool inverse, std::vector<double>* x) {
  const std::vector<double> inv_freq = InvFreqOf(rope);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s < seq; ++s) {
      for (int64_t h = 0; h < heads; ++h) {
        double* head = x->data() + ((b * seq + s) * heads + h) * rope.head_dim;
        RotateHeadWith(rope, inv_freq, positions[b * seq + s], inverse, head);
      }
    }
  }
}

AttentionResult Attention(const Rope& rope, const AttentionShape& shape,
                          const std::vector<double>& q, const std::vector<double>& k,
                          const std::vector<double>* v, int64_t q_start, int64_t k_start,
                          bool causal, bool softmax, double scale) {
  const int64_t B = shape.batch, Sq = shape.q_seq, Sk = shape.k_seq;
  const int64_t Hq = shape.q_heads, Hkv = shape.k_heads, D = rope.head_dim, Dv = shape.v_dim;
  const int64_t group = Hq / Hkv;
  const double kNegInf = -std::numeric_limits<double>::infinity();

  std::vector<int64_t> q_pos(B * Sq), k_pos(B * Sk);
  for (int64_t i = 0; i < B * Sq; ++i) q_pos[i] = q_start + i % Sq;
  for (int64_t i = 0; i < B * Sk; ++i) k_pos[i] = k_start + i % Sk;
  std::vector<double> rq = q, rk = k;
  RotateTensor(rope, B, Sq, Hq, q_pos, /*inverse=*/false, &rq);
  RotateTensor(rope, B, Sk, Hkv, k_pos, /*inverse=*/false, &rk);

  AttentionResult result;
  result.scores.assign(B * Hq * Sq * Sk, 0.0);
  if (v != nullptr) result.output.assign(B * Sq * Hq * Dv, 0.0);
  std::vector<double> row(Sk), prob(Sk);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < Sq; ++i) {
        const double* qv = rq.data() + ((b * Sq + i) * Hq + h) * D;
        bool any_visible = false;
        for (int64_t j = 0; j < Sk; ++j) {
          if (causal && k_start + j > q_start + i) {
            row[j] = kNegInf;
            continue;
          }
          const double* kv = rk.data() + ((b * Sk + j) * Hkv + hk) * D;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += qv[d] * kv[d];
          row[j] = dot * scale;
          any_visible = true;
        }
        // Probabilities; an all-masked row has none (all zero).
        std::fill(prob.begin(), prob.end(), 0.0);
        if (any_visible) {
          double max = kNegInf;
          for (int64_t j = 0; j < Sk; ++j) max = std::max(max, row[j]);
          double sum = 0;
          for (int64_t j = 0; j < Sk; ++j) {
            prob[j] = row[j] == kNegInf ? 0.0 : std::exp(row[j] - max);
            sum += prob[j];
          }
          for (int64_t j = 0; j < Sk; ++j) prob[j] /= sum;
        }
        double* out_scores = result.scores.data() + ((b * Hq + h) * Sq + i) * Sk;
        for (int64_t j = 0; j < Sk; ++j) out_scores[j] = softmax ? prob[j] : row[j];
        if (v != nullptr) {
          double* y = result.output.data() + ((b * Sq + i) * Hq + h) * Dv;
          for (int64_t j = 0; j < Sk; ++j) {
            const double* vv = v->data() + ((b * Sk + j) * Hkv + hk) * Dv;
            for (int64_t d = 0; d < Dv; ++d) y[d] += prob[j] * vv[d];
          }
        }
      }
    }
  }
  return result;
}

}  // namespace reference
}  // namespace rope
