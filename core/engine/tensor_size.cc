#include "core/engine/tensor_size.h"

namespace rope {

int64_t CheckedMul(int64_t a, int64_t b) {
  if (a < 0 || b < 0) return -1;
  if (a != 0 && b > kInt64Max / a) return -1;
  return a * b;
}

int64_t CheckedAdd(int64_t a, int64_t b) {
  if (a < 0 || b < 0 || a > kInt64Max - b) return -1;
  return a + b;
}

int64_t SaturatingMul(int64_t a, int64_t b) {
  if (a <= 0 || b <= 0) return 0;
  return a > kInt64Max / b ? kInt64Max : a * b;
}

int64_t SaturatingAdd(int64_t a, int64_t b) {
  if (a < 0) a = 0;
  if (b < 0) b = 0;
  return a > kInt64Max - b ? kInt64Max : a + b;
}

int64_t SaturatingProduct(const std::vector<int64_t>& factors) {
  int64_t product = 1;
  for (int64_t f : factors) product = SaturatingMul(product, f);
  return product;
}

int64_t ElementCount(const std::vector<int64_t>& shape) {
  int64_t elements = 1;
  for (int64_t d : shape) {
    elements = CheckedMul(elements, d);
    if (elements < 0) return -1;
  }
  return elements;
}

int64_t ElementBytes(int64_t elements, DType dtype) {
  return CheckedMul(elements, static_cast<int64_t>(DTypeSize(dtype)));
}

int64_t Float32Bytes(const std::vector<int64_t>& shape) {
  return ElementBytes(ElementCount(shape), DType::kFloat32);
}

}  // namespace rope
