// Storage element types of tensors that cross the engine boundary.
// Arithmetic is always float32 whatever the storage type.
#ifndef ROPE_ENGINE_DTYPE_H_
#define ROPE_ENGINE_DTYPE_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace rope {

// Values match rope.v1.DType on the wire so the service can cast after
// checking the range. The float8 types are outputs only (Rotate's
// output_dtype, as FlashInfer's rope_quantize_fp8 writes them): e4m3fn has
// no infinities (largest finite 448), e5m2 is IEEE-like (largest finite
// 57344); rounding to nearest even, saturating to the largest finite value.
enum class DType : int {
  kFloat32 = 1,
  kFloat16 = 2,
  kBFloat16 = 3,
  kFloat8E4M3 = 5,
  kFloat8E5M2 = 6,
};

constexpr bool IsFloat8(DType dtype) {
  return dtype == DType::kFloat8E4M3 || dtype == DType::kFloat8E5M2;
}

// Memory layout of the rotated pairs inside the first rotary_dim features.
//  kInterleaved: pair i is (x[2i], x[2i+1])        (Meta Llama, GPT-J)
//  kHalf:        pair i is (x[i], x[i + r/2])      (GPT-NeoX, HF rotate_half)
enum class Layout : int { kInterleaved = 1, kHalf = 2 };

constexpr size_t DTypeSize(DType dtype) {
  return dtype == DType::kFloat32 ? 4 : IsFloat8(dtype) ? 1 : 2;
}

absl::string_view DTypeName(DType dtype);
absl::string_view LayoutName(Layout layout);

}  // namespace rope

#endif  // ROPE_ENGINE_DTYPE_H_
