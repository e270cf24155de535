#include "client/tensor_util.h"

#include <cmath>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/half_float.h"
#include "common/status_macros.h"

// Tensor bytes are little-endian on the wire and in .npy files; we copy them
// to and from host memory without swapping.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "rope_client assumes a little-endian host");

namespace rope {
namespace client {
namespace {

bool IsStorageDType(v1::DType dtype) {
  return dtype == v1::FLOAT32 || dtype == v1::FLOAT16 || dtype == v1::BFLOAT16;
}

absl::Status CheckShape(absl::Span<const int64_t> shape, absl::string_view what) {
  if (shape.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": shape is empty (a scalar)"));
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ".shape[", i, "] is ", shape[i], ": every dim must be >= 1"));
    }
  }
  return absl::OkStatus();
}

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

}  // namespace

absl::StatusOr<size_t> DTypeSize(v1::DType dtype) {
  switch (dtype) {
    case v1::FLOAT32:
    case v1::INT32: return 4;
    case v1::FLOAT16:
    case v1::BFLOAT16: return 2;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("dtype ", DTypeName(dtype), " is not a storage type"));
  }
}

std::string DTypeName(v1::DType dtype) {
  switch (dtype) {
    case v1::FLOAT32: return "float32";
    case v1::FLOAT16: return "float16";
    case v1::BFLOAT16: return "bfloat16";
    case v1::INT32: return "int32";
    case v1::DTYPE_UNSPECIFIED: return "unspecified";
    default: return absl::StrCat("dtype(", static_cast<int>(dtype), ")");
  }
}

absl::StatusOr<v1::DType> ParseDType(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "float32" || lower == "f32" || lower == "fp32") return v1::FLOAT32;
  if (lower == "float16" || lower == "f16" || lower == "fp16" || lower == "half") {
    return v1::FLOAT16;
  }
  if (lower == "bfloat16" || lower == "bf16") return v1::BFLOAT16;
  return absl::InvalidArgumentError(
      absl::StrCat("dtype '", name, "' is not one of float32, float16, bfloat16"));
}

int64_t NumElements(absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string EncodeFloats(absl::Span<const float> values, v1::DType dtype) {
  std::string out;
  if (dtype == v1::FLOAT32) {
    out.resize(values.size() * sizeof(float));
    if (!values.empty()) std::memcpy(&out[0], values.data(), out.size());
    return out;
  }
  out.resize(values.size() * sizeof(uint16_t));
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t bits = dtype == v1::FLOAT16 ? math::FloatToHalf(values[i])
                                               : math::FloatToBFloat16(values[i]);
    std::memcpy(&out[2 * i], &bits, sizeof(bits));
  }
  return out;
}

absl::StatusOr<std::vector<float>> DecodeFloats(absl::string_view bytes, v1::DType dtype) {
  ROPE_ASSIGN_OR_RETURN(size_t size, DTypeSize(dtype));
  if (bytes.size() % size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        bytes.size(), " bytes is not a whole number of ", DTypeName(dtype), " elements"));
  }
  std::vector<float> out(bytes.size() / size);
  if (dtype == v1::FLOAT32) {
    if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  }
  if (dtype == v1::INT32) {  // indices: exact in float32 below 2^24
    for (size_t i = 0; i < out.size(); ++i) {
      int32_t value;
      std::memcpy(&value, bytes.data() + 4 * i, sizeof(value));
      out[i] = static_cast<float>(value);
    }
    return out;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, bytes.data() + 2 * i, sizeof(bits));
    out[i] = dtype == v1::FLOAT16 ? math::HalfToFloat(bits) : math::BFloat16ToFloat(bits);
  }
  return out;
}

absl::StatusOr<v1::Tensor> MakeTensor(absl::Span<const float> values,
                                      std::vector<int64_t> shape, v1::DType dtype) {
  ROPE_RETURN_IF_ERROR(CheckShape(shape, "tensor"));
  if (!IsStorageDType(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype ", DTypeName(dtype), " is not a storage type"));
  }
  if (static_cast<int64_t>(values.size()) != NumElements(shape)) {
    return absl::InvalidArgumentError(absl::StrCat(values.size(), " values do not fill shape ",
                                                   ShapeString(shape)));
  }
  v1::Tensor tensor;
  tensor.set_dtype(dtype);
  for (int64_t d : shape) tensor.add_shape(d);
  tensor.set_data(EncodeFloats(values, dtype));
  return tensor;
}

absl::StatusOr<std::vector<float>> TensorToFloats(const v1::Tensor& tensor,
                                                  absl::string_view what) {
  absl::StatusOr<size_t> size = DTypeSize(tensor.dtype());
  if (!size.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", size.status().message()));
  }
  for (int i = 0; i < tensor.shape_size(); ++i) {
    if (tensor.shape(i) < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ".shape[", i, "] is ", tensor.shape(i), ": negative"));
    }
  }
  const int64_t elements = NumElements(tensor.shape());
  if (static_cast<uint64_t>(tensor.data().size()) !=
      static_cast<uint64_t>(elements) * *size) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ".data is ", tensor.data().size(), " bytes: shape ", ShapeString(tensor.shape()),
        " of ", DTypeName(tensor.dtype()), " needs ", elements * static_cast<int64_t>(*size)));
  }
  return DecodeFloats(tensor.data(), tensor.dtype());
}

absl::StatusOr<Distribution> ParseDistribution(absl::string_view name) {
  if (name == "normal") return Distribution::kNormal;
  if (name == "uniform") return Distribution::kUniform;
  return absl::InvalidArgumentError(
      absl::StrCat("distribution '", name, "' is not one of normal, uniform"));
}

std::vector<float> RandomFloats(int64_t count, uint64_t seed, Distribution distribution) {
  std::mt19937_64 engine(seed);
  // 53 random bits -> a double uniform on [0, 1).
  auto unit = [&engine] { return static_cast<double>(engine() >> 11) * 0x1.0p-53; };
  std::vector<float> out(static_cast<size_t>(count));
  if (distribution == Distribution::kUniform) {
    for (float& v : out) v = static_cast<float>(2.0 * unit() - 1.0);
    return out;
  }
  const double kTwoPi = 6.283185307179586476925286766559;
  for (size_t i = 0; i < out.size(); i += 2) {
    const double u1 = 1.0 - unit();  // (0, 1]: log is finite
    const double u2 = unit();
    const double radius = std::sqrt(-2.0 * std::log(u1));
    out[i] = static_cast<float>(radius * std::cos(kTwoPi * u2));
    if (i + 1 < out.size()) out[i + 1] = static_cast<float>(radius * std::sin(kTwoPi * u2));
  }
  return out;
}

absl::StatusOr<v1::Tensor> RandomTensor(std::vector<int64_t> shape, v1::DType dtype,
                                        uint64_t seed, Distribution distribution) {
  ROPE_RETURN_IF_ERROR(CheckShape(shape, "random tensor"));
  std::vector<float> values = RandomFloats(NumElements(shape), seed, distribution);
  return MakeTensor(values, std::move(shape), dtype);
}

namespace {

// float64 values (little-endian bytes) as float32 values from which
// EncodeFloats(…, dtype) gives each value rounded to nearest even in
// `dtype`. For FLOAT32 that is the plain conversion. For the 16-bit types a
// plain conversion would round twice (to float32, then to 16 bits) and can
// land one ulp off; rounding to odd in the float32 step (the inexact
// results keep a sticky low bit) makes the second rounding exact, as float32
// has more than two bits beyond the 16-bit types' mantissas.
std::vector<float> NarrowFloat64(const std::string& bytes, v1::DType dtype) {
  std::vector<float> out(bytes.size() / sizeof(double));
  for (size_t i = 0; i < out.size(); ++i) {
    double d;
    std::memcpy(&d, bytes.data() + i * sizeof(double), sizeof(double));
    float f = static_cast<float>(d);
    if (dtype != v1::FLOAT32 && !std::isnan(d) && static_cast<double>(f) != d) {
      // Toward zero, then the sticky bit.
      if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
      uint32_t bits;
      std::memcpy(&bits, &f, sizeof(bits));
      bits |= 1u;
      std::memcpy(&f, &bits, sizeof(bits));
    }
    out[i] = f;
  }
  return out;
}

}  // namespace

absl::StatusOr<v1::Tensor> TensorFromNpy(const NpyArray& array, v1::DType dtype,
                                         absl::string_view what) {
  ROPE_RETURN_IF_ERROR(CheckShape(array.shape, what));
  if (!IsStorageDType(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype ", DTypeName(dtype), " is not a storage type"));
  }
  v1::Tensor tensor;
  tensor.set_dtype(dtype);
  for (int64_t d : array.shape) tensor.add_shape(d);
  switch (array.dtype) {
    case NpyDType::kInt32:
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": dtype '<i4' (int32) is a reply type (top-k indices), not an input tensor's"));
    case NpyDType::kUInt16:
    case NpyDType::kInt16:
      if (dtype != v1::BFLOAT16) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": dtype '", NpyDTypeDescr(array.dtype),
            "' holds raw bfloat16 bits and is read only with dtype bfloat16 (asked for ",
            DTypeName(dtype), ")"));
      }
      tensor.set_data(array.data);
      return tensor;
    case NpyDType::kFloat64:
      tensor.set_data(EncodeFloats(NarrowFloat64(array.data, dtype), dtype));
      return tensor;
    case NpyDType::kFloat16:
      if (dtype == v1::FLOAT16) {
        tensor.set_data(array.data);
        return tensor;
      }
      break;
    case NpyDType::kFloat32:
      if (dtype == v1::FLOAT32) {
        tensor.set_data(array.data);
        return tensor;
      }
      break;
  }
  ROPE_ASSIGN_OR_RETURN(
      std::vector<float> values,
      DecodeFloats(array.data, array.dtype == NpyDType::kFloat32 ? v1::FLOAT32 : v1::FLOAT16));
  tensor.set_data(EncodeFloats(values, dtype));
  return tensor;
}

absl::StatusOr<NpyArray> TensorToNpy(const v1::Tensor& tensor, absl::string_view what) {
  ROPE_RETURN_IF_ERROR(TensorToFloats(tensor, what).status());
  NpyArray array;
  switch (tensor.dtype()) {
    case v1::FLOAT16: array.dtype = NpyDType::kFloat16; break;
    case v1::BFLOAT16: array.dtype = NpyDType::kUInt16; break;
    case v1::INT32: array.dtype = NpyDType::kInt32; break;
    default: array.dtype = NpyDType::kFloat32; break;
  }
  array.shape.assign(tensor.shape().begin(), tensor.shape().end());
  array.data = tensor.data();
  return array;
}

TensorStats ComputeStats(absl::Span<const float> values) {
  TensorStats stats;
  stats.count = static_cast<int64_t>(values.size());
  double sum = 0;
  int64_t finite = 0;
  for (float v : values) {
    if (!std::isfinite(v)) {
      ++stats.non_finite;
      continue;
    }
    if (finite == 0 || v < stats.min) stats.min = v;
    if (finite == 0 || v > stats.max) stats.max = v;
    sum += v;
    ++finite;
  }
  stats.mean = finite > 0 ? sum / static_cast<double>(finite) : 0.0;
  return stats;
}

}  // namespace client
}  // namespace rope
