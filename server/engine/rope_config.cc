#include "server/engine/rope_config.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rope {

absl::Status ValidateConfig(const RopeConfig& config, uint32_t max_len_cap) {
  if (!std::isfinite(config.theta) || (config.theta != 0 && config.theta <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "config.theta is %g: must be finite and > 1 (0 means %g)", config.theta, kDefaultTheta));
  }
  if (config.head_dim == 0 || config.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.head_dim is ", config.head_dim, ": must be even and > 0"));
  }
  if (config.rotary_dim % 2 != 0 || config.rotary_dim > config.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.rotary_dim is ", config.rotary_dim, ": must be even and <= head_dim ",
        config.head_dim, " (0 means head_dim)"));
  }
  if (config.layout != Layout::kInterleaved && config.layout != Layout::kHalf) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.layout is ", static_cast<int>(config.layout), ": must be INTERLEAVED or HALF"));
  }
  if (absl::Status s = ValidateScaling(config.scaling, config.EffectiveRotaryDim()); !s.ok()) {
    return s;
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

TableKey MakeTableKey(const RopeConfig& config, int64_t max_position) {
  TableKey key;
  key.rotary_dim = config.EffectiveRotaryDim();
  key.theta = EffectiveBase(config.scaling, config.EffectiveTheta(), key.rotary_dim,
                            max_position + 1);
  key.max_len = config.max_len;
  key.scaling = WithScalingDefaults(config.scaling);
  return key;
}

std::string TableKey::DebugString() const {
  return absl::StrFormat("{theta=%.17g rotary_dim=%u max_len=%u scaling=%s}", theta, rotary_dim,
                         max_len, ScalingName(scaling));
}

}  // namespace rope
