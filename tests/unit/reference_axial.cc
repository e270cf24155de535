#include "tests/unit/reference_axial.h"

#include <cmath>

namespace rope {
namespace reference {

AxialLadder AxialFrequencies(const std::vector<Axis>& axes) {
  AxialLadder ladder;
  for (size_t a = 0; a < axes.size(); ++a) {
    const Axis& axis = axes[a];
    const long double dim = axis.dim;
    const long double base =
        axis.rescale == 1 ? axis.theta : axis.theta * std::pow(axis.rescale, dim / (dim - 2));
    for (int j = 0; j < axis.dim / 2; ++j) {
      ladder.axis_of_pair.push_back(static_cast<int>(a));
      ladder.rate.push_back(axis.interpolation * std::pow(base, -2.0L * j / dim));
    }
  }
  return ladder;
}

void RotateAxial(const AxialLadder& ladder, bool interleaved, long double factor, int64_t batch,
                 int64_t seq, int64_t heads, int head_dim, const std::vector<long double>& positions,
                 std::vector<double>* x) {
  const int half = static_cast<int>(ladder.rate.size());
  const int axes = ladder.axis_of_pair.empty() ? 1 : ladder.axis_of_pair.back() + 1;
  const int64_t rows = static_cast<int64_t>(positions.size()) / axes;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s < seq; ++s) {
      const int64_t row = rows == seq ? s : b * seq + s;
      for (int64_t h = 0; h < heads; ++h) {
        double* v = x->data() + ((b * seq + s) * heads + h) * head_dim;
        for (int i = 0; i < half; ++i) {
          const long double angle = positions[ladder.axis_of_pair[i] * rows + row] * ladder.rate[i];
          const long double c = factor * std::cos(angle), sn = factor * std::sin(angle);
          const int f0 = interleaved ? 2 * i : i;
          const int f1 = interleaved ? 2 * i + 1 : i + half;
          const long double x0 = v[f0], x1 = v[f1];
          v[f0] = static_cast<double>(x0 * c - x1 * sn);
          v[f1] = static_cast<double>(x0 * sn + x1 * c);
        }
      }
    }
  }
}

}  // namespace reference
}  // namespace rope
