// .npy reading and writing: round trips, files written by NumPy itself, and
// the rejections (fortran order, big-endian, other dtypes, bad lengths).
#include "client/npy.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rope {
namespace client {
namespace {

using ::testing::HasSubstr;

std::string FloatBytes(const std::vector<float>& values) {
  std::string out(values.size() * sizeof(float), '\0');
  std::memcpy(&out[0], values.data(), out.size());
  return out;
}

// A .npy file by hand: version 1.0 with the given header dict text.
std::string HandMadeNpy(const std::string& dict, const std::string& payload) {
  std::string header = dict;
  while ((10 + header.size() + 1) % 64 != 0) header.push_back(' ');
  header.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  return out + header + payload;
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/rope_npy_test_", getpid(), "_", name);
}

TEST(NpyTest, RoundTripsFloat32InMemory) {
  NpyArray array;
  array.dtype = NpyDType::kFloat32;
  array.shape = {2, 3};
  array.data = FloatBytes({1, 2, 3, 4, 5, -6.5f});
  absl::StatusOr<std::string> bytes = SerializeNpy(array);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(bytes->substr(0, 6), std::string("\x93NUMPY", 6));
  // NumPy aligns the data to 64 bytes.
  EXPECT_EQ((bytes->size() - array.data.size()) % 64, 0u);
  absl::StatusOr<NpyArray> back = ParseNpy(*bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->dtype, NpyDType::kFloat32);
  EXPECT_EQ(back->shape, array.shape);
  EXPECT_EQ(back->data, array.data);
}

TEST(NpyTest, RoundTripsEveryDTypeAndRankThroughAFile) {
  const std::vector<std::vector<int64_t>> shapes = {{}, {5}, {1, 4}, {2, 3, 1, 2}};
  for (NpyDType dtype : {NpyDType::kFloat32, NpyDType::kFloat16, NpyDType::kUInt16}) {
    for (const std::vector<int64_t>& shape : shapes) {
      NpyArray array;
      array.dtype = dtype;
      array.shape = shape;
      array.data.resize(array.num_elements() * NpyDTypeSize(dtype));
      for (size_t i = 0; i < array.data.size(); ++i) array.data[i] = static_cast<char>(i * 7 + 1);
      const std::string path = TempPath("roundtrip.npy");
      ASSERT_TRUE(WriteNpyFile(path, array).ok());
      absl::StatusOr<NpyArray> back = ReadNpyFile(path);
      std::remove(path.c_str());
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_EQ(back->dtype, dtype);
      EXPECT_EQ(back->shape, shape);
      EXPECT_EQ(back->data, array.data);
    }
  }
}

TEST(NpyTest, ReadsVersion2Header) {
  std::string dict = "{'descr': '<f2', 'fortran_order': False, 'shape': (3,), }";
  std::string header = dict;
  while ((12 + header.size() + 1) % 64 != 0) header.push_back(' ');
  header.push_back('\n');
  std::string bytes("\x93NUMPY\x02\x00", 8);
  const uint32_t len = static_cast<uint32_t>(header.size());
  for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
  bytes += header + std::string(6, '\x01');
  absl::StatusOr<NpyArray> array = ParseNpy(bytes);
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->dtype, NpyDType::kFloat16);
  EXPECT_EQ(array->shape, std::vector<int64_t>{3});
}

TEST(NpyTest, AcceptsDoubleQuotesAndAnyKeyOrder) {
  absl::StatusOr<NpyArray> array = ParseNpy(HandMadeNpy(
      "{\"shape\": (1, 2), \"fortran_order\": False, \"descr\": \"<f4\"}", FloatBytes({1, 2})));
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->shape, (std::vector<int64_t>{1, 2}));
}

TEST(NpyTest, RejectsFortranOrder) {
  absl::StatusOr<NpyArray> array = ParseNpy(
      HandMadeNpy("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", FloatBytes({1, 2})),
      "x.npy");
  EXPECT_EQ(array.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(array.status().message()), HasSubstr("x.npy: fortran_order is True"));
}

TEST(NpyTest, RejectsBigEndian) {
  absl::StatusOr<NpyArray> array = ParseNpy(
      HandMadeNpy("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", FloatBytes({1, 2})));
  EXPECT_EQ(array.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(array.status().message()), HasSubstr("'>f4' is big-endian"));
}

TEST(NpyTest, RejectsOtherDTypes) {
  absl::StatusOr<NpyArray> array = ParseNpy(HandMadeNpy(
      "{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }", std::string(8, '\0')));
  EXPECT_EQ(array.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(array.status().message()), HasSubstr("dtype '<i8' is not supported"));
}

TEST(NpyTest, ReadsFloat64AndInt16) {
  absl::StatusOr<NpyArray> f8 = ParseNpy(HandMadeNpy(
      "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", std::string(16, '\0')));
  ASSERT_TRUE(f8.ok()) << f8.status();
  EXPECT_EQ(f8->dtype, NpyDType::kFloat64);
  EXPECT_EQ(f8->data.size(), 16u);
  absl::StatusOr<NpyArray> i2 = ParseNpy(HandMadeNpy(
      "{'descr': '<i2', 'fortran_order': False, 'shape': (3,), }", std::string(6, '\0')));
  ASSERT_TRUE(i2.ok()) << i2.status();
  EXPECT_EQ(i2->dtype, NpyDType::kInt16);
  // The payload length follows the element size (8 and 2 bytes).
  EXPECT_FALSE(ParseNpy(HandMadeNpy("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }",
                                    std::string(8, '\0')))
                   .ok());
}

// Int32 (top-k indices) written and read back byte for byte, as NumPy
// writes it: descr '<i4', 4 bytes per element, negative values included.
TEST(NpyTest, Int32RoundTrips) {
  NpyArray array;
  array.dtype = NpyDType::kInt32;
  array.shape = {2, 3};
  const int32_t values[] = {0, 1, -1, 2147483647, -2147483647 - 1, 7};
  array.data.assign(reinterpret_cast<const char*>(values), sizeof(values));
  absl::StatusOr<std::string> bytes = SerializeNpy(array);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_THAT(*bytes, HasSubstr("'descr': '<i4'"));
  absl::StatusOr<NpyArray> back = ParseNpy(*bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->dtype, NpyDType::kInt32);
  EXPECT_EQ(back->shape, array.shape);
  EXPECT_EQ(back->data, array.data);
  // The payload length follows the element size (4 bytes).
  EXPECT_FALSE(ParseNpy(HandMadeNpy("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }",
                                    std::string(6, '\0')))
                   .ok());
}

TEST(NpyTest, RejectsStructuredDType) {
  absl::StatusOr<NpyArray> array = ParseNpy(HandMadeNpy(
      "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", FloatBytes({1})));
  EXPECT_EQ(array.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(array.status().message()), HasSubstr("'descr' is not a string"));
}

TEST(NpyTest, RejectsPayloadLengthMismatch) {
  absl::StatusOr<NpyArray> array = ParseNpy(HandMadeNpy(
      "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", FloatBytes({1, 2})));
  EXPECT_EQ(array.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(array.status().message()), HasSubstr("data is 8 bytes"));
}

TEST(NpyTest, RejectsMissingMagic) {
  absl::StatusOr<NpyArray> array = ParseNpy("PK\x03\x04 this is a zip, not an npy");
  EXPECT_EQ(array.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(array.status().message()), HasSubstr("not a .npy file"));
}

TEST(NpyTest, RejectsMissingKey) {
  absl::StatusOr<NpyArray> array =
      ParseNpy(HandMadeNpy("{'descr': '<f4', 'shape': (1,), }", FloatBytes({1})));
  EXPECT_EQ(array.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(array.status().message()), HasSubstr("lacks one of"));
}

TEST(NpyTest, RejectsHeaderLongerThanFile) {
  std::string bytes("\x93NUMPY\x01\x00\xff\x00{", 11);
  absl::StatusOr<NpyArray> array = ParseNpy(bytes);
  EXPECT_EQ(array.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(array.status().message()), HasSubstr("runs past the end"));
}

TEST(NpyTest, MissingFileIsNotFound) {
  absl::StatusOr<NpyArray> array = ReadNpyFile(TempPath("does_not_exist.npy"));
  EXPECT_EQ(array.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(array.status().message()), HasSubstr("does_not_exist.npy"));
}

TEST(NpyTest, SerializeRejectsDataNotMatchingShape) {
  NpyArray array;
  array.shape = {4};
  array.data = FloatBytes({1, 2});
  absl::StatusOr<std::string> bytes = SerializeNpy(array);
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bytes.status().message()), HasSubstr("needs 16"));
}

// Interoperability with NumPy itself, when the system Python has it.
class NumpyInteropTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "/usr/bin/python3 with numpy is not available";
    }
  }

  // Runs a python snippet; true on exit status 0.
  static bool RunPython(const std::string& code) {
    const std::string script = TempPath("script.py");
    FILE* f = std::fopen(script.c_str(), "w");
    if (f == nullptr) return false;
    std::fputs(code.c_str(), f);
    std::fclose(f);
    const int rc = std::system(absl::StrCat("timeout 60 /usr/bin/python3 ", script).c_str());
    std::remove(script.c_str());
    return rc == 0;
  }
};

TEST_F(NumpyInteropTest, ReadsFilesWrittenByNumpy) {
  const std::string f32 = TempPath("np_f32.npy");
  const std::string f16 = TempPath("np_f16.npy");
  ASSERT_TRUE(RunPython(absl::StrCat(
      "import numpy as np\n"
      "np.save('", f32, "', np.arange(24, dtype=np.float32).reshape(2, 3, 4) * 0.5)\n"
      "np.save('", f16, "', np.array([[1.5, -2.0, 65504.0]], dtype=np.float16))\n")));
  absl::StatusOr<NpyArray> a = ReadNpyFile(f32);
  absl::StatusOr<NpyArray> b = ReadNpyFile(f16);
  std::remove(f32.c_str());
  std::remove(f16.c_str());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->dtype, NpyDType::kFloat32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3, 4}));
  std::vector<float> values(24);
  std::memcpy(values.data(), a->data.data(), a->data.size());
  EXPECT_EQ(values[0], 0.0f);
  EXPECT_EQ(values[23], 11.5f);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->dtype, NpyDType::kFloat16);
  EXPECT_EQ(b->shape, (std::vector<int64_t>{1, 3}));
  uint16_t bits[3];
  std::memcpy(bits, b->data.data(), sizeof(bits));
  EXPECT_EQ(bits[0], 0x3e00);  // 1.5
  EXPECT_EQ(bits[1], 0xc000);  // -2
  EXPECT_EQ(bits[2], 0x7bff);  // 65504, the largest half
}

TEST_F(NumpyInteropTest, NumpyReadsOurFiles) {
  NpyArray array;
  array.dtype = NpyDType::kFloat32;
  array.shape = {2, 2};
  array.data = FloatBytes({1.25f, -2, 3, 4.5f});
  const std::string path = TempPath("ours.npy");
  ASSERT_TRUE(WriteNpyFile(path, array).ok());
  const bool ok = RunPython(absl::StrCat(
      "import numpy as np, sys\n"
      "a = np.load('", path, "')\n"
      "sys.exit(0 if a.dtype == np.float32 and a.shape == (2, 2) and\n"
      "         a.tolist() == [[1.25, -2.0], [3.0, 4.5]] else 1)\n"));
  std::remove(path.c_str());
  EXPECT_TRUE(ok);
}

}  // namespace
}  // namespace client
}  // namespace rope
