// Helpers shared by the unit tests: tensors that own their bytes, encoding
// through the reference conversions (never the engine's) and seeded random
// data. Status assertions: tests/support/status_matchers.h.
#ifndef ROPE_TESTS_UNIT_TEST_UTIL_H_
#define ROPE_TESTS_UNIT_TEST_UTIL_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "core/engine/dtype.h"
#include "core/engine/rope_config.h"
#include "core/engine/tensor.h"

namespace rope {
namespace test {

// The key of a plain RoPE table (no scaling).
TableKey PlainTableKey(double theta, uint32_t rotary_dim, uint32_t max_len);

// A dense C-order tensor owning little-endian bytes of `dtype`.
struct HostTensor {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  int64_t elements() const;
  TensorView view();
  ConstTensorView const_view() const;
};

// Encodes values (rounded to the dtype with the reference conversions).
HostTensor Encode(DType dtype, std::vector<int64_t> shape, const std::vector<double>& values);

// Decodes every element to double with the reference conversions.
std::vector<double> Decode(const HostTensor& t);
std::vector<double> DecodeBytes(DType dtype, const void* data, int64_t count);

// The value a double takes once stored as `dtype` and read back.
double Quantize(DType dtype, double value);

// `count` values uniform in [lo, hi), already representable in `dtype`, so
// the engine and the reference start from identical inputs.
std::vector<double> RandomValues(DType dtype, int64_t count, std::mt19937* rng, double lo = -2.0,
                                 double hi = 2.0);

// One storage ulp at `value` (0 for float32 callers that want none).
double StorageUlp(DType dtype, double value);

}  // namespace test
}  // namespace rope

#endif  // ROPE_TESTS_UNIT_TEST_UTIL_H_
