// core/engine/rope_table.h: inverse frequencies and cos/sin rows against a
// long double reference, far out in position (the precision contract holds
// for every position < 2^24).
#include "core/engine/rope_table.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/test_util.h"
#include "tests/unit/reference_rope.h"

namespace rope {
namespace {

// The contract in rope_table.h.
constexpr double kTableTolerance = 1.2e-7;

using test::PlainTableKey;

using reference::CompareRows;
using reference::MaxError;

TEST(InvFreqTest, DerivationNoteVector) {
  // theta = 100, head_dim = 4: inv_freq = (100^0, 100^(-1/2)) = (1, 0.1).
  const std::vector<double> inv = ComputeInvFreq(PlainTableKey(100, 4, 8));
  ASSERT_EQ(inv.size(), 2u);
  EXPECT_EQ(inv[0], 1.0);
  EXPECT_NEAR(inv[1], 0.1, 1e-16);
}

TEST(InvFreqTest, MatchesLongDoubleReference) {
  for (double theta : {10000.0, 500000.0, 100.0, 1e6}) {
    for (int rotary_dim : {2, 6, 64, 128}) {
      const std::vector<double> got = ComputeInvFreq(PlainTableKey(theta, rotary_dim, 16));
      const std::vector<long double> want = reference::InvFreqLong(theta, rotary_dim);
      ASSERT_EQ(got.size(), want.size()) << theta << " " << rotary_dim;
      for (size_t i = 0; i < got.size(); ++i) {
        // Rounding the exponent -2i/r to double perturbs theta^e relatively
        // by |e ln(theta)| ulp; pow itself adds about one more.
        const double exponent = 2.0 * i / rotary_dim;
        const double tolerance = 2.3e-16 * (2.0 + exponent * std::log(theta));
        const long double rel = std::fabs((got[i] - want[i]) / want[i]);
        EXPECT_LE(static_cast<double>(rel), tolerance)
            << "theta " << theta << " rotary_dim " << rotary_dim << " i " << i;
      }
    }
  }
}

TEST(AttentionFactorTest, PlainRopeHasNoFactor) {
  EXPECT_EQ(ComputeAttentionFactor(PlainTableKey(10000, 64, 16)), 1.0);
}

// Rows far from 0 are where float32 angle arithmetic (Llama's table) falls
// apart; ours must stay within float32 rounding of the exact values.
struct FarRowsCase {
  double theta;
  int rotary_dim;
  int64_t first_pos;
  int64_t count;
};

class FarRowsTest : public ::testing::TestWithParam<FarRowsCase> {};

TEST_P(FarRowsTest, WithinFloatRoundingOfExact) {
  const FarRowsCase& c = GetParam();
  const TableKey key = PlainTableKey(c.theta, c.rotary_dim, 1);
  const std::vector<double> inv_freq = ComputeInvFreq(key);
  const int half = c.rotary_dim / 2;
  std::vector<float> cos(c.count * half, -7.0f), sin(c.count * half, -7.0f);
  FillTableRows(inv_freq, 1.0, c.first_pos, c.count, cos.data(), sin.data());
  const MaxError err = CompareRows(c.theta, c.rotary_dim, 1.0L, c.first_pos, c.count,
                                   cos.data(), sin.data());
  EXPECT_LE(err.value, kTableTolerance) << "at position " << err.pos << ", pair " << err.index;
}

std::vector<FarRowsCase> FarRowsCases() {
  std::vector<FarRowsCase> cases;
  // 200 rows straddling each power of two (and ending at 2^24 - 1), so runs
  // of consecutive rows and their first rows are both covered.
  for (double theta : {10000.0, 500000.0}) {
    for (int rotary_dim : {128, 64}) {
      for (int64_t p : {int64_t{1} << 14, int64_t{1} << 17, int64_t{1} << 20}) {
        cases.push_back({theta, rotary_dim, p - 100, 200});
      }
      cases.push_back({theta, rotary_dim, (int64_t{1} << 24) - 200, 200});
    }
  }
  return cases;
}

std::string FarRowsName(const ::testing::TestParamInfo<FarRowsCase>& info) {
  const FarRowsCase& c = info.param;
  return "Theta" + std::to_string(static_cast<int64_t>(c.theta)) + "_Rotary" +
         std::to_string(c.rotary_dim) + "_From" + std::to_string(c.first_pos);
}

INSTANTIATE_TEST_SUITE_P(Positions, FarRowsTest, ::testing::ValuesIn(FarRowsCases()),
                         FarRowsName);

TEST(FillTableRowsTest, FactorScalesEveryValue) {
  const TableKey key = PlainTableKey(10000, 16, 1);
  const std::vector<double> inv_freq = ComputeInvFreq(key);
  std::vector<float> cos(100 * 8), sin(100 * 8);
  FillTableRows(inv_freq, 0.75, 1000, 100, cos.data(), sin.data());
  const MaxError err = CompareRows(10000, 16, 0.75L, 1000, 100, cos.data(), sin.data());
  EXPECT_LE(err.value, kTableTolerance) << "at position " << err.pos << ", pair " << err.index;
}

TEST(FillTableRowsTest, RowsDoNotDependOnWhereTheFillStarts) {
  // A row filled as part of a range starting at 0 and one filled on its own
  // both satisfy the contract (they need not be bit-identical).
  const TableKey key = PlainTableKey(500000, 128, 1);
  const std::vector<double> inv_freq = ComputeInvFreq(key);
  std::vector<float> cos(300 * 64), sin(300 * 64);
  FillTableRows(inv_freq, 1.0, 0, 300, cos.data(), sin.data());
  std::vector<float> one_cos(64), one_sin(64);
  FillTableRows(inv_freq, 1.0, 257, 1, one_cos.data(), one_sin.data());
  for (int i = 0; i < 64; ++i) {
    EXPECT_NEAR(one_cos[i], cos[257 * 64 + i], 2 * kTableTolerance) << i;
    EXPECT_NEAR(one_sin[i], sin[257 * 64 + i], 2 * kTableTolerance) << i;
  }
}

TEST(RopeTableTest, BuildDescribesItsKeyAndSize) {
  const TableKey key = PlainTableKey(10000, 64, 512);
  const auto table = RopeTable::Build(key);
  ASSERT_NE(table, nullptr);
  EXPECT_TRUE(table->key() == key);
  EXPECT_EQ(table->max_len(), 512);
  EXPECT_EQ(table->half(), 32);
  EXPECT_EQ(table->byte_size(), 512 * 32 * 2 * 4);
  EXPECT_EQ(TableBytes(key), 512 * 32 * 2 * 4);
  EXPECT_EQ(table->attention_factor(), 1.0);
  EXPECT_EQ(table->inv_freq(), ComputeInvFreq(key));
  // One block (512 rows < 4096).
  ASSERT_EQ(table->block_slots(), 1);
  EXPECT_EQ(table->cos_row(3), table->block(0)->cos() + 3 * 32);
  EXPECT_EQ(table->sin_row(3), table->block(0)->sin() + 3 * 32);
}

TEST(RopeTableTest, PositionZeroIsTheIdentity) {
  const auto table = RopeTable::Build(PlainTableKey(10000, 8, 4));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(table->cos_row(0)[i], 1.0f);
    EXPECT_EQ(table->sin_row(0)[i], 0.0f);
  }
}

TEST(RopeTableTest, EveryRowMatchesReference) {
  const TableKey key = PlainTableKey(500000, 64, 3000);
  const auto table = RopeTable::Build(key);
  const MaxError err =
      CompareRows(500000, 64, 1.0L, 0, 3000, table->block(0)->cos(), table->block(0)->sin());
  EXPECT_LE(err.value, kTableTolerance) << "at position " << err.pos << ", pair " << err.index;
}

TEST(RopeTableTest, ParallelFillCoversEveryRow) {
  // A fill split into uneven chunks run out of order must give a table that
  // is as good as a serial one in every row.
  const TableKey key = PlainTableKey(10000, 32, 1001);
  int64_t rows_seen = -1;
  int chunks = 0;
  const auto table = RopeTable::Build(
      key, [&](int64_t rows, const std::function<void(int64_t, int64_t)>& fill) {
        rows_seen = rows;
        const int64_t bounds[] = {0, 1, 97, 500, 999, rows};
        for (int c = 4; c >= 0; --c) {
          fill(bounds[c], bounds[c + 1]);
          ++chunks;
        }
      });
  EXPECT_EQ(rows_seen, 1001);
  EXPECT_EQ(chunks, 5);
  const MaxError err =
      CompareRows(10000, 32, 1.0L, 0, 1001, table->block(0)->cos(), table->block(0)->sin());
  EXPECT_LE(err.value, kTableTolerance) << "at position " << err.pos << ", pair " << err.index;
}

}  // namespace
}  // namespace rope

namespace rope {
namespace {

// angle_precision FLOAT32 (float32_angles.h): its own table key, float32
// inverse frequencies, and angles that are float32 products. The bits
// against torch are checked in tests/python/test_angle_precision.py.
TEST(Float32AnglesTest, OwnKeyFloat32FrequenciesAndAngles) {
  RopeConfig config;
  config.theta = 500000;
  config.head_dim = 128;
  config.max_len = 65536;
  const TableKey exact = MakeTableKey(config, 0);
  config.angle_precision = AnglePrecision::kFloat32;
  const TableKey float32 = MakeTableKey(config, 0);
  EXPECT_FALSE(exact == float32);
  EXPECT_EQ(float32.ToString(), exact.ToString() + " angles=float32");
  const std::vector<double> inv = ComputeInvFreq(float32);
  ASSERT_EQ(inv.size(), 64u);
  for (double f : inv) EXPECT_EQ(f, static_cast<double>(static_cast<float>(f)));
  const std::shared_ptr<const RopeTable> table = RopeTable::Build(float32);
  const float angle = 40000.0f * static_cast<float>(inv[1]);
  EXPECT_NEAR(table->cos_row(40000)[1], std::cos(static_cast<double>(angle)), 1.2e-7);
  // The exact table's angle differs by the float32 product's rounding.
  const std::shared_ptr<const RopeTable> exact_table = RopeTable::Build(exact);
  EXPECT_NEAR(exact_table->cos_row(40000)[1], std::cos(40000.0 * ComputeInvFreq(exact)[1]), 6e-8);
}

TEST(Float32AnglesTest, OnlyScalingsWithAFloat32FormAreAccepted) {
  RopeConfig config;
  config.head_dim = 8;
  config.max_len = 64;
  config.angle_precision = AnglePrecision::kFloat32;
  EXPECT_TRUE(ValidateConfig(config, 1 << 24).ok());
  config.scaling = Llama3Scaling{};
  EXPECT_TRUE(ValidateConfig(config, 1 << 24).ok());
  config.scaling = DynamicNtkScaling{2.0, 16};
  const absl::Status refused = ValidateConfig(config, 1 << 24);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("config.angle_precision is ANGLE_FLOAT32 with scaling dynamic"),
            absl::string_view::npos)
      << refused;
}

}  // namespace
}  // namespace rope
