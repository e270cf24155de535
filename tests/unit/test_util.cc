#include "tests/unit/test_util.h"

#include <cmath>
#include <cstring>

#include "absl/strings/match.h"
#include "tests/unit/reference_rope.h"

namespace rope {
namespace test {

TableKey PlainTableKey(double theta, uint32_t rotary_dim, uint32_t max_len) {
  TableKey key;
  key.theta = theta;
  key.rotary_dim = rotary_dim;
  key.max_len = max_len;
  return key;
}

int64_t HostTensor::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

TensorView HostTensor::view() {
  TensorView v;
  v.dtype = dtype;
  v.shape = shape;
  v.data = bytes.data();
  v.byte_size = bytes.size();
  return v;
}

ConstTensorView HostTensor::const_view() const {
  return ConstTensorView(dtype, shape, bytes.data(), bytes.size());
}

HostTensor Encode(DType dtype, std::vector<int64_t> shape, const std::vector<double>& values) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.resize(values.size() * DTypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    const float f = static_cast<float>(values[i]);
    switch (dtype) {
      case DType::kFloat32:
        std::memcpy(t.bytes.data() + 4 * i, &f, 4);
        break;
      case DType::kFloat16: {
        const uint16_t h = reference::FloatToHalf(f);
        std::memcpy(t.bytes.data() + 2 * i, &h, 2);
        break;
      }
      case DType::kBFloat16: {
        const uint16_t h = reference::FloatToBFloat16(f);
        std::memcpy(t.bytes.data() + 2 * i, &h, 2);
        break;
      }
    }
  }
  return t;
}

std::vector<double> DecodeBytes(DType dtype, const void* data, int64_t count) {
  std::vector<double> out(count);
  const auto* p = static_cast<const uint8_t*>(data);
  for (int64_t i = 0; i < count; ++i) {
    if (dtype == DType::kFloat32) {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      out[i] = f;
    } else {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      out[i] = dtype == DType::kFloat16 ? reference::HalfToFloat(h)
                                        : reference::BFloat16ToFloat(h);
    }
  }
  return out;
}

std::vector<double> Decode(const HostTensor& t) {
  return DecodeBytes(t.dtype, t.bytes.data(), t.elements());
}

double Quantize(DType dtype, double value) {
  const float f = static_cast<float>(value);
  switch (dtype) {
    case DType::kFloat32: return f;
    case DType::kFloat16: return reference::HalfToFloat(reference::FloatToHalf(f));
    case DType::kBFloat16: return reference::BFloat16ToFloat(reference::FloatToBFloat16(f));
  }
  return f;
}

std::vector<double> RandomValues(DType dtype, int64_t count, std::mt19937* rng, double lo,
                                 double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> out(count);
  for (double& x : out) x = Quantize(dtype, dist(*rng));
  return out;
}

double StorageUlp(DType dtype, double value) {
  switch (dtype) {
    case DType::kFloat32: return 0.0;
    case DType::kFloat16: return reference::HalfUlp(value);
    case DType::kBFloat16: return reference::BFloat16Ulp(value);
  }
  return 0.0;
}

}  // namespace test
}  // namespace rope
