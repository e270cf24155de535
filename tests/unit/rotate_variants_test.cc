// Engine::Rotate and AttentionScores with the serving engines' variants, on
// the CPU backend (the SIMD path ROPE_CPU_SIMD names), against
// tests/unit/reference_rope.* and reference_scaling.*: a rotary_offset (MLA
// heads rotating their last features), q and k of any head counts, float8
// outputs (FlashInfer's rope_quantize_fp8), NoPE layers (identity, and
// Llama 4's attention temperature tuning), and how they meet axial RoPE and
// fractional positions.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "absl/strings/str_cat.h"
#include "common/float8.h"
#include "core/engine/engine.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/cpu_test_engine.h"
#include "tests/unit/reference_rope.h"
#include "tests/unit/reference_scaling.h"
#include "tests/unit/test_util.h"

namespace rope {
namespace {

using test::Decode;
using test::Encode;
using test::HostTensor;
using test::RandomValues;
using test::StatusIs;

constexpr uint32_t kMaxLen = 4096;

class VariantsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { engine_ = test::MakeCpuTestEngine(&skip_).release(); }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_NE(engine_, nullptr);
  }
  static void TearDownTestSuite() {
    delete engine_;
    engine_ = nullptr;
  }
  static Engine* engine_;
  static std::string skip_;
};

Engine* VariantsTest::engine_ = nullptr;
std::string VariantsTest::skip_;

RopeConfig Config(uint32_t head_dim, uint32_t rotary_dim, uint32_t rotary_offset, Layout layout) {
  RopeConfig c;
  c.theta = 10000;
  c.head_dim = head_dim;
  c.rotary_dim = rotary_dim;
  c.rotary_offset = rotary_offset;
  c.max_len = kMaxLen;
  c.layout = layout;
  return c;
}

reference::Rope RefRope(const RopeConfig& c) {
  reference::Rope rope;
  rope.theta = c.EffectiveTheta();
  rope.head_dim = static_cast<int>(c.head_dim);
  rope.rotary_dim = static_cast<int>(c.EffectiveRotaryDim());
  rope.rotary_offset = static_cast<int>(c.rotary_offset);
  rope.interleaved = c.layout == Layout::kInterleaved;
  return rope;
}

// ---- rotary_offset ---------------------------------------------------------------------

TEST_F(VariantsTest, RotaryOffsetRotatesTheFeaturesFromIt) {
  std::mt19937 rng(11);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (Layout layout : {Layout::kInterleaved, Layout::kHalf}) {
      // MLA's whole head (128 nope + 64 rope), rotary_dim 0 (the rest of
      // the head), an odd offset, a window in the middle.
      for (const auto& [head_dim, rotary, offset] :
           std::vector<std::tuple<uint32_t, uint32_t, uint32_t>>{
               {192, 64, 128}, {40, 0, 4}, {40, 30, 3}, {48, 16, 20}}) {
        const RopeConfig config = Config(head_dim, rotary, offset, layout);
        const int64_t B = 2, S = 3, H = 3;
        const std::vector<double> in = RandomValues(dtype, B * S * H * head_dim, &rng);
        HostTensor q = Encode(dtype, {B, S, H, head_dim}, in);
        RotateParams p;
        p.config = config;
        p.q = q.view();
        p.positions = {0, 17, 4095, 3, 1000, 2000};
        ASSERT_TRUE(engine_->Rotate(p).ok()) << engine_->Rotate(p);
        std::vector<double> want = in;
        reference::RotateTensor(RefRope(config), B, S, H, p.positions, false, &want);
        const std::vector<double> got = Decode(q);
        const uint32_t end = offset + config.EffectiveRotaryDim();
        for (size_t e = 0; e < got.size(); ++e) {
          const uint32_t f = e % head_dim;
          if (f < offset || f >= end) {
            ASSERT_EQ(got[e], in[e]) << "feature " << f << " outside the rotated window changed";
          } else {
            const double w = test::Quantize(dtype, want[e]);
            ASSERT_NEAR(got[e], w, test::StorageUlp(dtype, w) + 4e-6)
                << DTypeName(dtype) << " " << LayoutName(layout) << " offset " << offset
                << " feature " << f;
          }
        }
      }
    }
  }
}

TEST_F(VariantsTest, RotaryOffsetValidation) {
  EXPECT_TRUE(StatusIs(ValidateConfig(Config(64, 0, 64, Layout::kHalf), kMaxLen),
                       absl::StatusCode::kInvalidArgument,
                       "config.rotary_offset is 64: must be < head_dim 64"));
  EXPECT_TRUE(StatusIs(ValidateConfig(Config(64, 32, 40, Layout::kHalf), kMaxLen),
                       absl::StatusCode::kInvalidArgument,
                       "config.rotary_dim is 32: must be even and <= head_dim 64 - rotary_offset 40"));
  EXPECT_TRUE(StatusIs(ValidateConfig(Config(64, 0, 3, Layout::kHalf), kMaxLen),
                       absl::StatusCode::kInvalidArgument, "an odd rotary_dim; set rotary_dim"));
}

// ---- Head counts ---------------------------------------------------------------------------

TEST_F(VariantsTest, RotateTakesAnyQAndKHeadCounts) {
  std::mt19937 rng(12);
  const RopeConfig config = Config(32, 0, 0, Layout::kHalf);
  const std::vector<double> q_in = RandomValues(DType::kFloat32, 2 * 4 * 3 * 32, &rng);
  const std::vector<double> k_in = RandomValues(DType::kFloat32, 2 * 4 * 2 * 32, &rng);
  HostTensor q = Encode(DType::kFloat32, {2, 4, 3, 32}, q_in);
  HostTensor k = Encode(DType::kFloat32, {2, 4, 2, 32}, k_in);
  RotateParams p;
  p.config = config;
  p.q = q.view();
  p.k = k.view();
  p.start_pos = 7;
  ASSERT_TRUE(engine_->Rotate(p).ok()) << engine_->Rotate(p);
  const std::vector<int64_t> positions = {7, 8, 9, 10, 7, 8, 9, 10};
  std::vector<double> q_want = q_in, k_want = k_in;
  reference::RotateTensor(RefRope(config), 2, 4, 3, positions, false, &q_want);
  reference::RotateTensor(RefRope(config), 2, 4, 2, positions, false, &k_want);
  const std::vector<double> q_got = Decode(q), k_got = Decode(k);
  for (size_t i = 0; i < q_got.size(); ++i) ASSERT_NEAR(q_got[i], q_want[i], 4e-6) << i;
  for (size_t i = 0; i < k_got.size(); ++i) ASSERT_NEAR(k_got[i], k_want[i], 4e-6) << i;
  // Attention still pairs query heads with key heads: 3 % 2 is refused there.
  AttentionParams a;
  a.config = config;
  a.q = q.const_view();
  a.k = k.const_view();
  std::string scores;
  AttentionOutputs out;
  out.scores.bytes = &scores;
  EXPECT_TRUE(StatusIs(engine_->AttentionScores(a, &out), absl::StatusCode::kInvalidArgument,
                       "q heads (3) % k heads (2) != 0"));
}

// ---- Float8 outputs ----------------------------------------------------------------------

// The float8 code of every element, from the same float32 rotation the
// engine performs (a float32 copy of the input rotated in place by the
// engine, which is exact to widen) times the scale, rounded by the
// reference's search over every code.
std::vector<uint8_t> ExpectedFloat8(Engine& engine, const RopeConfig& config, DType dtype,
                                    const std::vector<double>& in, std::vector<int64_t> shape,
                                    const std::vector<int64_t>& positions, bool inverse,
                                    float scale, bool e5m2) {
  std::vector<double> widened(in.size());
  for (size_t i = 0; i < in.size(); ++i) widened[i] = test::Quantize(dtype, in[i]);
  HostTensor f32 = Encode(DType::kFloat32, std::move(shape), widened);
  RotateParams p;
  p.config = config;
  p.q = f32.view();
  p.positions = positions;
  p.inverse = inverse;
  EXPECT_TRUE(engine.Rotate(p).ok());
  std::vector<uint8_t> codes(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    float value;
    std::memcpy(&value, f32.bytes.data() + 4 * i, 4);
    codes[i] = reference::DoubleToFloat8(static_cast<double>(value * scale), e5m2);
  }
  return codes;
}

TEST_F(VariantsTest, Float8OutputsRoundTheRotatedValuesAsFlashInfer) {
  std::mt19937 rng(13);
  int cases = 0;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (DType out : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
      for (Layout layout : {Layout::kInterleaved, Layout::kHalf}) {
        for (const auto& [rotary, offset] : std::vector<std::pair<uint32_t, uint32_t>>{
                 {0, 0}, {16, 0}, {16, 24}}) {
          for (bool inverse : {false, true}) {
            const RopeConfig config = Config(40, rotary, offset, layout);
            // Values up to 600 reach past E4M3FN's 448: saturation.
            const std::vector<double> q_in = RandomValues(dtype, 2 * 3 * 3 * 40, &rng, -600, 600);
            const std::vector<double> k_in = RandomValues(dtype, 2 * 3 * 2 * 40, &rng, -1, 1);
            HostTensor q = Encode(dtype, {2, 3, 3, 40}, q_in);
            HostTensor k = Encode(dtype, {2, 3, 2, 40}, k_in);
            const std::vector<uint8_t> q_before = q.bytes;
            std::string q_out, k_out;
            RotateParams p;
            p.config = config;
            p.q = q.view();
            p.k = k.view();
            p.positions = {1, 2000, 4095, 5, 6, 7};
            p.inverse = inverse;
            p.output_dtype = out;
            p.q_output_scale = 0.5;
            p.k_output_scale = 37.25;
            p.q_float8_out = &q_out;
            p.k_float8_out = &k_out;
            ASSERT_TRUE(engine_->Rotate(p).ok()) << engine_->Rotate(p);
            EXPECT_EQ(q.bytes, q_before) << "q is an input only";
            const bool e5m2 = out == DType::kFloat8E5M2;
            const std::vector<uint8_t> q_want = ExpectedFloat8(
                *engine_, config, dtype, q_in, {2, 3, 3, 40}, p.positions, inverse, 0.5f, e5m2);
            const std::vector<uint8_t> k_want = ExpectedFloat8(
                *engine_, config, dtype, k_in, {2, 3, 2, 40}, p.positions, inverse, 37.25f, e5m2);
            ASSERT_EQ(q_out.size(), q_want.size());
            ASSERT_EQ(k_out.size(), k_want.size());
            for (size_t i = 0; i < q_want.size(); ++i) {
              ASSERT_EQ(static_cast<uint8_t>(q_out[i]), q_want[i])
                  << DTypeName(dtype) << " -> " << DTypeName(out) << " q element " << i;
            }
            for (size_t i = 0; i < k_want.size(); ++i) {
              ASSERT_EQ(static_cast<uint8_t>(k_out[i]), k_want[i])
                  << DTypeName(dtype) << " -> " << DTypeName(out) << " k element " << i;
            }
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 3 * 2 * 2 * 3 * 2);
}

// Against the exact rotation (double), decoded: within one float8 step.
TEST_F(VariantsTest, Float8OutputsAreWithinOneStepOfTheExactRotation) {
  std::mt19937 rng(14);
  const RopeConfig config = Config(64, 0, 0, Layout::kHalf);
  const std::vector<double> in = RandomValues(DType::kFloat32, 4 * 2 * 64, &rng, -8, 8);
  HostTensor q = Encode(DType::kFloat32, {4, 2, 64}, in);
  std::string out;
  RotateParams p;
  p.config = config;
  p.q = q.view();
  p.start_pos = 3000;
  p.output_dtype = DType::kFloat8E4M3;
  p.q_float8_out = &out;
  ASSERT_TRUE(engine_->Rotate(p).ok());
  std::vector<double> want = in;
  reference::RotateTensor(RefRope(config), 1, 4, 2, {3000, 3001, 3002, 3003}, false, &want);
  for (size_t i = 0; i < want.size(); ++i) {
    const double got = reference::Float8ToDouble(static_cast<uint8_t>(out[i]), false);
    const double step = std::ldexp(1.0, std::max(std::ilogb(std::fabs(want[i])), -6) - 3);
    EXPECT_LE(std::fabs(got - want[i]), step) << i << ": " << got << " vs " << want[i];
  }
}

TEST_F(VariantsTest, Float8OutputValidation) {
  HostTensor q = Encode(DType::kFloat32, {1, 2, 1, 8}, std::vector<double>(16, 0.5));
  std::string out;
  RotateParams p;
  p.config = Config(8, 0, 0, Layout::kHalf);
  p.q = q.view();
  p.q_float8_out = &out;
  p.output_dtype = DType::kBFloat16;
  EXPECT_TRUE(StatusIs(engine_->Rotate(p), absl::StatusCode::kInvalidArgument,
                       "output_dtype is bfloat16: must be q's dtype float32 (in place) or "
                       "FLOAT8_E4M3FN / FLOAT8_E5M2"));
  p.output_dtype = DType::kFloat32;  // q's own: in place, as without it
  EXPECT_TRUE(engine_->Rotate(p).ok());
  p.q_output_scale = 2;
  EXPECT_TRUE(StatusIs(engine_->Rotate(p), absl::StatusCode::kInvalidArgument,
                       "output_scale is 2: only a float8 output_dtype takes a scale"));
  p.output_dtype = DType::kFloat8E5M2;
  p.q_output_scale = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(StatusIs(engine_->Rotate(p), absl::StatusCode::kInvalidArgument,
                       "output_scale is inf: must be finite as float32 and > 0"));
  p.q_output_scale = 1e39;
  EXPECT_TRUE(StatusIs(engine_->Rotate(p), absl::StatusCode::kInvalidArgument,
                       "output_scale is 1e+39"));
  p.q_output_scale = 1;
  p.k_output_scale = -1;
  EXPECT_TRUE(StatusIs(engine_->Rotate(p), absl::StatusCode::kInvalidArgument,
                       "k_output_scale is -1"));
  // Float8 is no input dtype.
  HostTensor f8;
  f8.dtype = DType::kFloat8E4M3;
  f8.shape = {1, 2, 1, 8};
  f8.bytes.assign(16, 0x38);
  RotateParams in8;
  in8.config = Config(8, 0, 0, Layout::kHalf);
  in8.q = f8.view();
  EXPECT_TRUE(StatusIs(engine_->Rotate(in8), absl::StatusCode::kInvalidArgument,
                       "q.dtype is float8_e4m3fn: float8 is an output type only"));
}

// ---- NoPE layers ----------------------------------------------------------------------------

TEST_F(VariantsTest, NoPeLayersRotateNothingAndFloat8OnlyConverts) {
  std::mt19937 rng(15);
  RopeConfig config = Config(16, 0, 0, Layout::kInterleaved);
  config.no_rope.enabled = true;
  const std::vector<double> in = RandomValues(DType::kBFloat16, 2 * 2 * 16, &rng);
  HostTensor q = Encode(DType::kBFloat16, {2, 2, 16}, in);
  const std::vector<uint8_t> before = q.bytes;
  RotateParams p;
  p.config = config;
  p.q = q.view();
  p.start_pos = 100;
  ASSERT_TRUE(engine_->Rotate(p).ok());
  EXPECT_EQ(q.bytes, before);
  std::string out;
  p.output_dtype = DType::kFloat8E4M3;
  p.q_float8_out = &out;
  ASSERT_TRUE(engine_->Rotate(p).ok());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(static_cast<uint8_t>(out[i]), reference::DoubleToFloat8(in[i], false)) << i;
  }
  // Positions are still checked against the table length.
  p.start_pos = kMaxLen;
  EXPECT_TRUE(StatusIs(engine_->Rotate(p), absl::StatusCode::kOutOfRange, "start_pos is 4096"));
}

// Out of place, a NoPE layer's output references receive the inputs as
// they are (the kernels copy with rotary_dim 0), and the inputs stay.
TEST_F(VariantsTest, NoPeLayerIntoOutputReferencesCopiesItsInputs) {
  std::mt19937 rng(21);
  for (bool tuned : {false, true}) {
    RopeConfig config = Config(16, 0, 0, Layout::kHalf);
    config.no_rope.enabled = true;
    if (tuned) {  // the temperature is AttentionScores' only: Rotate still copies
      config.no_rope.floor_scale = 8;
      config.no_rope.attn_scale = 0.1;
    }
    HostTensor q = Encode(DType::kBFloat16, {2, 3, 2, 16},
                          RandomValues(DType::kBFloat16, 2 * 3 * 2 * 16, &rng));
    HostTensor k = Encode(DType::kBFloat16, {2, 3, 1, 16},
                          RandomValues(DType::kBFloat16, 2 * 3 * 1 * 16, &rng));
    const HostTensor q_before = q, k_before = k;
    HostTensor q_out = q, k_out = k;
    std::fill(q_out.bytes.begin(), q_out.bytes.end(), 0xee);
    std::fill(k_out.bytes.begin(), k_out.bytes.end(), 0xee);
    RotateParams p;
    p.config = config;
    p.q = q.view();
    p.k = k.view();
    p.q_out = q_out.view();
    p.k_out = k_out.view();
    p.start_pos = 7;
    const absl::Status status = engine_->Rotate(p);
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_EQ(q_out.bytes, q_before.bytes) << "tuned " << tuned;
    EXPECT_EQ(k_out.bytes, k_before.bytes) << "tuned " << tuned;
    EXPECT_EQ(q.bytes, q_before.bytes) << "q is an input only";
    EXPECT_EQ(k.bytes, k_before.bytes) << "k is an input only";
  }
}

// Float8 outputs go into the reply's bytes: an output reference beside them
// is refused before anything is written.
TEST_F(VariantsTest, Float8OutputWithAnOutputReferenceIsInvalid) {
  HostTensor q = Encode(DType::kFloat32, {1, 2, 1, 8}, std::vector<double>(16, 0.5));
  HostTensor k = q;
  HostTensor q_out = q, k_out = k;
  std::fill(q_out.bytes.begin(), q_out.bytes.end(), 0xee);
  std::fill(k_out.bytes.begin(), k_out.bytes.end(), 0xee);
  const std::vector<uint8_t> untouched = q_out.bytes;
  std::string q8, k8;
  RotateParams p;
  p.config = Config(8, 0, 0, Layout::kHalf);
  p.q = q.view();
  p.output_dtype = DType::kFloat8E4M3;
  p.q_float8_out = &q8;
  p.k_float8_out = &k8;
  p.q_out = q_out.view();
  EXPECT_TRUE(StatusIs(engine_->Rotate(p), absl::StatusCode::kInvalidArgument,
                       "output_dtype is float8_e4m3fn with q_out: float8 outputs go into the "
                       "reply's bytes, not into an output reference"));
  p.q_out = TensorView();
  p.k = k.view();
  p.k_out = k_out.view();
  p.output_dtype = DType::kFloat8E5M2;
  EXPECT_TRUE(StatusIs(engine_->Rotate(p), absl::StatusCode::kInvalidArgument,
                       "output_dtype is float8_e5m2 with k_out"));
  EXPECT_EQ(q_out.bytes, untouched);
  EXPECT_EQ(k_out.bytes, untouched);
  EXPECT_TRUE(q8.empty() && k8.empty());
}

TEST_F(VariantsTest, NoPeAttentionAppliesLlama4TemperatureTuning) {
  std::mt19937 rng(16);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    RopeConfig config = Config(16, 0, 0, Layout::kInterleaved);
    config.no_rope.enabled = true;
    config.no_rope.floor_scale = 4;  // small, so that a few positions reach several steps
    config.no_rope.attn_scale = 0.1;
    const int64_t Sq = 3, Sk = 5, H = 2, D = 16;
    const std::vector<double> q_in = RandomValues(dtype, Sq * H * D, &rng);
    const std::vector<double> k_in = RandomValues(dtype, Sk * H * D, &rng);
    const HostTensor q = Encode(dtype, {1, Sq, H, D}, q_in);
    const HostTensor k = Encode(dtype, {1, Sk, H, D}, k_in);
    AttentionParams a;
    a.config = config;
    a.q = q.const_view();
    a.k = k.const_view();
    a.q_start_pos = 10;
    a.k_start_pos = 8;
    std::string scores;
    AttentionOutputs out;
    out.scores.bytes = &scores;
    ASSERT_TRUE(engine_->AttentionScores(a, &out).ok()) << engine_->AttentionScores(a, &out);
    std::vector<float> got(scores.size() / 4);
    std::memcpy(got.data(), scores.data(), scores.size());
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < Sq; ++i) {
        const double t = reference::Llama4Temperature(10 + i, 4, 0.1);
        for (int64_t j = 0; j < Sk; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) {
            // transformers rounds the scaled query to its dtype.
            const double qs = test::Quantize(dtype, static_cast<float>(q_in[(i * H + h) * D + d]) *
                                                        static_cast<float>(t));
            dot += qs * k_in[(j * H + h) * D + d];
          }
          const double want = dot / std::sqrt(static_cast<double>(D));
          EXPECT_NEAR(got[(h * Sq + i) * Sk + j], want, 2e-6 * (1 + std::fabs(want)))
              << DTypeName(dtype) << " h " << h << " i " << i << " j " << j;
        }
      }
    }
  }
  // Validation of the explicit fields.
  RopeConfig bad = Config(16, 0, 0, Layout::kHalf);
  bad.no_rope.enabled = true;
  bad.no_rope.attn_scale = 0.1;
  EXPECT_TRUE(StatusIs(ValidateConfig(bad, kMaxLen), absl::StatusCode::kInvalidArgument,
                       "config.no_rope.attn_scale is 0.1 but floor_scale is 0"));
  bad.no_rope.floor_scale = -1;
  EXPECT_TRUE(StatusIs(ValidateConfig(bad, kMaxLen), absl::StatusCode::kInvalidArgument,
                       "config.no_rope.floor_scale is -1"));
}

// MLA: attention over whole heads equals attention over their rope parts
// plus the nope parts' unrotated dot products.
TEST_F(VariantsTest, AttentionRotatesTheFeaturesFromTheOffset) {
  std::mt19937 rng(17);
  const RopeConfig config = Config(24, 8, 16, Layout::kInterleaved);
  const int64_t Sq = 2, Sk = 3, D = 24;
  const std::vector<double> q_in = RandomValues(DType::kFloat32, Sq * D, &rng);
  const std::vector<double> k_in = RandomValues(DType::kFloat32, Sk * D, &rng);
  const HostTensor q = Encode(DType::kFloat32, {1, Sq, 1, D}, q_in);
  const HostTensor k = Encode(DType::kFloat32, {1, Sk, 1, D}, k_in);
  AttentionParams a;
  a.config = config;
  a.q = q.const_view();
  a.k = k.const_view();
  a.q_start_pos = 100;
  a.scale = 1;
  std::string scores;
  AttentionOutputs out;
  out.scores.bytes = &scores;
  ASSERT_TRUE(engine_->AttentionScores(a, &out).ok()) << engine_->AttentionScores(a, &out);
  std::vector<float> got(scores.size() / 4);
  std::memcpy(got.data(), scores.data(), scores.size());
  std::vector<double> q_rot = q_in, k_rot = k_in;
  reference::RotateTensor(RefRope(config), 1, Sq, 1, {100, 101}, false, &q_rot);
  reference::RotateTensor(RefRope(config), 1, Sk, 1, {0, 1, 2}, false, &k_rot);
  for (int64_t i = 0; i < Sq; ++i) {
    for (int64_t j = 0; j < Sk; ++j) {
      double dot = 0;
      for (int64_t d = 0; d < D; ++d) dot += q_rot[i * D + d] * k_rot[j * D + d];
      EXPECT_NEAR(got[i * Sk + j], dot, 2e-6 * (1 + std::fabs(dot))) << i << " " << j;
    }
  }
}

// ---- With axial RoPE and fractional positions -----------------------------------------

// Calls whose rows are made per request (axial, fractional) rotate past
// Engine::kRequestRowsChunk tokens in chunks: each chunk writes its own
// tokens' float8 codes, equal to the same call's float32 rotation in place
// times the scale, rounded by the reference.
TEST_F(VariantsTest, Float8OutputsOfAxialAndFractionalCallsPastOneChunk) {
  std::mt19937 rng(22);
  RopeConfig config = Config(16, 0, 0, Layout::kHalf);
  config.axial.axes = {{8, 0, 0, 0}, {8, 0, 2, 0.5}};
  constexpr int64_t kS = Engine::kRequestRowsChunk + 300, kH = 2;
  const std::vector<double> q_in = RandomValues(DType::kBFloat16, kS * kH * 16, &rng, -40, 40);
  const std::vector<double> k_in = RandomValues(DType::kBFloat16, kS * 16, &rng, -4, 4);
  std::uniform_int_distribution<int64_t> position(0, kMaxLen - 1);
  for (bool axial : {true, false}) {
    for (bool fractional : {false, true}) {
      if (!axial && !fractional) continue;  // a plain table: covered above
      SCOPED_TRACE(absl::StrCat("axial ", axial, " fractional ", fractional));
      RotateParams p;
      p.config = axial ? config : Config(16, 0, 0, Layout::kHalf);
      for (int64_t i = 0; i < (axial ? 2 : 1) * kS; ++i) {
        const int64_t at = position(rng);
        if (fractional) {
          p.fractional_positions.push_back(static_cast<double>(at) + 0.5);
        } else {
          p.positions.push_back(at);
        }
      }
      // The want: float32 copies rotated in place by the same call.
      HostTensor q32 = Encode(DType::kFloat32, {1, kS, kH, 16}, q_in);
      HostTensor k32 = Encode(DType::kFloat32, {1, kS, 1, 16}, k_in);
      RotateParams in_place = p;
      in_place.q = q32.view();
      in_place.k = k32.view();
      ASSERT_TRUE(engine_->Rotate(in_place).ok()) << engine_->Rotate(in_place);
      HostTensor q = Encode(DType::kBFloat16, {1, kS, kH, 16}, q_in);
      HostTensor k = Encode(DType::kBFloat16, {1, kS, 1, 16}, k_in);
      const HostTensor q_before = q;
      std::string q8, k8;
      p.q = q.view();
      p.k = k.view();
      p.output_dtype = DType::kFloat8E4M3;
      p.q_output_scale = 8;
      p.k_output_scale = 0.25;
      p.q_float8_out = &q8;
      p.k_float8_out = &k8;
      const absl::Status status = engine_->Rotate(p);
      ASSERT_TRUE(status.ok()) << status;
      EXPECT_EQ(q.bytes, q_before.bytes) << "q is an input only";
      for (const auto& [got, want, scale] :
           {std::tuple<const std::string*, const HostTensor*, float>{&q8, &q32, 8.0f},
            {&k8, &k32, 0.25f}}) {
        ASSERT_EQ(got->size(), want->bytes.size() / 4);
        for (size_t i = 0; i < got->size(); ++i) {
          float value;
          std::memcpy(&value, want->bytes.data() + 4 * i, 4);
          ASSERT_EQ(static_cast<uint8_t>((*got)[i]),
                    reference::DoubleToFloat8(static_cast<double>(value * scale), false))
              << "element " << i << " of " << got->size();
        }
      }
    }
  }
}

// Axial RoPE splits one ladder into axes from feature 0: a NoPE layer (no
// ladder) or a rotary_offset (a tail of the head) beside it is refused,
// naming both fields. A tuned NoPE layer's temperature needs integer query
// positions.
TEST_F(VariantsTest, AxialWithNoRopeOrRotaryOffsetIsInvalid) {
  HostTensor q = Encode(DType::kFloat32, {1, 2, 1, 16}, std::vector<double>(32, 0.5));
  RotateParams p;
  p.config = Config(16, 0, 0, Layout::kHalf);
  p.config.axial.axes = {{8, 0, 0, 0}, {8, 0, 0, 0}};
  p.q = q.view();
  p.positions = {0, 1, 2, 3};
  ASSERT_TRUE(engine_->Rotate(p).ok());
  RotateParams no_rope = p;
  no_rope.config.no_rope.enabled = true;
  EXPECT_TRUE(StatusIs(engine_->Rotate(no_rope), absl::StatusCode::kInvalidArgument,
                       "config.axial (axial[8,8]) and config.no_rope are both set"));
  RotateParams offset = p;
  offset.config.rotary_offset = 8;
  offset.config.axial.axes = {{4, 0, 0, 0}, {4, 0, 0, 0}};
  EXPECT_TRUE(StatusIs(engine_->Rotate(offset), absl::StatusCode::kInvalidArgument,
                       "config.axial (axial[4,4]) is set with config.rotary_offset 8"));
  EXPECT_TRUE(StatusIs(engine_->ResolveConfig(offset.config).status(),
                       absl::StatusCode::kInvalidArgument, "is set with config.rotary_offset 8"));

  RopeConfig tuned = Config(16, 0, 0, Layout::kHalf);
  tuned.no_rope.enabled = true;
  tuned.no_rope.floor_scale = 8;
  tuned.no_rope.attn_scale = 0.1;
  AttentionParams a;
  a.config = tuned;
  a.q = q.const_view();
  a.k = q.const_view();
  a.q_fractional_positions = {0.5, 1.5};
  std::string scores;
  AttentionOutputs out;
  out.scores.bytes = &scores;
  EXPECT_TRUE(StatusIs(engine_->AttentionScores(a, &out), absl::StatusCode::kInvalidArgument,
                       "config.no_rope has attention temperature tuning (floor_scale 8) with "
                       "q_fractional_positions"));
  // Without tuning the positions do not matter: no rotation, plain scores.
  a.config.no_rope = NoRopeConfig{true, 0, 0};
  EXPECT_TRUE(engine_->AttentionScores(a, &out).ok());
}

}  // namespace
}  // namespace rope
