// Storage element types of tensors that cross the engine boundary.
// Arithmetic is always float32 whatever the storage type.
#ifndef ROPE_ENGINE_DTYPE_H_
#define ROPE_ENGINE_DTYPE_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace rope {

// Values match rope.v1.DType on the wire so the service can cast after
// checking the range.
enum class DType : int { kFloat32 = 1, kFloat16 = 2, kBFloat16 = 3 };

// Memory layout of the rotated pairs inside the first rotary_dim features.
//  kInterleaved: pair i is (x[2i], x[2i+1])        (Meta Llama, GPT-J)
//  kHalf:        pair i is (x[i], x[i + r/2])      (GPT-NeoX, HF rotate_half)
enum class Layout : int { kInterleaved = 1, kHalf = 2 };

constexpr size_t DTypeSize(DType dtype) {
  return dtype == DType::kFloat32 ? 4 : 2;
}

absl::string_view DTypeName(DType dtype);
absl::string_view LayoutName(Layout layout);

}  // namespace rope

#endif  // ROPE_ENGINE_DTYPE_H_
