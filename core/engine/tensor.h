// Non-owning views of tensors in caller-owned memory: C order, little-endian
// elements of `dtype`. The engine checks that `byte_size` matches
// shape x dtype before reading.
#ifndef ROPE_ENGINE_TENSOR_H_
#define ROPE_ENGINE_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/engine/dtype.h"

namespace rope {

struct TensorView {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  void* data = nullptr;
  size_t byte_size = 0;
};

struct ConstTensorView {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t byte_size = 0;

  ConstTensorView() = default;
  ConstTensorView(DType d, std::vector<int64_t> s, const void* p, size_t n)
      : dtype(d), shape(std::move(s)), data(p), byte_size(n) {}
  // A mutable view can always be read.
  ConstTensorView(const TensorView& t)  // NOLINT(google-explicit-constructor)
      : dtype(t.dtype), shape(t.shape), data(t.data), byte_size(t.byte_size) {}
};

}  // namespace rope

#endif  // ROPE_ENGINE_TENSOR_H_
