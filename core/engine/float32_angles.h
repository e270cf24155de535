// RopeConfig.angle_precision FLOAT32: the cos/sin table as transformers
// computes it in float32 (docs/design.md, "Precision"), for bit-parity
// checks against a transformers model. The exact table (the default)
// computes angles in double and rounds once; this one rounds as transformers'
// rotary modules do:
//   inv_freq  float32, by the float32 operations of transformers'
//             _compute_default_rope_parameters (2i / r, theta ** that with
//             SLEEF's powf, torch's pow, then its reciprocal), and of the
//             linear and llama3 scalings on top (each a float32 operation);
//   angle     float32(position) * inv_freq, rounded to float32 (the K = 1
//             matmul of LlamaRotaryEmbedding.forward);
//   cos, sin  of that float32 angle: SLEEF's 8-lane AVX2 cosf / sinf (1-ulp,
//             what torch's float32 CPU kernels call on an AVX2 CPU), else,
//             on CPUs without AVX2, the correctly rounded value (within
//             1 ulp of SLEEF's).
// Other scalings have no float32 form here (ValidateConfig refuses them).
#ifndef ROPE_ENGINE_FLOAT32_ANGLES_H_
#define ROPE_ENGINE_FLOAT32_ANGLES_H_

#include <cstdint>
#include <vector>

#include "core/engine/rope_config.h"

namespace rope {

// Whether `scaling` has a float32 form (none, linear, llama3).
bool HasFloat32Angles(const ScalingConfig& scaling);

// transformers' float32 inverse frequencies of `key` (rotary_dim/2 values).
// Precondition: HasFloat32Angles(key.scaling).
std::vector<float> TransformersFloat32InvFreq(const TableKey& key);

// Rows first_pos .. first_pos + count - 1 of the float32-angle table:
// cos(float32(pos) * inv_freq[i]) and its sin, inv_freq.size() values a row.
void FillFloat32AngleRows(const std::vector<float>& inv_freq, int64_t first_pos, int64_t count,
                          float* cos_out, float* sin_out);

}  // namespace rope

#endif  // ROPE_ENGINE_FLOAT32_ANGLES_H_
