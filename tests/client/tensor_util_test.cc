// Tensor helpers: dtype conversions (round to nearest even), tensors from
// .npy arrays and back, seeded random values, statistics.
#include "client/tensor_util.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rope {
namespace client {
namespace {

using ::testing::HasSubstr;

uint16_t Bits16(const std::string& bytes, size_t i) {
  uint16_t v;
  std::memcpy(&v, bytes.data() + 2 * i, sizeof(v));
  return v;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

TEST(TensorUtilTest, DTypeSizesAndNames) {
  EXPECT_EQ(*DTypeSize(v1::FLOAT32), 4u);
  EXPECT_EQ(*DTypeSize(v1::FLOAT16), 2u);
  EXPECT_EQ(*DTypeSize(v1::BFLOAT16), 2u);
  EXPECT_EQ(DTypeSize(v1::DTYPE_UNSPECIFIED).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DTypeName(v1::BFLOAT16), "bfloat16");
  EXPECT_EQ(*ParseDType("bf16"), v1::BFLOAT16);
  EXPECT_EQ(*ParseDType("Float16"), v1::FLOAT16);
  absl::StatusOr<v1::DType> bad = ParseDType("int8");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("'int8'"));
}

TEST(TensorUtilTest, Float16EncodingRoundsToNearestEven) {
  // 1 + 2^-11 is exactly halfway between 1 and the next half (1 + 2^-10):
  // ties go to the even mantissa, 1. 1 + 3*2^-11 is halfway between
  // 1 + 2^-10 (odd) and 1 + 2^-9 (even): rounds up.
  const std::vector<float> values = {1.0f + 0x1.0p-11f, 1.0f + 3 * 0x1.0p-11f, 65520.0f,
                                     -0.0f, 0x1.0p-24f};
  const std::string bytes = EncodeFloats(values, v1::FLOAT16);
  ASSERT_EQ(bytes.size(), 10u);
  EXPECT_EQ(Bits16(bytes, 0), 0x3c00);
  EXPECT_EQ(Bits16(bytes, 1), 0x3c02);
  EXPECT_EQ(Bits16(bytes, 2), 0x7c00);  // overflows to +inf
  EXPECT_EQ(Bits16(bytes, 3), 0x8000);
  EXPECT_EQ(Bits16(bytes, 4), 0x0001);  // smallest subnormal
}

TEST(TensorUtilTest, BFloat16EncodingRoundsToNearestEven) {
  const std::vector<float> values = {
      FromBits(0x3f808000u),  // halfway, even below: stays 0x3f80
      FromBits(0x3f818000u),  // halfway, odd below: rounds to 0x3f82
      FromBits(0x3f808001u),  // just above halfway: rounds up
      std::numeric_limits<float>::quiet_NaN()};
  const std::string bytes = EncodeFloats(values, v1::BFLOAT16);
  EXPECT_EQ(Bits16(bytes, 0), 0x3f80);
  EXPECT_EQ(Bits16(bytes, 1), 0x3f82);
  EXPECT_EQ(Bits16(bytes, 2), 0x3f81);
  EXPECT_EQ(Bits16(bytes, 3) & 0x7f80, 0x7f80);
  EXPECT_NE(Bits16(bytes, 3) & 0x007f, 0);  // still a NaN
}

TEST(TensorUtilTest, DecodeIsExactForRepresentableValues) {
  const std::vector<float> values = {0.5f, -3.0f, 1024.0f, 0.0f};
  for (v1::DType dtype : {v1::FLOAT32, v1::FLOAT16, v1::BFLOAT16}) {
    absl::StatusOr<std::vector<float>> back = DecodeFloats(EncodeFloats(values, dtype), dtype);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, values) << DTypeName(dtype);
  }
}

TEST(TensorUtilTest, DecodeRejectsPartialElement) {
  absl::StatusOr<std::vector<float>> back = DecodeFloats(std::string(7, '\0'), v1::FLOAT32);
  EXPECT_EQ(back.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(back.status().message()), HasSubstr("7 bytes"));
}

TEST(TensorUtilTest, MakeTensorChecksCountAndDims) {
  absl::StatusOr<v1::Tensor> t = MakeTensor({1, 2, 3, 4, 5, 6}, {2, 3}, v1::FLOAT16);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->dtype(), v1::FLOAT16);
  EXPECT_EQ(t->data().size(), 12u);
  EXPECT_EQ(t->shape_size(), 2);

  absl::StatusOr<v1::Tensor> wrong_count = MakeTensor({1, 2, 3}, {2, 3}, v1::FLOAT32);
  EXPECT_EQ(wrong_count.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(wrong_count.status().message()), HasSubstr("3 values"));

  absl::StatusOr<v1::Tensor> zero_dim = MakeTensor({}, {2, 0}, v1::FLOAT32);
  EXPECT_EQ(zero_dim.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(zero_dim.status().message()), HasSubstr("shape[1] is 0"));
}

TEST(TensorUtilTest, TensorToFloatsChecksByteLength) {
  v1::Tensor t;
  t.set_dtype(v1::FLOAT32);
  t.add_shape(3);
  t.set_data(std::string(8, '\0'));
  absl::StatusOr<std::vector<float>> values = TensorToFloats(t, "reply q");
  EXPECT_EQ(values.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(values.status().message()), HasSubstr("reply q.data is 8 bytes"));
}

TEST(TensorUtilTest, RandomFloatsAreSeededAndShaped) {
  const std::vector<float> a = RandomFloats(1000, 42, Distribution::kNormal);
  const std::vector<float> b = RandomFloats(1000, 42, Distribution::kNormal);
  const std::vector<float> c = RandomFloats(1000, 43, Distribution::kNormal);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  const TensorStats normal = ComputeStats(a);
  EXPECT_NEAR(normal.mean, 0.0, 0.15);  // 1000 samples: stddev of the mean ~0.03
  EXPECT_LT(normal.min, -1.0f);
  EXPECT_GT(normal.max, 1.0f);
  const std::vector<float> u = RandomFloats(1000, 7, Distribution::kUniform);
  const TensorStats uniform = ComputeStats(u);
  EXPECT_GE(uniform.min, -1.0f);
  EXPECT_LT(uniform.max, 1.0f);
  EXPECT_NEAR(uniform.mean, 0.0, 0.1);
}

TEST(TensorUtilTest, RandomTensorHasRequestedShapeAndDType) {
  absl::StatusOr<v1::Tensor> t = RandomTensor({1, 3, 2, 8}, v1::BFLOAT16, 1,
                                              Distribution::kUniform);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->dtype(), v1::BFLOAT16);
  EXPECT_EQ(t->data().size(), 48u * 2);
  absl::StatusOr<v1::Tensor> bad = RandomTensor({1, -3}, v1::FLOAT32, 1, Distribution::kNormal);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("shape[1] is -3"));
}

TEST(TensorUtilTest, TensorFromNpyConvertsFloat32ToEachDType) {
  NpyArray array;
  array.dtype = NpyDType::kFloat32;
  array.shape = {2};
  const float values[2] = {1.0f + 0x1.0p-11f, -2.5f};
  array.data.assign(reinterpret_cast<const char*>(values), sizeof(values));
  absl::StatusOr<v1::Tensor> f32 = TensorFromNpy(array, v1::FLOAT32);
  ASSERT_TRUE(f32.ok()) << f32.status();
  EXPECT_EQ(f32->data(), array.data);
  absl::StatusOr<v1::Tensor> f16 = TensorFromNpy(array, v1::FLOAT16);
  ASSERT_TRUE(f16.ok()) << f16.status();
  EXPECT_EQ(Bits16(f16->data(), 0), 0x3c00);
  EXPECT_EQ(Bits16(f16->data(), 1), 0xc100);
  absl::StatusOr<v1::Tensor> bf16 = TensorFromNpy(array, v1::BFLOAT16);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ(Bits16(bf16->data(), 0), 0x3f80);
  EXPECT_EQ(Bits16(bf16->data(), 1), 0xc020);
}

TEST(TensorUtilTest, UInt16NpyIsReadOnlyAsBFloat16Bits) {
  NpyArray array;
  array.dtype = NpyDType::kUInt16;
  array.shape = {1};
  array.data = std::string("\x80\x3f", 2);  // bfloat16 1.0
  absl::StatusOr<v1::Tensor> bf16 = TensorFromNpy(array, v1::BFLOAT16);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ(bf16->data(), array.data);
  absl::StatusOr<v1::Tensor> f32 = TensorFromNpy(array, v1::FLOAT32, "k.npy");
  EXPECT_EQ(f32.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(f32.status().message()), HasSubstr("k.npy: dtype '<u2'"));
}

NpyArray Float64Array(const std::vector<double>& values) {
  NpyArray array;
  array.dtype = NpyDType::kFloat64;
  array.shape = {static_cast<int64_t>(values.size())};
  array.data.assign(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(double));
  return array;
}

TEST(TensorUtilTest, Float64NpyIsConvertedToFloat32RoundingToNearestEven) {
  absl::StatusOr<v1::Tensor> f32 = TensorFromNpy(Float64Array({0.1, -3.0}), v1::FLOAT32);
  ASSERT_TRUE(f32.ok()) << f32.status();
  ASSERT_EQ(f32->data().size(), 8u);
  uint32_t bits[2];
  std::memcpy(bits, f32->data().data(), 8);
  EXPECT_EQ(bits[0], 0x3dcccccdu);  // float32 nearest to 0.1 (0.100000001490116...)
  EXPECT_EQ(bits[1], 0xc0400000u);
}

TEST(TensorUtilTest, Float64NpyIsRoundedOnceToSixteenBitTypes) {
  // Just above the midpoint between bfloat16 1.0 (0x3f80) and 1 + 2^-7
  // (0x3f81): the nearest is 0x3f81. Through float32 first, the 2^-30 would
  // be lost and the tie would go to even, 0x3f80.
  const double above_bf16_tie = 1.0 + 0x1.0p-8 + 0x1.0p-30;
  const double bf16_tie = 1.0 + 0x1.0p-8;  // a true tie: to even, 0x3f80
  absl::StatusOr<v1::Tensor> bf16 =
      TensorFromNpy(Float64Array({above_bf16_tie, bf16_tie, -above_bf16_tie}), v1::BFLOAT16);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ(Bits16(bf16->data(), 0), 0x3f81);
  EXPECT_EQ(Bits16(bf16->data(), 1), 0x3f80);
  EXPECT_EQ(Bits16(bf16->data(), 2), 0xbf81);
  // float16: 1 + 2^-11 is the midpoint of 0x3c00 and 0x3c01.
  absl::StatusOr<v1::Tensor> f16 =
      TensorFromNpy(Float64Array({1.0 + 0x1.0p-11 + 0x1.0p-40, 1.0 + 0x1.0p-11}), v1::FLOAT16);
  ASSERT_TRUE(f16.ok()) << f16.status();
  EXPECT_EQ(Bits16(f16->data(), 0), 0x3c01);
  EXPECT_EQ(Bits16(f16->data(), 1), 0x3c00);
}

TEST(TensorUtilTest, Int16NpyIsReadAsBFloat16BitsOnlyWithBFloat16) {
  NpyArray array;
  array.dtype = NpyDType::kInt16;
  array.shape = {2};
  array.data = std::string("\x80\x3f\x20\xc0", 4);  // bfloat16 1.0, -2.5 (negative as int16)
  absl::StatusOr<v1::Tensor> bf16 = TensorFromNpy(array, v1::BFLOAT16);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ(bf16->dtype(), v1::BFLOAT16);
  EXPECT_EQ(bf16->data(), array.data);
  absl::StatusOr<v1::Tensor> f32 = TensorFromNpy(array, v1::FLOAT32, "q.npy");
  EXPECT_EQ(f32.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(f32.status().message()), HasSubstr("q.npy: dtype '<i2'"));
}

TEST(TensorUtilTest, TensorFromNpyRejectsScalar) {
  NpyArray array;
  array.data = std::string(4, '\0');
  absl::StatusOr<v1::Tensor> t = TensorFromNpy(array, v1::FLOAT32, "q.npy");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("q.npy: shape is empty"));
}

TEST(TensorUtilTest, TensorToNpyKeepsBitsForEachDType) {
  for (v1::DType dtype : {v1::FLOAT32, v1::FLOAT16, v1::BFLOAT16}) {
    absl::StatusOr<v1::Tensor> t = MakeTensor({0.25f, 3.0f}, {1, 2}, dtype);
    ASSERT_TRUE(t.ok());
    absl::StatusOr<NpyArray> array = TensorToNpy(*t);
    ASSERT_TRUE(array.ok()) << array.status();
    EXPECT_EQ(array->data, t->data());
    EXPECT_EQ(array->shape, (std::vector<int64_t>{1, 2}));
    absl::StatusOr<v1::Tensor> back = TensorFromNpy(*array, dtype);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->data(), t->data());
  }
  absl::StatusOr<v1::Tensor> bf = MakeTensor({1.0f}, {1}, v1::BFLOAT16);
  EXPECT_EQ(TensorToNpy(*bf)->dtype, NpyDType::kUInt16);
}

TEST(TensorUtilTest, StatsCountNonFiniteSeparately) {
  const float inf = std::numeric_limits<float>::infinity();
  const TensorStats stats = ComputeStats({-inf, 1.0f, 3.0f, std::nanf("")});
  EXPECT_EQ(stats.count, 4);
  EXPECT_EQ(stats.non_finite, 2);
  EXPECT_EQ(stats.min, 1.0f);
  EXPECT_EQ(stats.max, 3.0f);
  EXPECT_DOUBLE_EQ(stats.mean, 2.0);
}

}  // namespace
}  // namespace client
}  // namespace rope
