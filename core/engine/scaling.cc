#include "core/engine/scaling.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace rope {
namespace {

constexpr double kPi = 3.14159265358979323846;

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

absl::Status CheckFinite(const std::string& field, double v) {
  if (!std::isfinite(v)) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is ", v, ": must be finite"));
  }
  return absl::OkStatus();
}

absl::Status CheckPositive(const std::string& field, double v) {
  if (!std::isfinite(v) || v <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is ", v, ": must be finite and > 0"));
  }
  return absl::OkStatus();
}

// `v` may be 0 (meaning "default"); otherwise finite and > 0.
absl::Status CheckPositiveOrDefault(const std::string& field, double v) {
  if (v == 0) return absl::OkStatus();
  if (!std::isfinite(v) || v < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " is ", v, ": must be finite and > 0 (0 means the default)"));
  }
  return absl::OkStatus();
}

absl::Status CheckRequiredLength(const std::string& field, uint32_t v) {
  if (v == 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is 0: must be > 0 (required)"));
  }
  return absl::OkStatus();
}

std::vector<double> PlainInvFreq(double base, uint32_t rotary_dim) {
  std::vector<double> inv(rotary_dim / 2);
  for (size_t i = 0; i < inv.size(); ++i) {
    inv[i] = std::pow(base, -2.0 * static_cast<double>(i) / rotary_dim);
  }
  return inv;
}

// YaRN's attention scaling for a context extension `scale` (HF get_mscale).
double YarnMscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// Dimension index whose wavelength makes `rotations` turns over `max_pos`
// positions (HF find_correction_dim).
double YarnCorrectionDim(double rotations, uint32_t dim, double base, double max_pos) {
  return dim * std::log(max_pos / (rotations * 2 * kPi)) / (2 * std::log(base));
}

std::string Exact(double v) { return ExactDecimal(v); }

// vLLM's DeepseekScalingRotaryEmbedding.mscale.
double DeepseekMscale(const DeepseekYarnScaling& s) {
  return YarnMscale(s.factor, s.mscale) / YarnMscale(s.factor, s.mscale_all_dim) * s.attn_factor;
}

// floor/ceil (when `truncate`) of the correction range of beta_fast and
// beta_slow, clamped to [0, r - 1], widened by 0.001 when empty (HF's
// find_correction_range and linear_ramp_factor, vLLM's
// yarn_find_correction_range and yarn_linear_ramp_mask).
void YarnRamp(double beta_fast, double beta_slow, uint32_t rotary_dim, double base,
              double original, bool truncate, double* low, double* high) {
  *low = YarnCorrectionDim(beta_fast, rotary_dim, base, original);
  *high = YarnCorrectionDim(beta_slow, rotary_dim, base, original);
  if (truncate) {
    *low = std::floor(*low);
    *high = std::ceil(*high);
  }
  *low = std::max(*low, 0.0);
  *high = std::min(*high, static_cast<double>(rotary_dim) - 1);
  if (*low == *high) *high += 0.001;  // avoid a zero-width ramp
}

// 64-bit FNV-1a over the values' IEEE-754 bits, in order. Written here
// rather than taken from a library: it names a list in a display string
// (TableKey::ToString), it is not a security boundary, and neither Abseil's
// hash (seeded per process) nor a crypto library (the engine links none)
// gives a value that is stable across processes.
uint64_t ListDigest(const std::vector<double>& values) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (double v : values) {
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(bits));
    for (int byte = 0; byte < 8; ++byte) {
      hash ^= (bits >> (8 * byte)) & 0xff;
      hash *= 0x100000001b3ull;
    }
  }
  return hash;
}

// A few values spelled out exactly; a longer list (LongRoPE's factors: one
// per rotated pair) as its length and digest, so that a description (and a
// table key sent back in a reply) has a fixed size whatever the list holds.
constexpr size_t kSpelledListValues = 8;

std::string ExactList(const std::vector<double>& values) {
  if (values.size() > kSpelledListValues) {
    return absl::StrFormat("[%u values fnv1a64=%016x]", values.size(), ListDigest(values));
  }
  return absl::StrCat("[", absl::StrJoin(values, ",", [](std::string* out, double v) {
                        out->append(Exact(v));
                      }), "]");
}

}  // namespace

std::string ExactDecimal(double v) {
  for (int digits = 15; digits < 17; ++digits) {
    std::string text = absl::StrFormat("%.*g", digits, v);
    if (std::strtod(text.c_str(), nullptr) == v) return text;
  }
  return absl::StrFormat("%.17g", v);
}

std::string ScalingName(const ScalingConfig& scaling) {
  return std::visit(Overloaded{
                        [](const NoScaling&) { return "none"; },
                        [](const LinearScaling&) { return "linear"; },
                        [](const DynamicNtkScaling&) { return "dynamic"; },
                        [](const YarnScaling&) { return "yarn"; },
                        [](const Llama3Scaling&) { return "llama3"; },
                        [](const LongRopeScaling&) { return "longrope"; },
                        [](const ProportionalScaling&) { return "proportional"; },
                        [](const DynamicNtkAlphaScaling&) { return "dynamic_alpha"; },
                        [](const NtkScaling&) { return "ntk"; },
                        [](const DeepseekYarnScaling&) { return "deepseek_yarn"; },
                    },
                    scaling);
}

std::string ScalingFieldName(const ScalingConfig& scaling) {
  return std::visit(Overloaded{
                        [](const NoScaling&) { return ""; },
                        [](const LinearScaling&) { return "linear"; },
                        [](const DynamicNtkScaling&) { return "dynamic_ntk"; },
                        [](const YarnScaling&) { return "yarn"; },
                        [](const Llama3Scaling&) { return "llama3"; },
                        [](const LongRopeScaling&) { return "longrope"; },
                        [](const ProportionalScaling&) { return "proportional"; },
                        [](const DynamicNtkAlphaScaling&) { return "dynamic_ntk_alpha"; },
                        [](const NtkScaling&) { return "ntk"; },
                        [](const DeepseekYarnScaling&) { return "deepseek_yarn"; },
                    },
                    scaling);
}

std::string DescribeScaling(const ScalingConfig& scaling) {
  return std::visit(
      Overloaded{
          [](const NoScaling&) { return std::string("none"); },
          [](const LinearScaling& s) { return absl::StrCat("linear(factor=", Exact(s.factor), ")"); },
          [](const DynamicNtkScaling& s) {
            return absl::StrCat("dynamic(factor=", Exact(s.factor),
                                " original_max_position_embeddings=",
                                s.original_max_position_embeddings, ")");
          },
          [](const YarnScaling& s) {
            return absl::StrCat(
                "yarn(factor=", Exact(s.factor),
                " original_max_position_embeddings=", s.original_max_position_embeddings,
                " beta_fast=", Exact(s.beta_fast), " beta_slow=", Exact(s.beta_slow),
                " mscale=", Exact(s.mscale), " mscale_all_dim=", Exact(s.mscale_all_dim),
                " attention_factor=", Exact(s.attention_factor),
                " truncate=", s.truncate ? "true" : "false", ")");
          },
          [](const Llama3Scaling& s) {
            return absl::StrCat("llama3(factor=", Exact(s.factor),
                                " low_freq_factor=", Exact(s.low_freq_factor),
                                " high_freq_factor=", Exact(s.high_freq_factor),
                                " original_max_position_embeddings=",
                                s.original_max_position_embeddings, ")");
          },
          [](const LongRopeScaling& s) {
            return absl::StrCat("longrope(short_factor=", ExactList(s.short_factor),
                                " long_factor=", ExactList(s.long_factor),
                                " original_max_position_embeddings=",
                                s.original_max_position_embeddings,
                                " attention_factor=", Exact(s.attention_factor),
                                " max_position_embeddings=", s.max_position_embeddings, ")");
          },
          [](const ProportionalScaling& s) {
            return absl::StrCat("proportional(factor=", Exact(s.factor),
                                " rotated_pairs=", s.rotated_pairs, ")");
          },
          [](const DynamicNtkAlphaScaling& s) {
            return absl::StrCat("dynamic_alpha(alpha=", Exact(s.alpha), ")");
          },
          [](const NtkScaling& s) {
            return absl::StrCat("ntk(factor=", Exact(s.factor),
                                s.has_mixed_b ? absl::StrCat(" mixed_b=", Exact(s.mixed_b)) : "",
                                ")");
          },
          [](const DeepseekYarnScaling& s) {
            return absl::StrCat(
                "deepseek_yarn(factor=", Exact(s.factor),
                " original_max_position_embeddings=", s.original_max_position_embeddings,
                " beta_fast=", Exact(s.beta_fast), " beta_slow=", Exact(s.beta_slow),
                " mscale=", Exact(s.mscale), " mscale_all_dim=", Exact(s.mscale_all_dim),
                " attn_factor=", Exact(s.attn_factor),
                " extrapolation_factor=", Exact(s.extrapolation_factor), ")");
          },
      },
      scaling);
}

std::vector<std::string> SupportedScalingNames() {
  return {"none",         "linear",        "dynamic", "yarn",         "llama3", "longrope",
          "proportional", "dynamic_alpha", "ntk",     "deepseek_yarn"};
}

ScalingConfig WithScalingDefaults(const ScalingConfig& scaling) {
  ScalingConfig out = scaling;
  if (auto* y = std::get_if<YarnScaling>(&out)) {
    if (y->beta_fast == 0) y->beta_fast = 32;
    if (y->beta_slow == 0) y->beta_slow = 1;
    // The attention factor is what the table sees: resolve it so that
    // {mscale unset} and {explicit equal attention_factor} share a key.
    if (y->attention_factor == 0) {
      y->attention_factor = (y->mscale != 0 && y->mscale_all_dim != 0)
                                ? YarnMscale(y->factor, y->mscale) /
                                      YarnMscale(y->factor, y->mscale_all_dim)
                                : YarnMscale(y->factor, 1.0);
    }
    y->mscale = 0;
    y->mscale_all_dim = 0;
  } else if (auto* l = std::get_if<Llama3Scaling>(&out)) {
    if (l->factor == 0) l->factor = 8;
    if (l->low_freq_factor == 0) l->low_freq_factor = 1;
    if (l->high_freq_factor == 0) l->high_freq_factor = 4;
    if (l->original_max_position_embeddings == 0) l->original_max_position_embeddings = 8192;
  } else if (auto* p = std::get_if<ProportionalScaling>(&out)) {
    if (p->factor == 0) p->factor = 1;
  } else if (auto* d = std::get_if<DeepseekYarnScaling>(&out)) {
    if (d->beta_fast == 0) d->beta_fast = 32;
    if (d->beta_slow == 0) d->beta_slow = 1;
    // The product of the mscales and attn_factor is what the table sees:
    // folded into attn_factor, with the mscales made neutral (m(s, 0) = 1),
    // so that equal tables share a key.
    d->attn_factor = DeepseekMscale(*d);
    d->mscale = 0;
    d->mscale_all_dim = 0;
  }
  return out;
}

absl::Status ValidateScaling(const ScalingConfig& scaling, uint32_t rotary_dim) {
  return std::visit(
      Overloaded{
          [](const NoScaling&) { return absl::OkStatus(); },
          [](const LinearScaling& s) {
            return CheckPositive("config.linear.factor", s.factor);
          },
          [rotary_dim](const DynamicNtkScaling& s) {
            ROPE_RETURN_IF_ERROR(CheckPositive("config.dynamic_ntk.factor", s.factor));
            ROPE_RETURN_IF_ERROR(CheckRequiredLength("config.dynamic_ntk.original_max_position_embeddings",
                                            s.original_max_position_embeddings));
            if (rotary_dim < 4) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "config.rotary_dim is ", rotary_dim,
                  ": dynamic NTK scaling needs rotary_dim >= 4 (its exponent is r/(r-2))"));
            }
            return absl::OkStatus();
          },
          [](const YarnScaling& s) {
            ROPE_RETURN_IF_ERROR(CheckPositive("config.yarn.factor", s.factor));
            ROPE_RETURN_IF_ERROR(CheckRequiredLength("config.yarn.original_max_position_embeddings",
                                            s.original_max_position_embeddings));
            ROPE_RETURN_IF_ERROR(CheckPositiveOrDefault("config.yarn.beta_fast", s.beta_fast));
            ROPE_RETURN_IF_ERROR(CheckPositiveOrDefault("config.yarn.beta_slow", s.beta_slow));
            ROPE_RETURN_IF_ERROR(CheckFinite("config.yarn.mscale", s.mscale));
            ROPE_RETURN_IF_ERROR(CheckFinite("config.yarn.mscale_all_dim", s.mscale_all_dim));
            ROPE_RETURN_IF_ERROR(CheckPositiveOrDefault("config.yarn.attention_factor", s.attention_factor));
            // beta_fast <= beta_slow is accepted, as transformers accepts it
            // (with a warning): Kimi K2 ships both 1. The ramp stays finite
            // (a zero-width range is widened by 0.001).
            // The attention factor the mscales give must be usable too (and
            // then the resolved config's explicit form is valid as well).
            if (s.attention_factor == 0) {
              const double derived =
                  std::get<YarnScaling>(WithScalingDefaults(ScalingConfig(s))).attention_factor;
              if (!std::isfinite(derived) || derived <= 0) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "config.yarn.mscale is ", s.mscale, " and mscale_all_dim ", s.mscale_all_dim,
                    ": the attention factor they give (", derived,
                    ") must be finite and > 0"));
              }
            }
            return absl::OkStatus();
          },
          [](const Llama3Scaling& s) {
            ROPE_RETURN_IF_ERROR(CheckPositiveOrDefault("config.llama3.factor", s.factor));
            ROPE_RETURN_IF_ERROR(CheckPositiveOrDefault("config.llama3.low_freq_factor", s.low_freq_factor));
            ROPE_RETURN_IF_ERROR(
                CheckPositiveOrDefault("config.llama3.high_freq_factor", s.high_freq_factor));
            const double low = s.low_freq_factor == 0 ? 1 : s.low_freq_factor;
            const double high = s.high_freq_factor == 0 ? 4 : s.high_freq_factor;
            // Equal factors are Llama 4 Scout's (an empty smoothing band);
            // transformers only warns about low > high, whose bands overlap.
            if (low > high) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "config.llama3.low_freq_factor is ", low, ": must be <= high_freq_factor ",
                  high));
            }
            return absl::OkStatus();
          },
          [rotary_dim](const LongRopeScaling& s) {
            ROPE_RETURN_IF_ERROR(CheckRequiredLength("config.longrope.original_max_position_embeddings",
                                            s.original_max_position_embeddings));
            ROPE_RETURN_IF_ERROR(
                CheckPositiveOrDefault("config.longrope.attention_factor", s.attention_factor));
            const size_t half = rotary_dim / 2;
            for (const auto& [name, list] :
                 {std::pair<const char*, const std::vector<double>*>{"short_factor", &s.short_factor},
                  {"long_factor", &s.long_factor}}) {
              if (list->size() != half) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "config.longrope.", name, " has ", list->size(),
                    " values: must have rotary_dim/2 = ", half));
              }
              for (size_t i = 0; i < half; ++i) {
                ROPE_RETURN_IF_ERROR(CheckPositive(absl::StrCat("config.longrope.", name, "[", i, "]"),
                                          (*list)[i]));
              }
            }
            return absl::OkStatus();
          },
          [rotary_dim](const ProportionalScaling& s) {
            ROPE_RETURN_IF_ERROR(CheckPositiveOrDefault("config.proportional.factor", s.factor));
            if (s.rotated_pairs < 1 || s.rotated_pairs > rotary_dim / 2) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "config.proportional.rotated_pairs is ", s.rotated_pairs,
                  ": must be in 1 .. rotary_dim/2 = ", rotary_dim / 2));
            }
            return absl::OkStatus();
          },
          [rotary_dim](const DynamicNtkAlphaScaling& s) {
            ROPE_RETURN_IF_ERROR(CheckPositive("config.dynamic_ntk_alpha.alpha", s.alpha));
            if (rotary_dim < 4) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "config.rotary_dim is ", rotary_dim,
                  ": dynamic NTK alpha scaling needs rotary_dim >= 4 (its exponent is r/(r-2))"));
            }
            const double base_factor = std::pow(s.alpha, rotary_dim / (rotary_dim - 2.0));
            if (!std::isfinite(base_factor) || base_factor <= 0) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "config.dynamic_ntk_alpha.alpha is ", s.alpha, ": alpha^(r/(r-2)) = ",
                  base_factor, " must be finite and > 0"));
            }
            return absl::OkStatus();
          },
          [](const NtkScaling& s) {
            ROPE_RETURN_IF_ERROR(CheckPositive("config.ntk.factor", s.factor));
            if (s.has_mixed_b) ROPE_RETURN_IF_ERROR(CheckFinite("config.ntk.mixed_b", s.mixed_b));
            return absl::OkStatus();
          },
          [](const DeepseekYarnScaling& s) {
            ROPE_RETURN_IF_ERROR(CheckPositive("config.deepseek_yarn.factor", s.factor));
            ROPE_RETURN_IF_ERROR(CheckRequiredLength(
                "config.deepseek_yarn.original_max_position_embeddings",
                s.original_max_position_embeddings));
            ROPE_RETURN_IF_ERROR(CheckPositiveOrDefault("config.deepseek_yarn.beta_fast", s.beta_fast));
            ROPE_RETURN_IF_ERROR(CheckPositiveOrDefault("config.deepseek_yarn.beta_slow", s.beta_slow));
            ROPE_RETURN_IF_ERROR(CheckFinite("config.deepseek_yarn.mscale", s.mscale));
            ROPE_RETURN_IF_ERROR(CheckFinite("config.deepseek_yarn.mscale_all_dim", s.mscale_all_dim));
            ROPE_RETURN_IF_ERROR(CheckPositive("config.deepseek_yarn.attn_factor", s.attn_factor));
            ROPE_RETURN_IF_ERROR(
                CheckFinite("config.deepseek_yarn.extrapolation_factor", s.extrapolation_factor));
            const double attention = DeepseekMscale(s);
            if (!std::isfinite(attention) || attention <= 0) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "config.deepseek_yarn.mscale is ", s.mscale, " and mscale_all_dim ",
                  s.mscale_all_dim, ": the attention factor they give with attn_factor ",
                  s.attn_factor, " (", attention, ") must be finite and > 0"));
            }
            return absl::OkStatus();
          },
      },
      scaling);
}

double EffectiveBase(const ScalingConfig& scaling, double theta, uint32_t rotary_dim,
                     int64_t seq_len) {
  if (const auto* a = std::get_if<DynamicNtkAlphaScaling>(&scaling)) {
    const double r = rotary_dim;
    return theta * std::pow(a->alpha, r / (r - 2));
  }
  const auto* d = std::get_if<DynamicNtkScaling>(&scaling);
  if (d == nullptr || seq_len <= static_cast<int64_t>(d->original_max_position_embeddings)) {
    return theta;
  }
  const double r = rotary_dim;
  const double ratio =
      d->factor * static_cast<double>(seq_len) / d->original_max_position_embeddings -
      (d->factor - 1);
  return theta * std::pow(ratio, r / (r - 2));
}

bool UsesLongFactor(const LongRopeScaling& scaling, uint32_t max_len, int64_t seq_len) {
  const int64_t original = scaling.original_max_position_embeddings;
  if (scaling.max_position_embeddings == 0) return static_cast<int64_t>(max_len) > original;
  return seq_len > original;
}

std::vector<double> ScaledInvFreq(const ScalingConfig& scaling, double base, uint32_t rotary_dim,
                                  bool long_factor) {
  std::vector<double> inv = PlainInvFreq(base, rotary_dim);
  const size_t half = inv.size();
  std::visit(
      Overloaded{
          [](const NoScaling&) {},
          [](const DynamicNtkScaling&) {},       // already in `base`
          [](const DynamicNtkAlphaScaling&) {},  // already in `base`
          [&](const LinearScaling& s) {
            for (double& f : inv) f /= s.factor;
          },
          [&](const YarnScaling& s) {
            const double fast = s.beta_fast == 0 ? 32 : s.beta_fast;
            const double slow = s.beta_slow == 0 ? 1 : s.beta_slow;
            double low, high;
            YarnRamp(fast, slow, rotary_dim, base, s.original_max_position_embeddings, s.truncate,
                     &low, &high);
            for (size_t i = 0; i < half; ++i) {
              // ramp 0 -> keep (extrapolate), 1 -> interpolate (divide by factor)
              const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
              const double extrapolation = inv[i];
              const double interpolation = inv[i] / s.factor;
              inv[i] = interpolation * ramp + extrapolation * (1 - ramp);
            }
          },
          [&](const Llama3Scaling& raw) {
            const Llama3Scaling s = std::get<Llama3Scaling>(WithScalingDefaults(raw));
            const double orig = s.original_max_position_embeddings;
            const double low_freq_wavelen = orig / s.low_freq_factor;
            const double high_freq_wavelen = orig / s.high_freq_factor;
            // Equal factors leave the band one wavelength wide (original /
            // low), where transformers' smooth factor is 0/0 (NaN); such a
            // frequency is kept, as every one just below the band is.
            const bool has_band = s.low_freq_factor != s.high_freq_factor;
            for (double& f : inv) {
              const double wavelen = 2 * kPi / f;
              if (wavelen > low_freq_wavelen) {
                f /= s.factor;
              } else if (wavelen >= high_freq_wavelen && has_band) {
                const double smooth =
                    (orig / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
                f = (1 - smooth) * f / s.factor + smooth * f;
              }  // else: high frequency, unchanged
            }
          },
          [&](const LongRopeScaling& s) {
            const std::vector<double>& ext = long_factor ? s.long_factor : s.short_factor;
            for (size_t i = 0; i < half; ++i) inv[i] /= ext[i];
          },
          [&](const ProportionalScaling& s) {
            const double factor = s.factor == 0 ? 1 : s.factor;
            for (size_t i = 0; i < half; ++i) inv[i] = i < s.rotated_pairs ? inv[i] / factor : 0.0;
          },
          [&](const NtkScaling& s) {
            const double r = rotary_dim;
            if (!s.has_mixed_b) {
              // vLLM: the base times factor, every frequency over factor^(2/r).
              const double divisor = std::pow(s.factor, 2.0 / r);
              for (size_t i = 0; i < half; ++i) {
                inv[i] = std::pow(base * s.factor, -2.0 * static_cast<double>(i) / r) / divisor;
              }
            } else {
              const double a = std::log(s.factor) / std::pow(r / 2, s.mixed_b);
              for (size_t i = 0; i < half; ++i) {
                inv[i] /= std::exp(a * std::pow(static_cast<double>(i + 1), s.mixed_b));
              }
            }
          },
          [&](const DeepseekYarnScaling& s) {
            const double fast = s.beta_fast == 0 ? 32 : s.beta_fast;
            const double slow = s.beta_slow == 0 ? 1 : s.beta_slow;
            double low, high;
            YarnRamp(fast, slow, rotary_dim, base, s.original_max_position_embeddings,
                     /*truncate=*/true, &low, &high);
            for (size_t i = 0; i < half; ++i) {
              const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
              const double mask = (1 - ramp) * s.extrapolation_factor;
              inv[i] = inv[i] / s.factor * (1 - mask) + inv[i] * mask;
            }
          },
      },
      scaling);
  return inv;
}

double ScaledAttentionFactor(const ScalingConfig& scaling, uint32_t max_len) {
  if (const auto* y = std::get_if<YarnScaling>(&scaling)) {
    return std::get<YarnScaling>(WithScalingDefaults(*y)).attention_factor;
  }
  if (const auto* d = std::get_if<DeepseekYarnScaling>(&scaling)) return DeepseekMscale(*d);
  if (const auto* l = std::get_if<LongRopeScaling>(&scaling)) {
    if (l->attention_factor != 0) return l->attention_factor;
    const uint32_t expanded = l->max_position_embeddings != 0 ? l->max_position_embeddings : max_len;
    const double s = static_cast<double>(expanded) / l->original_max_position_embeddings;
    if (s <= 1) return 1.0;
    return std::sqrt(1 + std::log(s) / std::log(static_cast<double>(
                                           l->original_max_position_embeddings)));
  }
  return 1.0;
}

}  // namespace rope
