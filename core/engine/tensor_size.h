// Shape-to-size arithmetic, in one place: element counts and byte sizes of
// shapes that come from the network, without int64 overflow.
//
// Two flavours, for two uses: checked (-1 when a value does not fit, for
// validation, which then names the field) and saturating (INT64_MAX, for
// estimates made before validation, which must never wrap to a small
// figure).
#ifndef ROPE_ENGINE_TENSOR_SIZE_H_
#define ROPE_ENGINE_TENSOR_SIZE_H_

#include <cstdint>
#include <limits>
#include <vector>

#include "core/engine/dtype.h"

namespace rope {

inline constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// a * b and a + b for a, b >= 0; -1 when either is negative or the result
// would overflow int64.
int64_t CheckedMul(int64_t a, int64_t b);
int64_t CheckedAdd(int64_t a, int64_t b);

// a * b and a + b, saturating at INT64_MAX; a negative operand counts as 0.
int64_t SaturatingMul(int64_t a, int64_t b);
int64_t SaturatingAdd(int64_t a, int64_t b);

// The product of `factors`, saturating at INT64_MAX; 0 when one is <= 0.
int64_t SaturatingProduct(const std::vector<int64_t>& factors);

// The product of `shape` (1 for rank 0): -1 when a dimension is negative or
// the product overflows int64.
int64_t ElementCount(const std::vector<int64_t>& shape);

// Bytes of `elements` elements of `dtype` (elements >= 0): -1 on overflow.
int64_t ElementBytes(int64_t elements, DType dtype);

// Bytes of a float32 tensor of `shape` (every dimension > 0 and the count
// validated against the element limit: no overflow).
int64_t Float32Bytes(const std::vector<int64_t>& shape);

}  // namespace rope

#endif  // ROPE_ENGINE_TENSOR_SIZE_H_
