// The per-element rules of attention beyond the dot product, shared by the
// CPU backend and the CUDA kernel bodies: which keys a query sees (causal
// mask, sliding window, chunks, all in positions), and the logit transforms
// (soft-capping, then ALiBi). Header-only and ROPE_HOST_DEVICE, free of any
// framework type, like rope_math.h.
//
// The order is FlashAttention's: s = scale * (q . k); s = softcap * tanh(s /
// softcap) when softcap > 0; s -= slope_h * |q_pos - k_pos| with ALiBi; a
// key the mask hides gets -inf.
#ifndef ROPE_ENGINE_ATTENTION_MATH_H_
#define ROPE_ENGINE_ATTENTION_MATH_H_

#include <cstdint>

#if !defined(__CUDA_ARCH__)
#include <cmath>
#endif

#include "common/half_float.h"  // ROPE_HOST_DEVICE

namespace rope {
namespace math {

// Which keys query i sees: key j is visible iff every rule set here holds.
//   causal:        k_pos(j) <= q_pos(i)
//   window_left:   q_pos(i) - k_pos(j) <= window_left     (-1: no limit)
//   window_right:  k_pos(j) - q_pos(i) <= window_right    (-1: no limit)
//   chunk_size:    q_pos(i) / chunk_size == k_pos(j) / chunk_size   (0: none)
// Positions are in [0, 2^32) (the engine checks them against max_len), so
// the differences never overflow whatever the window.
struct AttentionMask {
  bool causal = false;
  int64_t window_left = -1;
  int64_t window_right = -1;
  int64_t chunk_size = 0;

  // Whether any rule is set.
  ROPE_HOST_DEVICE bool Any() const {
    return causal || window_left >= 0 || window_right >= 0 || chunk_size > 0;
  }

  ROPE_HOST_DEVICE bool Visible(int64_t q_pos, int64_t k_pos) const {
    if (causal && k_pos > q_pos) return false;
    if (window_left >= 0 && q_pos - k_pos > window_left) return false;
    if (window_right >= 0 && k_pos - q_pos > window_right) return false;
    if (chunk_size > 0 && q_pos / chunk_size != k_pos / chunk_size) return false;
    return true;
  }
};

// How a block of queries (positions in [q_min, q_max]) relates to a block of
// keys (positions in [k_min, k_max]) under a mask: no pair visible, every
// pair visible, or some of each possible (check each pair).
enum class BlockVisibility { kNone, kAll, kSome };

ROPE_HOST_DEVICE BlockVisibility ClassifyBlock(const AttentionMask& m, int64_t q_min,
                                               int64_t q_max, int64_t k_min, int64_t k_max) {
  // No pair: some rule fails for every pair.
  if (m.causal && k_min > q_max) return BlockVisibility::kNone;
  if (m.window_left >= 0 && q_min - k_max > m.window_left) return BlockVisibility::kNone;
  if (m.window_right >= 0 && k_min - q_max > m.window_right) return BlockVisibility::kNone;
  if (m.chunk_size > 0 &&
      (k_max / m.chunk_size < q_min / m.chunk_size || k_min / m.chunk_size > q_max / m.chunk_size)) {
    return BlockVisibility::kNone;
  }
  // Every pair: every rule holds for the extreme pairs.
  const bool all = (!m.causal || k_max <= q_min) &&
                   (m.window_left < 0 || q_max - k_min <= m.window_left) &&
                   (m.window_right < 0 || k_max - q_min <= m.window_right) &&
                   (m.chunk_size <= 0 || (q_min / m.chunk_size == q_max / m.chunk_size &&
                                          k_min / m.chunk_size == q_min / m.chunk_size &&
                                          k_max / m.chunk_size == q_min / m.chunk_size));
  return all ? BlockVisibility::kAll : BlockVisibility::kSome;
}

ROPE_HOST_DEVICE float Tanh(float x) {
#if defined(__CUDA_ARCH__)
  return tanhf(x);
#else
  return std::tanh(x);
#endif
}

// Logit soft-capping (Gemma 2, Grok): cap * tanh(s / cap), for cap > 0.
ROPE_HOST_DEVICE float SoftCap(float s, float cap) { return cap * Tanh(s / cap); }

// ALiBi's bias of the pair: -slope * |q_pos - k_pos| (positions below 2^24
// give an exact float distance).
ROPE_HOST_DEVICE float AlibiBias(float slope, int64_t q_pos, int64_t k_pos) {
  const int64_t d = q_pos > k_pos ? q_pos - k_pos : k_pos - q_pos;
  return -slope * static_cast<float>(d);
}

}  // namespace math
}  // namespace rope

#endif  // ROPE_ENGINE_ATTENTION_MATH_H_
