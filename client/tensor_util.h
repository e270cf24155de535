// Helpers to build and read rope.v1.Tensor messages on the client side:
// float <-> float16 / bfloat16 conversion (round to nearest even, the same
// arithmetic the server uses: common/half_float.h), tensors from .npy
// arrays and back, seeded random tensors, and summary statistics.
//
// All functions are thread-compatible and free of global state. Byte buffers
// are little-endian; the library refuses to build on a big-endian host.
#ifndef ROPE_CLIENT_TENSOR_UTIL_H_
#define ROPE_CLIENT_TENSOR_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "client/npy.h"
#include "rope/v1/rope.pb.h"

namespace rope {
namespace client {

// Bytes per element: 4 for FLOAT32, 2 for FLOAT16 / BFLOAT16;
// INVALID_ARGUMENT for DTYPE_UNSPECIFIED and unknown values.
absl::StatusOr<size_t> DTypeSize(v1::DType dtype);

// "float32", "float16", "bfloat16"; "unspecified" / "dtype(N)" otherwise.
std::string DTypeName(v1::DType dtype);

// Accepts "float32", "float16", "bfloat16" (and the short forms "f32", "fp32",
// "f16", "fp16", "half", "bf16"). INVALID_ARGUMENT otherwise.
absl::StatusOr<v1::DType> ParseDType(absl::string_view name);

// product(shape); 1 for an empty shape. Precondition: no negative dims.
int64_t NumElements(absl::Span<const int64_t> shape);

// Encodes float32 values as `dtype` elements, rounding to nearest even when
// narrowing. Precondition: dtype is FLOAT32, FLOAT16 or BFLOAT16.
std::string EncodeFloats(absl::Span<const float> values, v1::DType dtype);

// Decodes `dtype` elements to float32 (exact: every float16 / bfloat16 value
// is a float32). INVALID_ARGUMENT when the dtype is not a storage type or the
// byte count is not a multiple of its size.
absl::StatusOr<std::vector<float>> DecodeFloats(absl::string_view bytes, v1::DType dtype);

// A Tensor of `shape` holding `values` stored as `dtype`. INVALID_ARGUMENT
// when values.size() != product(shape), a dim is < 1, or the dtype is not a
// storage type.
absl::StatusOr<v1::Tensor> MakeTensor(absl::Span<const float> values,
                                      std::vector<int64_t> shape, v1::DType dtype);

// The values of `tensor` as float32. INVALID_ARGUMENT naming `what` when the
// data length does not match shape x dtype.
absl::StatusOr<std::vector<float>> TensorToFloats(const v1::Tensor& tensor,
                                                  absl::string_view what = "tensor");

// Random values from a seed, reproducible across platforms: std::mt19937_64
// drives our own transforms (not std::*_distribution, whose output differs
// between standard libraries).
//   kUniform: uniform on [-1, 1)
//   kNormal:  standard normal (Box-Muller)
enum class Distribution { kNormal, kUniform };
absl::StatusOr<Distribution> ParseDistribution(absl::string_view name);  // "normal" | "uniform"
std::vector<float> RandomFloats(int64_t count, uint64_t seed, Distribution distribution);

// A random tensor of `shape` in `dtype` (values drawn in float32, then
// rounded to the dtype). INVALID_ARGUMENT for a dim < 1 or a bad dtype.
absl::StatusOr<v1::Tensor> RandomTensor(std::vector<int64_t> shape, v1::DType dtype,
                                        uint64_t seed, Distribution distribution);

// A Tensor in `dtype` from a .npy array:
//   '<f4', '<f2' and '<f8' arrays are converted to `dtype`, rounding to
//   nearest even when narrowing (float64 straight to the dtype, with no
//   double rounding through float32);
//   '<u2' and '<i2' arrays are taken as raw bfloat16 bits, and only when dtype
//   is BFLOAT16 (INVALID_ARGUMENT otherwise: an integer is not a float type).
// INVALID_ARGUMENT naming `what` for a 0-d array or a zero dimension.
absl::StatusOr<v1::Tensor> TensorFromNpy(const NpyArray& array, v1::DType dtype,
                                         absl::string_view what = "npy");

// The .npy form of a tensor: FLOAT32 -> '<f4', FLOAT16 -> '<f2',
// BFLOAT16 -> '<u2' raw bits. INVALID_ARGUMENT when the tensor is malformed.
absl::StatusOr<NpyArray> TensorToNpy(const v1::Tensor& tensor, absl::string_view what = "tensor");

// Summary statistics over the finite values; non-finite ones are counted.
struct TensorStats {
  int64_t count = 0;       // all values
  int64_t non_finite = 0;  // NaN and +-inf
  float min = 0;           // over finite values (0 when there are none)
  float max = 0;
  double mean = 0;
};
TensorStats ComputeStats(absl::Span<const float> values);

}  // namespace client
}  // namespace rope

#endif  // ROPE_CLIENT_TENSOR_UTIL_H_
