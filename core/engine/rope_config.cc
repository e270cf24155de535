#include "core/engine/rope_config.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/engine/float32_angles.h"

namespace rope {

absl::Status ValidateConfig(const RopeConfig& config, uint32_t max_len_cap) {
  if (!config.hf_config_json.empty()) {
    return absl::InvalidArgumentError(
        "config.hf_config_json is set: the config must be resolved (Engine) before validation");
  }
  if (!std::isfinite(config.theta) || (config.theta != 0 && config.theta <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "config.theta is %g: must be finite and > 1 (0 means %g)", config.theta, kDefaultTheta));
  }
  if (config.head_dim == 0 || config.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.head_dim is ", config.head_dim, ": must be even and > 0"));
  }
  if (config.head_dim > kMaxHeadDim) {
    return absl::InvalidArgumentError(absl::StrCat("config.head_dim is ", config.head_dim,
                                                   ": at most ", kMaxHeadDim));
  }
  if (config.rotary_offset >= config.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.rotary_offset is ", config.rotary_offset, ": must be < head_dim ",
        config.head_dim, " (the first rotated feature)"));
  }
  const uint32_t room = config.head_dim - config.rotary_offset;
  if (config.rotary_dim % 2 != 0 || config.rotary_dim > room) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.rotary_dim is ", config.rotary_dim, ": must be even and <= head_dim ",
        config.head_dim,
        config.rotary_offset == 0 ? std::string()
                                  : absl::StrCat(" - rotary_offset ", config.rotary_offset),
        " (0 means ", config.rotary_offset == 0 ? "head_dim" : "all of them", ")"));
  }
  if (config.rotary_dim == 0 && room % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.rotary_offset is ", config.rotary_offset, ": head_dim ", config.head_dim,
        " - rotary_offset leaves ", room, " features, an odd rotary_dim; set rotary_dim"));
  }
  if (config.no_rope.enabled) {
    const NoRopeConfig& n = config.no_rope;
    if (!std::isfinite(n.floor_scale) || n.floor_scale < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.no_rope.floor_scale is ", n.floor_scale,
          ": must be finite and >= 0 (0: no temperature tuning)"));
    }
    if (!std::isfinite(n.attn_scale)) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.no_rope.attn_scale is ", n.attn_scale, ": must be finite"));
    }
    if (n.floor_scale == 0 && n.attn_scale != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.no_rope.attn_scale is ", n.attn_scale,
          " but floor_scale is 0: the temperature tuning needs both"));
    }
  }
  if (config.layout != Layout::kInterleaved && config.layout != Layout::kHalf) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.layout is ", static_cast<int>(config.layout), ": must be INTERLEAVED or HALF"));
  }
  if (absl::Status s = ValidateScaling(config.scaling, config.EffectiveRotaryDim()); !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateMrope(config.mrope, config.EffectiveRotaryDim()); !s.ok()) {
    return s;
  }
  // A NoPE layer has no ladder to split into axes, and the axial models
  // rotate their whole head (or its first features), never a tail after
  // rotary_offset features that pass through.
  if (config.axial.enabled() && config.no_rope.enabled) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.axial (", DescribeAxial(config.axial),
        ") and config.no_rope are both set: a layer without rotary embedding has no axes; give "
        "one of them"));
  }
  if (config.axial.enabled() && config.rotary_offset != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.axial (", DescribeAxial(config.axial), ") is set with config.rotary_offset ",
        config.rotary_offset, ": axial RoPE rotates features from 0; leave rotary_offset 0"));
  }
  if (absl::Status s = ValidateAxial(config.axial, config.EffectiveRotaryDim(),
                                     config.EffectiveTheta());
      !s.ok()) {
    return s;
  }
  if (config.axial.enabled() && config.mrope.enabled()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.axial (", DescribeAxial(config.axial), ") and config.mrope (",
        DescribeMrope(config.mrope), ") are both set: give one of them"));
  }
  if (config.axial.enabled() && !std::holds_alternative<NoScaling>(config.scaling)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.axial is set with scaling ", ScalingName(config.scaling),
        ": an axial config takes no scaling (each axis has its own theta_rescale and "
        "interpolation)"));
  }
  if (config.angle_precision != AnglePrecision::kExact &&
      config.angle_precision != AnglePrecision::kFloat32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.angle_precision is ", static_cast<int>(config.angle_precision),
        ": must be ANGLE_EXACT or ANGLE_FLOAT32"));
  }
  if (config.angle_precision == AnglePrecision::kFloat32 && !HasFloat32Angles(config.scaling)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.angle_precision is ANGLE_FLOAT32 with scaling ", ScalingName(config.scaling),
        ": transformers' float32 angles are reproduced for plain RoPE and the linear and llama3 "
        "scalings only; use ANGLE_EXACT"));
  }
  if (config.axial.enabled() && config.angle_precision == AnglePrecision::kFloat32) {
    return absl::InvalidArgumentError(
        "config.angle_precision is ANGLE_FLOAT32 with config.axial set: transformers' float32 "
        "angles are reproduced for one frequency ladder only; use ANGLE_EXACT");
  }
  if (config.max_len == 0) {
    return absl::InvalidArgumentError("config.max_len is 0: must be > 0 (the table length)");
  }
  if (config.max_len > max_len_cap) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "config.max_len is ", config.max_len, ": over the server's max_len cap of ",
        max_len_cap));
  }
  return absl::OkStatus();
}

double NoRopeConfig::Temperature(int64_t position) const {
  if (!tuned()) return 1.0;
  return std::log(std::floor((static_cast<double>(position) + 1.0) / floor_scale) + 1.0) *
             attn_scale +
         1.0;
}

RopeConfig ForTensorWidth(const RopeConfig& config, int64_t width) {
  if (config.whole_head_dim == 0 || width != config.whole_head_dim ||
      config.whole_head_dim == config.head_dim) {
    return config;
  }
  RopeConfig whole = config;
  const uint32_t rotary = config.EffectiveRotaryDim();
  whole.head_dim = config.whole_head_dim;
  whole.rotary_dim = rotary;
  whole.rotary_offset = config.whole_head_dim - rotary;
  return whole;
}

TableKey MakeTableKey(const RopeConfig& config, int64_t max_position) {
  TableKey key;
  key.rotary_dim = config.EffectiveRotaryDim();
  key.theta = EffectiveBase(config.scaling, config.EffectiveTheta(), key.rotary_dim,
                            max_position + 1);
  key.max_len = config.max_len;
  key.scaling = WithScalingDefaults(config.scaling);
  key.float32_angles = config.angle_precision == AnglePrecision::kFloat32;
  if (auto* longrope = std::get_if<LongRopeScaling>(&key.scaling)) {
    key.long_factor = UsesLongFactor(*longrope, config.max_len, max_position + 1);
    // Resolved here, where max_len is known, so that an explicit attention
    // factor and the one max_position_embeddings (or max_len) implies share
    // a table.
    longrope->attention_factor = ScaledAttentionFactor(*longrope, config.max_len);
    longrope->max_position_embeddings = 0;
  }
  return key;
}

TableKey AxisTableKey(const RopeConfig& config, int axis) {
  const AxialAxis defaulted = WithAxisDefaults(config.axial.axes[axis], config.EffectiveTheta());
  TableKey key;
  key.theta = AxisBase(defaulted);
  key.rotary_dim = defaulted.dim;
  key.max_len = config.max_len;
  key.scaling = AxisScaling(defaulted);
  return key;
}

std::string TableKey::DebugString() const {
  return absl::StrFormat("{theta=%.17g rotary_dim=%u max_len=%u scaling=%s%s%s}", theta,
                         rotary_dim, max_len, ScalingName(scaling),
                         long_factor ? " (long_factor)" : "",
                         float32_angles ? " angles=float32" : "");
}

std::string TableKey::ToString() const {
  return absl::StrFormat("theta=%s rotary_dim=%u max_len=%u scaling=%s%s", ExactDecimal(theta),
                         rotary_dim, max_len, DescribeScaling(scaling),
                         std::holds_alternative<LongRopeScaling>(scaling)
                             ? (long_factor ? " uses=long_factor" : " uses=short_factor")
                             : "") +
         (float32_angles ? " angles=float32" : "");
}

}  // namespace rope
