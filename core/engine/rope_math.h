// The per-element arithmetic of RoPE, shared by the CPU backend and the CUDA
// kernels. Everything here is a header-only inline function marked
// ROPE_HOST_DEVICE, free of any framework type, so that the CPU unit tests
// exercise exactly the arithmetic the GPU runs. The scalar float16 / bfloat16
// conversions live in common/half_float.h (the client uses them too).
#ifndef ROPE_ENGINE_ROPE_MATH_H_
#define ROPE_ENGINE_ROPE_MATH_H_

#include <cstdint>

#include "common/half_float.h"  // FloatToHalf & co., and ROPE_HOST_DEVICE

namespace rope {
namespace math {

// ---- Storage types as template tags ---------------------------------------
// Load/Store<T> convert between a storage element and float32.

struct F32 { using Storage = float; };
struct F16 { using Storage = uint16_t; };
struct BF16 { using Storage = uint16_t; };

template <typename Tag> ROPE_HOST_DEVICE float Load(const typename Tag::Storage* p);
template <typename Tag> ROPE_HOST_DEVICE void Store(typename Tag::Storage* p, float v);

template <> ROPE_HOST_DEVICE float Load<F32>(const float* p) { return *p; }
template <> ROPE_HOST_DEVICE void Store<F32>(float* p, float v) { *p = v; }
template <> ROPE_HOST_DEVICE float Load<F16>(const uint16_t* p) { return HalfToFloat(*p); }
template <> ROPE_HOST_DEVICE void Store<F16>(uint16_t* p, float v) { *p = FloatToHalf(v); }
template <> ROPE_HOST_DEVICE float Load<BF16>(const uint16_t* p) { return BFloat16ToFloat(*p); }
template <> ROPE_HOST_DEVICE void Store<BF16>(uint16_t* p, float v) { *p = FloatToBFloat16(v); }

// ---- Positions ---------------------------------------------------------------

// Where the position of token (b, s) comes from. Exactly one mode applies:
//   count == 0           : start_pos + s (the same for every batch row)
//   count == seq         : explicit[s]   (shared by every batch row)
//   count == batch * seq : explicit[b * seq + s] (packed sequences, decode)
// The engine validates the list (non-negative, < max_len) before any backend
// sees it, so backends index tables with it unchecked.
struct PositionSpec {
  int64_t start_pos = 0;
  const int64_t* explicit_positions = nullptr;
  int64_t count = 0;
  int64_t seq = 0;

  ROPE_HOST_DEVICE int64_t At(int64_t b, int64_t s) const {
    if (count == 0) return start_pos + s;
    if (count == seq) return explicit_positions[s];
    return explicit_positions[b * seq + s];
  }
};

// ---- The rotation -----------------------------------------------------------

// Rotates the pair (x0, x1) by the angle whose cosine and sine are (c, s):
//   (x0', x1') = (x0 c - x1 s, x0 s + x1 c).
// The inverse rotation is the same call with -s.
ROPE_HOST_DEVICE void RotatePair(float x0, float x1, float c, float s, float* y0, float* y1) {
  *y0 = x0 * c - x1 * s;
  *y1 = x0 * s + x1 * c;
}

// Feature indices of pair `i` (0 <= i < rotary_dim/2) for a layout:
// interleaved -> (2i, 2i+1); half -> (i, i + rotary_dim/2).
ROPE_HOST_DEVICE void PairFeatures(bool interleaved, int rotary_dim, int i, int* f0, int* f1) {
  if (interleaved) {
    *f0 = 2 * i;
    *f1 = 2 * i + 1;
  } else {
    *f0 = i;
    *f1 = i + rotary_dim / 2;
  }
}

// Rotates the first rotary_dim features of one head vector `x` in place;
// features rotary_dim.. are not touched. `cos_row`/`sin_row` hold rotary_dim/2
// values for this token's position. `sign` is +1 (forward) or -1 (inverse).
template <typename Tag, bool kInterleaved>
ROPE_HOST_DEVICE void RotateHead(typename Tag::Storage* x, const float* cos_row,
                                 const float* sin_row, int rotary_dim, float sign) {
  const int half = rotary_dim / 2;
  for (int i = 0; i < half; ++i) {
    int f0, f1;
    PairFeatures(kInterleaved, rotary_dim, i, &f0, &f1);
    float y0, y1;
    RotatePair(Load<Tag>(x + f0), Load<Tag>(x + f1), cos_row[i], sign * sin_row[i], &y0, &y1);
    Store<Tag>(x + f0, y0);
    Store<Tag>(x + f1, y1);
  }
}

}  // namespace math
}  // namespace rope

#endif  // ROPE_ENGINE_ROPE_MATH_H_
