// RoPE frequency scaling variants: the parameters of each, their defaults
// and validation, and how each changes inv_freq and the attention factor.
// Formulas follow Hugging Face transformers' modeling_rope_utils.py and
// Meta's apply_scaling (Llama 3.1), computed in double.
#ifndef ROPE_ENGINE_SCALING_H_
#define ROPE_ENGINE_SCALING_H_

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"

namespace rope {

// Plain RoPE.
struct NoScaling {
  friend bool operator==(const NoScaling&, const NoScaling&) { return true; }
  template <typename H>
  friend H AbslHashValue(H h, const NoScaling&) { return h; }
};

// Position interpolation: inv_freq / factor.
struct LinearScaling {
  double factor = 0;  // required, > 0
  friend bool operator==(const LinearScaling& a, const LinearScaling& b) {
    return a.factor == b.factor;
  }
  template <typename H>
  friend H AbslHashValue(H h, const LinearScaling& s) { return H::combine(std::move(h), s.factor); }
};

// Dynamic NTK (HF "dynamic"): for a sequence length L above
// original_max_position_embeddings the base becomes
//   theta * (factor * L / original - (factor - 1)) ^ (r / (r - 2)).
// The server takes L = the largest position the request uses + 1 (for
// GetTable: start + count), so the table, and its cache entry, depend on the
// request; the key holds the resulting base.
struct DynamicNtkScaling {
  double factor = 0;                          // required, > 0
  uint32_t original_max_position_embeddings = 0;  // required, > 0
  friend bool operator==(const DynamicNtkScaling& a, const DynamicNtkScaling& b) {
    return a.factor == b.factor &&
           a.original_max_position_embeddings == b.original_max_position_embeddings;
  }
  template <typename H>
  friend H AbslHashValue(H h, const DynamicNtkScaling& s) {
    return H::combine(std::move(h), s.factor, s.original_max_position_embeddings);
  }
};

// YaRN (HF "yarn"): frequencies ramp linearly between interpolation
// (inv_freq / factor) and extrapolation (inv_freq) across the correction
// range [low, high] found from beta_fast / beta_slow (floor/ceil when
// `truncate`, HF's default; fractional otherwise, as gpt-oss ships), and
// cos/sin are multiplied by attention_factor.
struct YarnScaling {
  double factor = 0;                              // required, > 0
  uint32_t original_max_position_embeddings = 0;  // required, > 0
  double beta_fast = 0;                           // 0 -> 32
  double beta_slow = 0;                           // 0 -> 1
  double mscale = 0;                              // 0 -> unset
  double mscale_all_dim = 0;                      // 0 -> unset
  double attention_factor = 0;                    // 0 -> derived from factor / mscale
  bool truncate = true;                           // floor/ceil the correction range
  friend bool operator==(const YarnScaling& a, const YarnScaling& b) {
    return a.factor == b.factor &&
           a.original_max_position_embeddings == b.original_max_position_embeddings &&
           a.beta_fast == b.beta_fast && a.beta_slow == b.beta_slow && a.mscale == b.mscale &&
           a.mscale_all_dim == b.mscale_all_dim && a.attention_factor == b.attention_factor &&
           a.truncate == b.truncate;
  }
  template <typename H>
  friend H AbslHashValue(H h, const YarnScaling& s) {
    return H::combine(std::move(h), s.factor, s.original_max_position_embeddings, s.beta_fast,
                      s.beta_slow, s.mscale, s.mscale_all_dim, s.attention_factor, s.truncate);
  }
};

// Llama 3.1 (Meta apply_scaling, HF "llama3"): wavelengths above
// original / low_freq_factor are divided by factor, those below
// original / high_freq_factor are kept, and those between are smoothed.
// low_freq_factor == high_freq_factor (Llama 4 Scout) leaves no band to
// smooth: every wavelength is either divided or kept.
struct Llama3Scaling {
  double factor = 0;                              // 0 -> 8
  double low_freq_factor = 0;                     // 0 -> 1; <= high_freq_factor
  double high_freq_factor = 0;                    // 0 -> 4
  uint32_t original_max_position_embeddings = 0;  // 0 -> 8192
  friend bool operator==(const Llama3Scaling& a, const Llama3Scaling& b) {
    return a.factor == b.factor && a.low_freq_factor == b.low_freq_factor &&
           a.high_freq_factor == b.high_freq_factor &&
           a.original_max_position_embeddings == b.original_max_position_embeddings;
  }
  template <typename H>
  friend H AbslHashValue(H h, const Llama3Scaling& s) {
    return H::combine(std::move(h), s.factor, s.low_freq_factor, s.high_freq_factor,
                      s.original_max_position_embeddings);
  }
};

// LongRoPE (HF "longrope", Phi-3 / Phi-4): inv_freq[i] = theta^(-2i/r) / ext[i]
// with ext = long_factor or short_factor, and cos/sin multiplied by
// attention_factor. Two rules, chosen by max_position_embeddings:
//   set (transformers' rule): long_factor iff the request's largest position
//     + 1 > original_max_position_embeddings (GetTable: start + count), chosen
//     per request, each list its own table; attention_factor 0 means
//     sqrt(1 + ln(s) / ln(original)), s = max_position_embeddings / original
//     (1 when s <= 1).
//   0 (the rule before max_position_embeddings existed, kept for clients that
//     do not send it): long_factor iff config.max_len > original, fixed per
//     config; s = max_len / original.
struct LongRopeScaling {
  std::vector<double> short_factor;               // rotary_dim / 2 values, each > 0
  std::vector<double> long_factor;                // rotary_dim / 2 values, each > 0
  uint32_t original_max_position_embeddings = 0;  // required, > 0
  double attention_factor = 0;                    // 0 -> derived
  uint32_t max_position_embeddings = 0;           // 0 -> max_len, per config (see above)
  friend bool operator==(const LongRopeScaling& a, const LongRopeScaling& b) {
    return a.short_factor == b.short_factor && a.long_factor == b.long_factor &&
           a.original_max_position_embeddings == b.original_max_position_embeddings &&
           a.attention_factor == b.attention_factor &&
           a.max_position_embeddings == b.max_position_embeddings;
  }
  template <typename H>
  friend H AbslHashValue(H h, const LongRopeScaling& s) {
    return H::combine(std::move(h), s.short_factor, s.long_factor,
                      s.original_max_position_embeddings, s.attention_factor,
                      s.max_position_embeddings);
  }
};

// Proportional (HF "proportional", Gemma 4's full-attention layers): the
// exponents run over the whole rotary width r, and only the first
// rotated_pairs frequencies are nonzero:
//   inv_freq[i] = theta^(-2i/r) / factor   for i < rotated_pairs,
//   inv_freq[i] = 0                         for rotated_pairs <= i < r/2.
// A zero frequency leaves its pair as it is (cos 1, sin 0), so this is a
// partial rotary whose unrotated features pair at distance r/2 in the half
// layout, unlike rotary_dim's prefix; rotated_pairs = r/2 is linear scaling.
struct ProportionalScaling {
  double factor = 0;           // 0 -> 1; > 0
  uint32_t rotated_pairs = 0;  // required, 1 .. rotary_dim/2
  friend bool operator==(const ProportionalScaling& a, const ProportionalScaling& b) {
    return a.factor == b.factor && a.rotated_pairs == b.rotated_pairs;
  }
  template <typename H>
  friend H AbslHashValue(H h, const ProportionalScaling& s) {
    return H::combine(std::move(h), s.factor, s.rotated_pairs);
  }
};

// Dynamic NTK with alpha (HunYuan; transformers' HunYuanDenseV1RotaryEmbedding
// and vLLM's DynamicNTKAlphaRotaryEmbedding): a config.json's rope_type
// "dynamic" with an "alpha" key. A fixed base, whatever the sequence length:
//   base = theta * alpha ^ (r / (r - 2)),  inv_freq[i] = base^(-2i/r).
// No factor takes part.
struct DynamicNtkAlphaScaling {
  double alpha = 0;  // required, > 0; r >= 4
  friend bool operator==(const DynamicNtkAlphaScaling& a, const DynamicNtkAlphaScaling& b) {
    return a.alpha == b.alpha;
  }
  template <typename H>
  friend H AbslHashValue(H h, const DynamicNtkAlphaScaling& s) {
    return H::combine(std::move(h), s.alpha);
  }
};

// Fixed NTK scaling ("ntk", vLLM's NTKScalingRotaryEmbedding; only the
// serving engines define it). With s = factor:
//   fixed (no mixed_b): inv_freq[i] = (theta * s)^(-2i/r) / s^(2/r)
//   mixed:              inv_freq[i] = theta^(-2i/r) / exp(a * (i + 1)^b),
//                       a = ln(s) / (r/2)^b, b = mixed_b.
struct NtkScaling {
  double factor = 0;        // required, > 0
  bool has_mixed_b = false;  // the mixed form, with exponent mixed_b
  double mixed_b = 0;       // finite (0 is a valid exponent)
  friend bool operator==(const NtkScaling& a, const NtkScaling& b) {
    return a.factor == b.factor && a.has_mixed_b == b.has_mixed_b &&
           (!a.has_mixed_b || a.mixed_b == b.mixed_b);
  }
  template <typename H>
  friend H AbslHashValue(H h, const NtkScaling& s) {
    return H::combine(std::move(h), s.factor, s.has_mixed_b, s.has_mixed_b ? s.mixed_b : 0.0);
  }
};

// DeepSeek's YaRN as vLLM's DeepseekScalingRotaryEmbedding computes it
// ("deepseek_yarn": the name vLLM gives DeepSeek-V2/V3/V4's rope). The
// frequencies are YaRN's with the correction range floored and ceiled, and
// extrapolation_factor e scaling the extrapolated share:
//   mask[i]  = (1 - ramp[i]) * e
//   inv'[i]  = inv[i] / factor * (1 - mask[i]) + inv[i] * mask[i]
// and cos/sin are multiplied by
//   m(factor, mscale) / m(factor, mscale_all_dim) * attn_factor,
// m(s, k) = s <= 1 ? 1 : 0.1 k ln(s) + 1, where mscale_all_dim 0 gives 1
// (transformers' yarn instead ignores mscale unless both are non-zero).
// Every field holds its value; the wire form's absent optional fields take
// vLLM's defaults (mscale 1, mscale_all_dim 0, attn_factor 1,
// extrapolation_factor 1).
struct DeepseekYarnScaling {
  double factor = 0;                              // required, > 0
  uint32_t original_max_position_embeddings = 0;  // required, > 0
  double beta_fast = 0;                           // 0 -> 32
  double beta_slow = 0;                           // 0 -> 1
  double mscale = 1;                              // finite
  double mscale_all_dim = 0;                      // finite
  double attn_factor = 1;                         // finite, > 0
  double extrapolation_factor = 1;                // finite
  friend bool operator==(const DeepseekYarnScaling& a, const DeepseekYarnScaling& b) {
    return a.factor == b.factor &&
           a.original_max_position_embeddings == b.original_max_position_embeddings &&
           a.beta_fast == b.beta_fast && a.beta_slow == b.beta_slow && a.mscale == b.mscale &&
           a.mscale_all_dim == b.mscale_all_dim && a.attn_factor == b.attn_factor &&
           a.extrapolation_factor == b.extrapolation_factor;
  }
  template <typename H>
  friend H AbslHashValue(H h, const DeepseekYarnScaling& s) {
    return H::combine(std::move(h), s.factor, s.original_max_position_embeddings, s.beta_fast,
                      s.beta_slow, s.mscale, s.mscale_all_dim, s.attn_factor,
                      s.extrapolation_factor);
  }
};

using ScalingConfig =
    std::variant<NoScaling, LinearScaling, DynamicNtkScaling, YarnScaling, Llama3Scaling,
                 LongRopeScaling, ProportionalScaling, DynamicNtkAlphaScaling, NtkScaling,
                 DeepseekYarnScaling>;

// "none", "linear", "dynamic", "yarn", "llama3", "longrope", "proportional"
// (HF rope_type names), "dynamic_alpha" (rope_type "dynamic" with alpha),
// "ntk" and "deepseek_yarn" (vLLM's names).
std::string ScalingName(const ScalingConfig& scaling);
std::vector<std::string> SupportedScalingNames();

// The RopeConfig field of the variant on the wire ("dynamic_ntk",
// "dynamic_ntk_alpha", "yarn", ...; "" for none): error messages name it.
std::string ScalingFieldName(const ScalingConfig& scaling);

// Fills in defaults (0 -> the documented default) so that equal tables get
// equal keys. Call on a validated config.
ScalingConfig WithScalingDefaults(const ScalingConfig& scaling);

// The shortest decimal that reads back as exactly `v` ("1.118320672", not
// the 17-digit "1.1183206720000001").
std::string ExactDecimal(double v);

// Every parameter of the variant, defaults as sent, each value exactly
// (ExactDecimal): "yarn(factor=32 original_max_position_embeddings=4096
// ...)". LongRoPE lists are written out in full.
std::string DescribeScaling(const ScalingConfig& scaling);

// INVALID_ARGUMENT naming the field (config.<variant>.<field>) and value for
// a NaN/inf, a non-positive factor, alpha or beta, low > high freq factor,
// list lengths other than rotary_dim/2, dynamic NTK (either form) with
// rotary_dim 2, proportional rotated_pairs outside 1 .. rotary_dim/2.
// beta_fast may equal or undercut beta_slow (Kimi K2 ships both 1), as
// transformers accepts it.
absl::Status ValidateScaling(const ScalingConfig& scaling, uint32_t rotary_dim);

// The base for dynamic NTK at sequence length `seq_len` (theta unchanged
// when seq_len <= original), for dynamic NTK with alpha (whatever seq_len);
// theta itself for every other variant.
double EffectiveBase(const ScalingConfig& scaling, double theta, uint32_t rotary_dim,
                     int64_t seq_len);

// LongRoPE: whether a request of table length `max_len` whose sequence
// length (largest position + 1) is `seq_len` uses long_factor (the rules on
// LongRopeScaling).
bool UsesLongFactor(const LongRopeScaling& scaling, uint32_t max_len, int64_t seq_len);

// inv_freq (rotary_dim/2 values) for a base that already includes the
// dynamic NTK change; `long_factor` picks LongRoPE's list (ignored by the
// other variants). And the factor multiplying cos/sin for a table of
// `max_len` rows.
std::vector<double> ScaledInvFreq(const ScalingConfig& scaling, double base, uint32_t rotary_dim,
                                  bool long_factor);
double ScaledAttentionFactor(const ScalingConfig& scaling, uint32_t max_len);

}  // namespace rope

#endif  // ROPE_ENGINE_SCALING_H_
