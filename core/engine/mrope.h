// M-RoPE (multimodal rotary embedding: Qwen2-VL, Qwen2.5-VL, Qwen3-VL). Every
// token carries three positions, one per axis t (time), h (height), w
// (width), and frequency i takes its angle from one axis. Text tokens carry
// three equal positions, which makes M-RoPE plain RoPE.
#ifndef ROPE_ENGINE_MROPE_H_
#define ROPE_ENGINE_MROPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace rope {

constexpr int kMropeAxes = 3;

struct MropeConfig {
  // Empty: no M-RoPE. Otherwise exactly kMropeAxes counts (t, h, w) of
  // frequencies, summing to rotary_dim / 2.
  std::vector<uint32_t> section;
  // false: chunked (Qwen2-VL / Qwen2.5-VL, transformers'
  // apply_multimodal_rotary_pos_emb): frequency i belongs to the section it
  // falls in. true: interleaved (Qwen3-VL, vLLM's apply_interleaved_rope):
  // axis 1 if i % 3 == 1 and i < 3 * section[1], axis 2 if i % 3 == 2 and
  // i < 3 * section[2], else axis 0.
  bool interleaved = false;
  // Ernie 4.5-VL's 3-D RoPE (transformers' Ernie4_5_VLMoeTextRotaryEmbedding,
  // vLLM's Ernie4_5_VLRotaryEmbedding), with section (t, h, w) and h == w:
  // frequency i < h + w takes axis h when i is even and w when odd, the last
  // t frequencies axis t. `interleaved` must then be false.
  bool ernie_3d = false;

  bool enabled() const { return !section.empty(); }
  friend bool operator==(const MropeConfig& a, const MropeConfig& b) {
    return a.section == b.section && a.interleaved == b.interleaved &&
           a.ernie_3d == b.ernie_3d;
  }
};

// "t", "h" or "w".
const char* MropeAxisName(int axis);

// The axis (0, 1 or 2) of each of the `half` frequencies of a validated
// config.
std::vector<uint8_t> MropeFrequencyAxes(const MropeConfig& mrope, int half);

// OK for a disabled config; INVALID_ARGUMENT naming config.mrope.section and
// its values when it has other than 3 values or does not sum to
// rotary_dim / 2, and for an Ernie 3-D config whose h and w sections differ
// or that is also interleaved.
absl::Status ValidateMrope(const MropeConfig& mrope, uint32_t rotary_dim);

// "chunked[16,24,24]", "interleaved[24,20,20]", "ernie_3d[20,22,22]", or
// "none".
std::string DescribeMrope(const MropeConfig& mrope);

}  // namespace rope

#endif  // ROPE_ENGINE_MROPE_H_
