#include "core/engine/axial.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rope {
namespace {

std::string AxisField(size_t i, const char* field) {
  return absl::StrCat("config.axial.axes[", i, "].", field);
}

std::string Dims(const AxialConfig& axial) {
  std::vector<uint32_t> dims;
  for (const AxialAxis& axis : axial.axes) dims.push_back(axis.dim);
  return absl::StrCat("[", absl::StrJoin(dims, ","), "]");
}

}  // namespace

absl::Status ValidateAxial(const AxialConfig& axial, uint32_t rotary_dim, double config_theta) {
  if (!axial.enabled()) return absl::OkStatus();
  if (axial.count() > kMaxAxialAxes) {
    return absl::InvalidArgumentError(absl::StrCat("config.axial.axes has ", axial.count(),
                                                   " axes: at most ", kMaxAxialAxes));
  }
  uint64_t sum = 0;
  for (size_t i = 0; i < axial.axes.size(); ++i) {
    const AxialAxis& axis = axial.axes[i];
    if (axis.dim == 0 || axis.dim % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(AxisField(i, "dim"), " is ", axis.dim,
                                                     ": must be even and > 0"));
    }
    sum += axis.dim;
    if (!std::isfinite(axis.theta) || (axis.theta != 0 && axis.theta <= 1.0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          AxisField(i, "theta"), " is ", axis.theta,
          ": must be finite and > 1 (0 means config.theta)"));
    }
    for (const auto& [name, value] :
         {std::pair<const char*, double>{"theta_rescale", axis.theta_rescale},
          std::pair<const char*, double>{"interpolation", axis.interpolation}}) {
      // 1 / value must be finite too: interpolation becomes linear scaling
      // by its reciprocal.
      if (!std::isfinite(value) || value < 0 || (value != 0 && !std::isfinite(1.0 / value))) {
        return absl::InvalidArgumentError(absl::StrCat(AxisField(i, name), " is ", value,
                                                       ": must be finite and > 0 (0 means 1)"));
      }
    }
    if (axis.dim == 2 && axis.theta_rescale != 0 && axis.theta_rescale != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          AxisField(i, "theta_rescale"), " is ", axis.theta_rescale,
          " on an axis of dim 2: its exponent dim / (dim - 2) is undefined (use 0 or 1)"));
    }
  }
  if (sum != rotary_dim) {
    return absl::InvalidArgumentError(absl::StrCat("config.axial.axes dims ", Dims(axial),
                                                   " sum to ", sum, ": must sum to rotary_dim ",
                                                   rotary_dim));
  }
  for (size_t i = 0; i < axial.axes.size(); ++i) {
    const double base = AxisBase(WithAxisDefaults(axial.axes[i], config_theta));
    if (axial.axes[i].theta_rescale != 0 && (!std::isfinite(base) || base <= 1.0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          AxisField(i, "theta_rescale"), " is ", axial.axes[i].theta_rescale,
          ": the rescaled base theta * theta_rescale^(dim / (dim - 2)) must be finite and > 1"));
    }
  }
  return absl::OkStatus();
}

AxialAxis WithAxisDefaults(const AxialAxis& axis, double config_theta) {
  AxialAxis out = axis;
  if (out.theta == 0) out.theta = config_theta;
  if (out.theta_rescale == 0) out.theta_rescale = 1;
  if (out.interpolation == 0) out.interpolation = 1;
  return out;
}

double AxisBase(const AxialAxis& axis) {
  if (axis.theta_rescale == 1) return axis.theta;
  const double dim = axis.dim;
  return axis.theta * std::pow(axis.theta_rescale, dim / (dim - 2));
}

ScalingConfig AxisScaling(const AxialAxis& axis) {
  if (axis.interpolation == 1) return NoScaling{};
  return LinearScaling{1.0 / axis.interpolation};
}

std::vector<uint8_t> AxialPairAxes(const AxialConfig& axial) {
  std::vector<uint8_t> axes;
  for (size_t a = 0; a < axial.axes.size(); ++a) {
    axes.insert(axes.end(), axial.axes[a].dim / 2, static_cast<uint8_t>(a));
  }
  return axes;
}

std::vector<int> AxialFirstPairs(const AxialConfig& axial) {
  std::vector<int> first;
  int pair = 0;
  for (const AxialAxis& axis : axial.axes) {
    first.push_back(pair);
    pair += static_cast<int>(axis.dim / 2);
  }
  return first;
}

std::string DescribeAxial(const AxialConfig& axial) {
  if (!axial.enabled()) return "none";
  std::vector<std::string> axes;
  for (const AxialAxis& axis : axial.axes) {
    std::vector<std::string> params;
    if (axis.theta != 0) params.push_back(absl::StrCat("theta=", ExactDecimal(axis.theta)));
    if (axis.theta_rescale != 0 && axis.theta_rescale != 1) {
      params.push_back(absl::StrCat("theta_rescale=", ExactDecimal(axis.theta_rescale)));
    }
    if (axis.interpolation != 0 && axis.interpolation != 1) {
      params.push_back(absl::StrCat("interpolation=", ExactDecimal(axis.interpolation)));
    }
    axes.push_back(params.empty() ? absl::StrCat(axis.dim)
                                  : absl::StrCat(axis.dim, "(", absl::StrJoin(params, " "), ")"));
  }
  return absl::StrCat("axial[", absl::StrJoin(axes, ","), "]");
}

}  // namespace rope
