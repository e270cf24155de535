#include "server/backends/cpu/cpu_rotate.h"

#include <algorithm>
#include <vector>

#include "server/backends/cpu/convert_rows.h"
#include "server/engine/rope_math.h"

namespace rope {
namespace {

// Tokens per task: small enough to balance, large enough (at decode shapes
// with a few heads) that task overhead stays invisible.
constexpr int64_t kMinTokensPerTask = 8;

// For float32, the loop runs straight over the storage (no Load/Store) with
// the sign already folded into the sin row, so that the compiler vectorises
// it; the arithmetic is still math::RotatePair's.
template <bool kInterleaved>
void RotateTokenHeadsF32(float* x, int64_t heads, int64_t head_dim, int rotary_dim,
                         const float* cos_row, const float* sin_row) {
  const int half = rotary_dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    float* v = x + h * head_dim;
    if (kInterleaved) {
      for (int i = 0; i < half; ++i) {
        // Results go through locals: writing straight back through the
        // output pointers defeats GCC's vectoriser on the stride-2 access.
        float y0, y1;
        math::RotatePair(v[2 * i], v[2 * i + 1], cos_row[i], sin_row[i], &y0, &y1);
        v[2 * i] = y0;
        v[2 * i + 1] = y1;
      }
    } else {
      float* lo = v;
      float* hi = v + half;
      for (int i = 0; i < half; ++i) {
        float y0, y1;
        math::RotatePair(lo[i], hi[i], cos_row[i], sin_row[i], &y0, &y1);
        lo[i] = y0;
        hi[i] = y1;
      }
    }
  }
}

// 16-bit storage: widen each head's rotary features to a float row, rotate
// it with the float32 loop, narrow back (round to nearest even). Same
// arithmetic as math::RotateHead<F16/BF16>, but the conversions run as whole
// rows (F16C for float16), which the per-element path cannot.
template <void (*kToFloat)(const uint16_t*, int64_t, float*),
          void (*kFromFloat)(const float*, int64_t, uint16_t*)>
void RotateTokenHeads16(Layout layout, uint16_t* x, int64_t heads, int64_t head_dim,
                        int rotary_dim, const float* cos_row, const float* signed_sin_row) {
  float stack_row[1024];
  std::vector<float> heap_row;
  float* row = stack_row;
  if (rotary_dim > 1024) {
    heap_row.resize(rotary_dim);
    row = heap_row.data();
  }
  for (int64_t h = 0; h < heads; ++h) {
    uint16_t* v = x + h * head_dim;
    kToFloat(v, rotary_dim, row);
    if (layout == Layout::kInterleaved) {
      RotateTokenHeadsF32<true>(row, 1, rotary_dim, rotary_dim, cos_row, signed_sin_row);
    } else {
      RotateTokenHeadsF32<false>(row, 1, rotary_dim, rotary_dim, cos_row, signed_sin_row);
    }
    kFromFloat(row, rotary_dim, v);
  }
}

}  // namespace

void CpuRotateToken(DType dtype, Layout layout, void* x, int64_t heads, int64_t head_dim,
                    int rotary_dim, const float* cos_row, const float* sin_row, float sign) {
  // Fold the sign into a local sin row so the hot loops never multiply by
  // it; RotatePair(x0, x1, c, -s) is the inverse rotation.
  const int half = rotary_dim / 2;
  const float* s = sin_row;
  float negated_stack[512];
  std::vector<float> negated_heap;
  if (sign < 0) {
    float* dst = negated_stack;
    if (half > 512) {
      negated_heap.resize(half);
      dst = negated_heap.data();
    }
    for (int i = 0; i < half; ++i) dst[i] = -sin_row[i];
    s = dst;
  }
  switch (dtype) {
    case DType::kFloat32:
      if (layout == Layout::kInterleaved) {
        RotateTokenHeadsF32<true>(static_cast<float*>(x), heads, head_dim, rotary_dim, cos_row, s);
      } else {
        RotateTokenHeadsF32<false>(static_cast<float*>(x), heads, head_dim, rotary_dim, cos_row, s);
      }
      return;
    case DType::kFloat16:
      RotateTokenHeads16<HalfRowToFloat, FloatRowToHalf>(
          layout, static_cast<uint16_t*>(x), heads, head_dim, rotary_dim, cos_row, s);
      return;
    case DType::kBFloat16:
      RotateTokenHeads16<BFloat16RowToFloat, FloatRowToBFloat16>(
          layout, static_cast<uint16_t*>(x), heads, head_dim, rotary_dim, cos_row, s);
      return;
  }
}

void CpuRotate(const RopeTable& table, const RotateArgs& args, ThreadPool* pool) {
  const int64_t tokens = args.batch * args.seq;
  const int64_t elem = static_cast<int64_t>(DTypeSize(args.dtype));
  const int64_t q_token_bytes = args.q_heads * args.head_dim * elem;
  const int64_t k_token_bytes = args.k_heads * args.head_dim * elem;
  const int rotary_dim = static_cast<int>(args.rotary_dim);
  const float sign = args.inverse ? -1.0f : 1.0f;
  auto rotate_range = [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t pos = args.positions.At(t / args.seq, t % args.seq);
      const float* c = table.cos_row(pos);
      const float* s = table.sin_row(pos);
      CpuRotateToken(args.dtype, args.layout, static_cast<char*>(args.q) + t * q_token_bytes,
                     args.q_heads, args.head_dim, rotary_dim, c, s, sign);
      if (args.k != nullptr) {
        CpuRotateToken(args.dtype, args.layout, static_cast<char*>(args.k) + t * k_token_bytes,
                       args.k_heads, args.head_dim, rotary_dim, c, s, sign);
      }
    }
  };
  pool->ParallelFor(tokens, kMinTokensPerTask, rotate_range);
}

}  // namespace rope
