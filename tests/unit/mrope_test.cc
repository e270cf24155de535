// M-RoPE through the Engine and the CPU backend: three equal position rows
// give output bit-identical to plain RoPE (any scaling, both layouts, every
// dtype, 3*S and 3*B*S positions); distinct rows rotate frequency i by its
// axis' position, checked against a double reference written from
// transformers' section split and vLLM's interleaving
// (reference::MropeAxes); every row is range-checked.
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "core/engine/engine.h"
#include "tests/unit/cpu_test_engine.h"
#include "tests/unit/reference_scaling.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/test_util.h"

namespace rope {
namespace {

using test::StatusIs;

constexpr uint32_t kMaxLen = 4096;

// The CPU engine on the SIMD path ROPE_CPU_SIMD names (ctest runs this file
// once per compiled path) or the best this CPU runs; null with *skip saying
// why when this CPU cannot run the path asked for.
std::unique_ptr<Engine> NewEngine(std::string* skip) { return test::MakeCpuTestEngine(skip); }

RopeConfig QwenLikeConfig(Layout layout, bool interleaved, ScalingConfig scaling = NoScaling{}) {
  RopeConfig c;
  c.theta = 1000000;
  c.head_dim = 32;
  c.max_len = kMaxLen;
  c.layout = layout;
  c.scaling = std::move(scaling);
  c.mrope.section = interleaved ? std::vector<uint32_t>{6, 5, 5} : std::vector<uint32_t>{4, 6, 6};
  c.mrope.interleaved = interleaved;
  return c;
}

// Rotates a copy of `q` ([B, S, H, D]) and returns its bytes.
absl::StatusOr<std::vector<uint8_t>> RotateCopy(Engine& engine, const RopeConfig& config,
                                                const test::HostTensor& q,
                                                std::vector<int64_t> positions) {
  test::HostTensor copy = q;
  RotateParams p;
  p.config = config;
  p.q = copy.view();
  p.positions = std::move(positions);
  absl::Status status = engine.Rotate(p);
  if (!status.ok()) return status;
  return copy.bytes;
}

std::vector<ScalingConfig> Scalings() {
  YarnScaling yarn;
  yarn.factor = 4;
  yarn.original_max_position_embeddings = 1024;
  return {NoScaling{}, LinearScaling{2}, yarn, Llama3Scaling{8, 1, 4, 1024}};
}

TEST(MropeRotateTest, EqualRowsAreBitIdenticalToPlainRope) {
  std::string skip;
  auto engine = NewEngine(&skip);
  if (engine == nullptr) GTEST_SKIP() << skip;
  std::mt19937 rng(7);
  constexpr int64_t kB = 2, kS = 5, kH = 3;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (Layout layout : {Layout::kInterleaved, Layout::kHalf}) {
      for (bool interleaved : {false, true}) {
        for (const ScalingConfig& scaling : Scalings()) {
          const RopeConfig mrope = QwenLikeConfig(layout, interleaved, scaling);
          RopeConfig plain = mrope;
          plain.mrope = MropeConfig{};
          const test::HostTensor q =
              test::Encode(dtype, {kB, kS, kH, 32}, test::RandomValues(dtype, kB * kS * kH * 32, &rng));
          const std::vector<int64_t> per_token = {3, 100, 2047, 7, 4000, 0, 1, 2, 3, 4};  // B*S
          std::vector<int64_t> three_rows;
          for (int axis = 0; axis < 3; ++axis) {
            three_rows.insert(three_rows.end(), per_token.begin(), per_token.end());
          }
          const auto want = RotateCopy(*engine, plain, q, per_token);
          const auto got = RotateCopy(*engine, mrope, q, three_rows);
          ASSERT_TRUE(want.ok()) << want.status();
          ASSERT_TRUE(got.ok()) << got.status();
          EXPECT_EQ(*got, *want) << DTypeName(dtype) << " " << DescribeMrope(mrope.mrope) << " "
                                 << ScalingName(scaling);
          // 3*S values (shared by every batch row) against S plain positions.
          const std::vector<int64_t> shared = {9, 8, 7, 6, 5};
          std::vector<int64_t> shared_rows;
          for (int axis = 0; axis < 3; ++axis) {
            shared_rows.insert(shared_rows.end(), shared.begin(), shared.end());
          }
          const auto want_shared = RotateCopy(*engine, plain, q, shared);
          const auto got_shared = RotateCopy(*engine, mrope, q, shared_rows);
          ASSERT_TRUE(got_shared.ok()) << got_shared.status();
          EXPECT_EQ(*got_shared, *want_shared) << DTypeName(dtype);
        }
      }
    }
  }
}

TEST(MropeRotateTest, StartPositionsAreTextPositionsOnEveryAxis) {
  std::string skip;
  auto engine = NewEngine(&skip);
  if (engine == nullptr) GTEST_SKIP() << skip;
  std::mt19937 rng(3);
  const RopeConfig mrope = QwenLikeConfig(Layout::kHalf, true);
  RopeConfig plain = mrope;
  plain.mrope = MropeConfig{};
  test::HostTensor a = test::Encode(DType::kFloat32, {1, 4, 2, 32},
                                    test::RandomValues(DType::kFloat32, 256, &rng));
  test::HostTensor b = a;
  RotateParams p;
  p.config = mrope;
  p.q = a.view();
  p.start_pos = 50;
  ASSERT_TRUE(engine->Rotate(p).ok());
  p.config = plain;
  p.q = b.view();
  ASSERT_TRUE(engine->Rotate(p).ok());
  EXPECT_EQ(a.bytes, b.bytes);
}

// Double reference: token (b, s) rotates pair i by pos[axis(i)] * inv_freq[i].
std::vector<double> ReferenceMrope(const RopeConfig& config, const std::vector<double>& inv_freq,
                                   double attention_factor, const std::vector<double>& q,
                                   int64_t batch, int64_t seq, int64_t heads,
                                   const std::vector<int64_t>& positions) {
  const int half = static_cast<int>(inv_freq.size());
  const std::vector<int> axes = reference::MropeAxes(
      std::vector<int>(config.mrope.section.begin(), config.mrope.section.end()),
      config.mrope.interleaved, half);
  const int64_t rows = static_cast<int64_t>(positions.size()) / 3;
  std::vector<double> out = q;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s < seq; ++s) {
      const int64_t row = rows == seq ? s : b * seq + s;
      for (int64_t h = 0; h < heads; ++h) {
        double* x = out.data() + ((b * seq + s) * heads + h) * config.head_dim;
        for (int i = 0; i < half; ++i) {
          const double angle = positions[axes[i] * rows + row] * inv_freq[i];
          const double c = attention_factor * std::cos(angle);
          const double sn = attention_factor * std::sin(angle);
          const int f0 = config.layout == Layout::kInterleaved ? 2 * i : i;
          const int f1 = config.layout == Layout::kInterleaved ? 2 * i + 1 : i + half;
          const double x0 = x[f0], x1 = x[f1];
          x[f0] = x0 * c - x1 * sn;
          x[f1] = x0 * sn + x1 * c;
        }
      }
    }
  }
  return out;
}

TEST(MropeRotateTest, DistinctRowsRotateEachFrequencyByItsAxis) {
  std::string skip;
  auto engine = NewEngine(&skip);
  if (engine == nullptr) GTEST_SKIP() << skip;
  std::mt19937 rng(11);
  constexpr int64_t kB = 2, kS = 4, kH = 2;
  YarnScaling yarn;
  yarn.factor = 4;
  yarn.original_max_position_embeddings = 1024;
  const std::vector<ScalingConfig> scalings = {NoScaling{}, yarn};
  for (Layout layout : {Layout::kInterleaved, Layout::kHalf}) {
    for (bool interleaved : {false, true}) {
      for (const ScalingConfig& scaling : scalings) {
        const RopeConfig config = QwenLikeConfig(layout, interleaved, scaling);
        const std::vector<double> values = test::RandomValues(DType::kFloat32, kB * kS * kH * 32, &rng);
        // An image of 2x2 patches after two text tokens, per batch row.
        std::vector<int64_t> positions = {0, 1, 2, 2, 0, 1, 2, 2,     // t
                                          0, 1, 2, 3, 0, 1, 2, 3,     // h
                                          0, 1, 2, 3, 0, 1, 3, 2};    // w
        for (int64_t& p : positions) p += 100;
        const std::vector<double> inv_freq =
            scaling.index() == 0 ? reference::DefaultInvFreq(1000000, 32)
                                 : reference::YarnInvFreq(1000000, 32, 4, 1024, 32, 1);
        const double attention = scaling.index() == 0 ? 1.0 : reference::YarnAttentionFactor(4, 0, 0, 0);
        const test::HostTensor q = test::Encode(DType::kFloat32, {kB, kS, kH, 32}, values);
        const auto got = RotateCopy(*engine, config, q, positions);
        ASSERT_TRUE(got.ok()) << got.status();
        const std::vector<double> decoded =
            test::DecodeBytes(DType::kFloat32, got->data(), kB * kS * kH * 32);
        const std::vector<double> want =
            ReferenceMrope(config, inv_freq, attention, values, kB, kS, kH, positions);
        for (size_t i = 0; i < want.size(); ++i) {
          ASSERT_NEAR(decoded[i], want[i], 2e-6 * (1 + std::abs(want[i])))
              << DescribeMrope(config.mrope) << " element " << i;
        }
      }
    }
  }
}

TEST(MropeRotateTest, EveryRowIsRangeChecked) {
  std::string skip;
  auto engine = NewEngine(&skip);
  if (engine == nullptr) GTEST_SKIP() << skip;
  const RopeConfig config = QwenLikeConfig(Layout::kHalf, false);
  const test::HostTensor q = test::Encode(DType::kFloat32, {2, 2, 1, 32}, std::vector<double>(128, 1));
  // 3*B*S = 12 values; index 9 is axis w (2), b 0, s 1.
  std::vector<int64_t> positions(12, 5);
  positions[9] = kMaxLen;
  EXPECT_TRUE(StatusIs(RotateCopy(*engine, config, q, positions).status(),
                       absl::StatusCode::kOutOfRange,
                       "positions[9] (axis w, b 0, s 1) is 4096: must be < config.max_len 4096"));
  positions[9] = 5;
  positions[6] = -1;  // axis h, b 1, s 0
  EXPECT_TRUE(StatusIs(RotateCopy(*engine, config, q, positions).status(),
                       absl::StatusCode::kInvalidArgument,
                       "positions[6] (axis h, b 1, s 0) is -1: must be >= 0"));
  // 3*S = 6 values, shared by both batch rows.
  std::vector<int64_t> shared(6, 1);
  shared[3] = 1 << 20;
  EXPECT_TRUE(StatusIs(RotateCopy(*engine, config, q, shared).status(),
                       absl::StatusCode::kOutOfRange, "positions[3] (axis h, s 1) is 1048576"));
  EXPECT_TRUE(StatusIs(RotateCopy(*engine, config, q, std::vector<int64_t>(4, 0)).status(),
                       absl::StatusCode::kInvalidArgument,
                       "positions has 4 values: with config.mrope it must be 3*S (6) or 3*B*S (12)"));
}

}  // namespace
}  // namespace rope
