// Axial RoPE: the rotary pairs of a head split into consecutive groups, one
// per axis of a grid (Flux's EmbedND, Wan 2.1's frame/height/width split,
// HunyuanVideo's rope_dim_list, SAM 2's compute_axial_cis, Llama 4's vision
// encoder). Axis a owns dim_a / 2 consecutive pairs, in axis order, and has
// a frequency ladder of its own:
//   pair j of axis a turns by  p_a * interpolation_a * theta_a'^(-2j / dim_a),
//   theta_a' = theta_a * theta_rescale_a^(dim_a / (dim_a - 2)),
// where p_a is the token's position on axis a. Which features form a pair is
// the config's layout, as for every other config.
//
// The table of one axis is an ordinary table (TableKey) of rotary width dim_a
// with base theta_a' and, when interpolation_a != 1, linear scaling by
// 1 / interpolation_a: tables are cached and paged per axis, and axes that
// agree (Flux's height and width) share one.
#ifndef ROPE_ENGINE_AXIAL_H_
#define ROPE_ENGINE_AXIAL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/engine/scaling.h"

namespace rope {

// Axes one config may have (a video grid has 3; 8 leaves room for more).
constexpr int kMaxAxialAxes = 8;

struct AxialAxis {
  uint32_t dim = 0;            // features of the axis: even, > 0
  double theta = 0;            // 0: the config's theta
  double theta_rescale = 0;    // 0: 1 (HunyuanVideo's theta_rescale_factor)
  double interpolation = 0;    // 0: 1 (HunyuanVideo's interpolation_factor)

  friend bool operator==(const AxialAxis& a, const AxialAxis& b) {
    return a.dim == b.dim && a.theta == b.theta && a.theta_rescale == b.theta_rescale &&
           a.interpolation == b.interpolation;
  }
};

struct AxialConfig {
  std::vector<AxialAxis> axes;  // empty: not axial

  bool enabled() const { return !axes.empty(); }
  int count() const { return static_cast<int>(axes.size()); }
  friend bool operator==(const AxialConfig& a, const AxialConfig& b) { return a.axes == b.axes; }
};

// OK for a disabled config. INVALID_ARGUMENT naming config.axial.axes[i] and
// the value for more than kMaxAxialAxes axes, an odd or zero dim, dims that
// do not sum to rotary_dim, a theta that is not finite and > 1 (0 allowed),
// a theta_rescale or interpolation that is not finite and > 0 (0 allowed),
// a theta_rescale other than 1 on an axis of dim 2 (its exponent
// dim / (dim - 2) is undefined), and a rescaled base that is not finite and
// > 1. `config_theta` is the config's effective theta (an axis' theta 0).
absl::Status ValidateAxial(const AxialConfig& axial, uint32_t rotary_dim, double config_theta);

// The values after defaults: theta from `config_theta` when 0, rescale and
// interpolation 1 when 0. For a validated config.
AxialAxis WithAxisDefaults(const AxialAxis& axis, double config_theta);

// theta_a' of a defaulted axis: theta * theta_rescale^(dim / (dim - 2)).
double AxisBase(const AxialAxis& axis);

// The scaling of a defaulted axis' table (whose rotary width is dim and base
// AxisBase): linear by 1 / interpolation when interpolation != 1, else none.
ScalingConfig AxisScaling(const AxialAxis& axis);

// The axis each of the rotary_dim / 2 pairs belongs to, and the first pair
// of each axis (consecutive groups in axis order).
std::vector<uint8_t> AxialPairAxes(const AxialConfig& axial);
std::vector<int> AxialFirstPairs(const AxialConfig& axial);

// "axial[16,56,56]" with per-axis parameters that differ from the
// defaults, e.g. "axial[16(theta=256),56,56(interpolation=0.5)]"; "none".
std::string DescribeAxial(const AxialConfig& axial);

}  // namespace rope

#endif  // ROPE_ENGINE_AXIAL_H_
