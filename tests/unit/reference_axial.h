// Independent long double reference for axial RoPE and fractional
// positions, written from the formulas of docs/design.md ("Axial RoPE")
// and the published model code they restate (Flux's EmbedND, HunyuanVideo's
// get_1d_rotary_pos_embed): pair j of axis a turns by
//   p_a * interpolation_a * (theta_a * rescale_a^(dim_a / (dim_a - 2)))^(-2j / dim_a).
// Shares nothing with the engine.
#ifndef ROPE_TESTS_UNIT_REFERENCE_AXIAL_H_
#define ROPE_TESTS_UNIT_REFERENCE_AXIAL_H_

#include <cstdint>
#include <vector>

namespace rope {
namespace reference {

struct Axis {
  int dim = 0;
  long double theta = 10000;
  long double rescale = 1;
  long double interpolation = 1;
};

// Per pair (sum of dim_a / 2 pairs, axis after axis): its axis and the
// angle per unit of position on that axis.
struct AxialLadder {
  std::vector<int> axis_of_pair;
  std::vector<long double> rate;
};
AxialLadder AxialFrequencies(const std::vector<Axis>& axes);

// Rotates x ([batch, seq, heads, head_dim], doubles) in place: token (b, s)
// rotates pair i by positions[axis(i) * rows + row] * rate[i] (row = s when
// rows == seq, else b * seq + s), times `factor` on cos and sin; pairs
// interleaved (2i, 2i+1) or half (i, i + r/2) within the first
// 2 * rate.size() features.
void RotateAxial(const AxialLadder& ladder, bool interleaved, long double factor, int64_t batch,
                 int64_t seq, int64_t heads, int head_dim, const std::vector<long double>& positions,
                 std::vector<double>* x);

}  // namespace reference
}  // namespace rope

#endif  // ROPE_TESTS_UNIT_REFERENCE_AXIAL_H_
