// Engine::AttentionScores on the CPU backend against the reference:
// the derivation-note vector, the relative-position property, a grid over
// masking / softmax / heads / v / dtype / positions, and fully masked rows.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "core/engine/engine.h"
#include "tests/unit/cpu_test_engine.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/reference_rope.h"
#include "tests/unit/test_util.h"

namespace rope {
namespace {

using test::Encode;
using test::HostTensor;
using test::RandomValues;

constexpr uint32_t kMaxLen = 8192;

// The CPU engine on the SIMD path ROPE_CPU_SIMD names (cpu_test_engine.h);
// *skip says why there is none.
std::unique_ptr<Engine> MakeEngine(std::string* skip) { return test::MakeCpuTestEngine(skip); }

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

reference::Rope RefRope(const RopeConfig& config) {
  reference::Rope rope;
  rope.theta = config.EffectiveTheta();
  rope.head_dim = static_cast<int>(config.head_dim);
  rope.rotary_dim = static_cast<int>(config.EffectiveRotaryDim());
  rope.interleaved = config.layout == Layout::kInterleaved;
  return rope;
}

double Norm(const double* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i] * x[i];
  return std::sqrt(s);
}

class AttentionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { engine_ = MakeEngine(&skip_).release(); }
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

Engine* AttentionTest::engine_ = nullptr;
std::string AttentionTest::skip_;

TEST_F(AttentionTest, DerivationNoteVector) {
  // theta = 100, head_dim = 4: inv_freq = (1, 0.1). q = k = (1,0,1,0) at
  // m = 5, n = 7: q'.k' = cos((7-5)*1) + cos((7-5)*0.1) = cos 2 + cos 0.2.
  // (docs/design.md prints 0.563950...; the value of that expression is
  // 0.5639197...)
  const double want = std::cos(2.0) + std::cos(0.2);
  ASSERT_NEAR(want, 0.5639197413, 1e-10);
  HostTensor q = Encode(DType::kFloat32, {1, 1, 1, 4}, {1, 0, 1, 0});
  HostTensor k = Encode(DType::kFloat32, {1, 1, 1, 4}, {1, 0, 1, 0});
  AttentionParams params;
  params.config.theta = 100;
  params.config.head_dim = 4;
  params.config.max_len = 16;
  params.config.layout = Layout::kInterleaved;
  params.q = q.const_view();
  params.k = k.const_view();
  params.q_start_pos = 5;
  params.k_start_pos = 7;
  params.scale = 1.0;
  std::string scores;
  AttentionOutputs out;
  out.scores.bytes = &scores;
  ASSERT_TRUE(engine_->AttentionScores(params, &out).ok());
  EXPECT_EQ(out.scores.shape, (std::vector<int64_t>{1, 1, 1, 1}));
  ASSERT_EQ(scores.size(), sizeof(float));
  EXPECT_NEAR(Floats(scores)[0], want, 1e-6);

  // The same pairs in the HALF layout: pair i is (x[i], x[i+2]).
  HostTensor qh = Encode(DType::kFloat32, {1, 1, 1, 4}, {1, 1, 0, 0});
  HostTensor kh = Encode(DType::kFloat32, {1, 1, 1, 4}, {1, 1, 0, 0});
  params.config.layout = Layout::kHalf;
  params.q = qh.const_view();
  params.k = kh.const_view();
  ASSERT_TRUE(engine_->AttentionScores(params, &out).ok());
  EXPECT_NEAR(Floats(scores)[0], want, 1e-6);
}

AttentionParams SmallAttention(const HostTensor& q, const HostTensor& k) {
  AttentionParams params;
  params.config.head_dim = 4;
  params.config.max_len = 16;
  params.q = q.const_view();
  params.k = k.const_view();
  return params;
}

TEST_F(AttentionTest, CancelledCallStopsWithCancelled) {
  HostTensor q = Encode(DType::kFloat32, {1, 2, 4, 4}, std::vector<double>(32, 0.5));
  HostTensor k = Encode(DType::kFloat32, {1, 2, 2, 4}, std::vector<double>(16, 0.25));
  AttentionParams params = SmallAttention(q, k);
  // Atomic: the pool's threads poll the interrupt in parallel.
  std::atomic<int> polls{0};
  const Interrupt cancelled([&polls] { return polls.fetch_add(1) >= 0; }, absl::InfiniteFuture());
  params.interrupt = &cancelled;
  std::string scores;
  AttentionOutputs out;
  out.scores.bytes = &scores;
  EXPECT_TRUE(test::StatusIs(engine_->AttentionScores(params, &out), absl::StatusCode::kCancelled,
                             "AttentionScores stopped: the caller cancelled"));
  EXPECT_GT(polls.load(), 0);
}

TEST_F(AttentionTest, CallPastItsDeadlineStopsWithDeadlineExceeded) {
  HostTensor q = Encode(DType::kFloat32, {1, 2, 4, 4}, std::vector<double>(32, 0.5));
  HostTensor k = Encode(DType::kFloat32, {1, 2, 2, 4}, std::vector<double>(16, 0.25));
  AttentionParams params = SmallAttention(q, k);
  const Interrupt late(nullptr, absl::Now() - absl::Seconds(1));
  params.interrupt = &late;
  std::string scores;
  AttentionOutputs out;
  out.scores.bytes = &scores;
  EXPECT_TRUE(test::StatusIs(engine_->AttentionScores(params, &out),
                             absl::StatusCode::kDeadlineExceeded, "deadline passed"));
}

TEST_F(AttentionTest, UninterruptedCallCompletes) {
  HostTensor q = Encode(DType::kFloat32, {1, 2, 4, 4}, std::vector<double>(32, 0.5));
  HostTensor k = Encode(DType::kFloat32, {1, 2, 2, 4}, std::vector<double>(16, 0.25));
  AttentionParams params = SmallAttention(q, k);
  const Interrupt never([] { return false; }, absl::InfiniteFuture());
  params.interrupt = &never;
  std::string scores;
  AttentionOutputs out;
  out.scores.bytes = &scores;
  ASSERT_TRUE(engine_->AttentionScores(params, &out).ok());
  EXPECT_EQ(out.scores.shape, (std::vector<int64_t>{1, 4, 2, 2}));
}

TEST_F(AttentionTest, ScoresDependOnlyOnRelativePosition) {
  // (R_m q).(R_n k) = q . R_{n-m} k: shifting both start positions by t
  // leaves every score unchanged, up to float32 rounding of the table.
  constexpr int64_t Sq = 3, Sk = 4, H = 2, D = 32;
  std::mt19937 rng(11);
  const std::vector<double> qv = RandomValues(DType::kFloat32, Sq * H * D, &rng);
  const std::vector<double> kv = RandomValues(DType::kFloat32, Sk * H * D, &rng);
  HostTensor q = Encode(DType::kFloat32, {1, Sq, H, D}, qv);
  HostTensor k = Encode(DType::kFloat32, {1, Sk, H, D}, kv);
  double max_norm_product = 0;
  for (int64_t i = 0; i < Sq * H; ++i) {
    for (int64_t j = 0; j < Sk * H; ++j) {
      max_norm_product =
          std::max(max_norm_product, Norm(&qv[i * D], D) * Norm(&kv[j * D], D));
    }
  }
  AttentionParams params;
  params.config.theta = 10000;
  params.config.head_dim = D;
  params.config.max_len = kMaxLen;
  params.q = q.const_view();
  params.k = k.const_view();
  params.scale = 1.0;
  auto scores_at = [&](int64_t m, int64_t n) {
    params.q_start_pos = m;
    params.k_start_pos = n;
    std::string scores;
    AttentionOutputs out;
    out.scores.bytes = &scores;
    const absl::Status status = engine_->AttentionScores(params, &out);
    EXPECT_TRUE(status.ok()) << status;
    return Floats(scores);
  };
  const std::vector<float> base = scores_at(2, 0);
  const double tolerance = 4e-6 * max_norm_product;
  const int64_t shifts[] = {1, 2, 3, 10, 63, 64, 65, 100, 1000, 1023, 4096, 5000, 8000,
                            int64_t{kMaxLen} - 6};
  for (int64_t t : shifts) {
    const std::vector<float> shifted = scores_at(2 + t, t);
    ASSERT_EQ(shifted.size(), base.size());
    for (size_t i = 0; i < base.size(); ++i) {
      EXPECT_NEAR(shifted[i], base[i], tolerance) << "shift " << t << ", score " << i;
    }
  }
}

TEST_F(AttentionTest, FullyMaskedRowsAreMinusInfinityOrZero) {
  // Causal, q at positions 0..1, k at 5..7: every key is after every query.
  constexpr int64_t Sq = 2, Sk = 3, H = 2, D = 8, Dv = 4;
  std::mt19937 rng(12);
  HostTensor q = Encode(DType::kFloat32, {1, Sq, H, D}, RandomValues(DType::kFloat32, Sq * H * D, &rng));
  HostTensor k = Encode(DType::kFloat32, {1, Sk, H, D}, RandomValues(DType::kFloat32, Sk * H * D, &rng));
  HostTensor v = Encode(DType::kFloat32, {1, Sk, H, Dv}, RandomValues(DType::kFloat32, Sk * H * Dv, &rng));
  AttentionParams params;
  params.config.head_dim = D;
  params.config.max_len = 64;
  params.q = q.const_view();
  params.k = k.const_view();
  params.q_start_pos = 0;
  params.k_start_pos = 5;
  params.causal = true;

  std::string scores, output;
  AttentionOutputs out;
  out.scores.bytes = &scores;
  ASSERT_TRUE(engine_->AttentionScores(params, &out).ok());
  for (float s : Floats(scores)) {
    EXPECT_TRUE(std::isinf(s) && s < 0) << s;
  }

  params.softmax = true;
  params.v = v.const_view();
  out.output.bytes = &output;
  ASSERT_TRUE(engine_->AttentionScores(params, &out).ok());
  EXPECT_EQ(out.output.shape, (std::vector<int64_t>{1, Sq, H, Dv}));
  for (float p : Floats(scores)) EXPECT_EQ(p, 0.0f);
  const std::vector<float> y = Floats(output);
  ASSERT_EQ(y.size(), static_cast<size_t>(Sq * H * Dv));
  for (float x : y) EXPECT_EQ(x, 0.0f);
}

TEST_F(AttentionTest, PartlyMaskedRowsNormaliseOverVisibleKeys) {
  // q at 4..6, k at 5..8 (causal): row 0 sees nothing, row 1 one key, row 2 two.
  constexpr int64_t Sq = 3, Sk = 4, H = 1, D = 8, Dv = 2;
  std::mt19937 rng(13);
  const std::vector<double> qv = RandomValues(DType::kFloat32, Sq * H * D, &rng);
  const std::vector<double> kv = RandomValues(DType::kFloat32, Sk * H * D, &rng);
  const std::vector<double> vv = RandomValues(DType::kFloat32, Sk * H * Dv, &rng);
  HostTensor q = Encode(DType::kFloat32, {1, Sq, H, D}, qv);
  HostTensor k = Encode(DType::kFloat32, {1, Sk, H, D}, kv);
  HostTensor v = Encode(DType::kFloat32, {1, Sk, H, Dv}, vv);
  AttentionParams params;
  params.config.head_dim = D;
  params.config.max_len = 64;
  params.q = q.const_view();
  params.k = k.const_view();
  params.v = v.const_view();
  params.q_start_pos = 4;
  params.k_start_pos = 5;
  params.causal = true;
  params.softmax = true;
  std::string scores, output;
  AttentionOutputs out;
  out.scores.bytes = &scores;
  out.output.bytes = &output;
  ASSERT_TRUE(engine_->AttentionScores(params, &out).ok());
  const std::vector<float> p = Floats(scores), y = Floats(output);
  const std::vector<float> want_p = {0, 0, 0, 0, 1, 0, 0, 0};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(p[i], want_p[i]) << i;
  EXPECT_NEAR(p[8] + p[9], 1.0, 1e-6);
  EXPECT_GT(p[8], 0.0f);
  EXPECT_GT(p[9], 0.0f);
  EXPECT_EQ(p[10], 0.0f);
  EXPECT_EQ(p[11], 0.0f);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_NEAR(y[2], vv[0], 1e-6);  // row 1 attends to key 0 only
  EXPECT_NEAR(y[3], vv[1], 1e-6);
}

TEST_F(AttentionTest, ZeroScaleMeansOneOverSqrtHeadDim) {
  constexpr int64_t S = 4, H = 2, D = 16;
  std::mt19937 rng(14);
  HostTensor q = Encode(DType::kFloat32, {S, H, D}, RandomValues(DType::kFloat32, S * H * D, &rng));
  HostTensor k = Encode(DType::kFloat32, {S, H, D}, RandomValues(DType::kFloat32, S * H * D, &rng));
  AttentionParams params;
  params.config.head_dim = D;
  params.config.max_len = 64;
  params.q = q.const_view();
  params.k = k.const_view();
  std::string by_default, explicit_scale;
  AttentionOutputs out;
  out.scores.bytes = &by_default;
  ASSERT_TRUE(engine_->AttentionScores(params, &out).ok());
  EXPECT_EQ(out.scores.shape, (std::vector<int64_t>{1, H, S, S}));
  params.scale = 0.25;
  out.scores.bytes = &explicit_scale;
  ASSERT_TRUE(engine_->AttentionScores(params, &out).ok());
  EXPECT_EQ(by_default, explicit_scale);
}

// ---- The grid -----------------------------------------------------------------

enum class Rotary { kInterleavedFull, kHalfPartial };
enum class Heads { kEqual, kGroup4, kMqa };
// Where queries sit relative to keys.
enum class Offsets { kAligned, kDecodeAfterKeys, kQueriesBeforeKeys };

using GridParam = std::tuple<Rotary, bool /*causal*/, bool /*softmax*/, Heads, bool /*with v*/,
                             DType, Offsets>;

std::string GridName(const ::testing::TestParamInfo<GridParam>& info) {
  const auto& [rotary, causal, softmax, heads, with_v, dtype, offsets] = info.param;
  std::string name = rotary == Rotary::kInterleavedFull ? "InterleavedFull" : "HalfPartial";
  name += causal ? "_Causal" : "_NoMask";
  name += softmax ? "_Softmax" : "_Raw";
  name += heads == Heads::kEqual ? "_Mha" : heads == Heads::kGroup4 ? "_Gqa4" : "_Mqa";
  name += with_v ? "_WithV" : "_NoV";
  name += dtype == DType::kFloat32 ? "_F32" : dtype == DType::kFloat16 ? "_F16" : "_BF16";
  switch (offsets) {
    case Offsets::kAligned: name += "_Aligned"; break;
    case Offsets::kDecodeAfterKeys: name += "_QAfterK"; break;
    case Offsets::kQueriesBeforeKeys: name += "_QBeforeK"; break;
  }
  return name;
}

class AttentionGridTest : public ::testing::TestWithParam<GridParam> {
 protected:
  static void SetUpTestSuite() { engine_ = MakeEngine(&skip_).release(); }
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

Engine* AttentionGridTest::engine_ = nullptr;
std::string AttentionGridTest::skip_;

TEST_P(AttentionGridTest, MatchesReference) {
  const auto& [rotary, causal, softmax, heads, with_v, dtype, offsets] = GetParam();
  constexpr int64_t B = 2, D = 16, Dv = 6;
  int64_t hq = 2, hkv = 2;
  if (heads == Heads::kGroup4) hq = 8, hkv = 2;
  if (heads == Heads::kMqa) hq = 3, hkv = 1;
  int64_t sq = 5, sk = 5, q_start = 100, k_start = 100;
  if (offsets == Offsets::kDecodeAfterKeys) sq = 2, sk = 7, q_start = 3005, k_start = 3000;
  if (offsets == Offsets::kQueriesBeforeKeys) sq = 4, sk = 3, q_start = 10, k_start = 12;

  RopeConfig config;
  config.theta = 10000;
  config.head_dim = D;
  config.rotary_dim = rotary == Rotary::kHalfPartial ? 10 : 0;
  config.layout = rotary == Rotary::kHalfPartial ? Layout::kHalf : Layout::kInterleaved;
  config.max_len = kMaxLen;

  std::mt19937 rng(static_cast<uint32_t>(
      std::hash<std::string>()(GridName(::testing::TestParamInfo<GridParam>(GetParam(), 0)))));
  const std::vector<double> qv = RandomValues(dtype, B * sq * hq * D, &rng);
  const std::vector<double> kv = RandomValues(dtype, B * sk * hkv * D, &rng);
  const std::vector<double> vv = RandomValues(dtype, B * sk * hkv * Dv, &rng);
  HostTensor q = Encode(dtype, {B, sq, hq, D}, qv);
  HostTensor k = Encode(dtype, {B, sk, hkv, D}, kv);
  HostTensor v = Encode(dtype, {B, sk, hkv, Dv}, vv);

  AttentionParams params;
  params.config = config;
  params.q = q.const_view();
  params.k = k.const_view();
  if (with_v) params.v = v.const_view();
  params.q_start_pos = q_start;
  params.k_start_pos = k_start;
  params.causal = causal;
  params.softmax = softmax;
  std::string scores, output;
  AttentionOutputs out;
  out.scores.bytes = &scores;
  if (with_v) out.output.bytes = &output;
  const absl::Status status = engine_->AttentionScores(params, &out);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(out.scores.shape, (std::vector<int64_t>{B, hq, sq, sk}));
  if (with_v) {
    EXPECT_EQ(out.output.shape, (std::vector<int64_t>{B, sq, hq, Dv}));
  }

  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  reference::AttentionShape shape;
  shape.batch = B;
  shape.q_seq = sq;
  shape.k_seq = sk;
  shape.q_heads = hq;
  shape.k_heads = hkv;
  shape.v_dim = with_v ? Dv : 0;
  const reference::AttentionResult want =
      reference::Attention(RefRope(config), shape, qv, kv, with_v ? &vv : nullptr, q_start,
                           k_start, causal, softmax, scale);

  // Raw scores: float32 error of rotating both vectors and summing D
  // products stays below a few 1e-7 x |q||k| x scale; probabilities and
  // outputs inherit it (|dp| <= 2 |dS| for a softmax).
  const std::vector<float> got = Floats(scores);
  ASSERT_EQ(got.size(), want.scores.size());
  int failures = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t hk = h / (hq / hkv);
      for (int64_t i = 0; i < sq; ++i) {
        const double qn = Norm(&qv[((b * sq + i) * hq + h) * D], D);
        for (int64_t j = 0; j < sk; ++j) {
          const double kn = Norm(&kv[((b * sk + j) * hkv + hk) * D], D);
          const size_t idx = ((b * hq + h) * sq + i) * sk + j;
          const double w = want.scores[idx], g = got[idx];
          bool ok;
          if (std::isinf(w)) {
            ok = g == w;
          } else if (softmax) {
            ok = std::fabs(g - w) <= 1e-5;
          } else {
            ok = std::fabs(g - w) <= 4e-6 * qn * kn * scale;
          }
          if (!ok && ++failures <= 5) {
            ADD_FAILURE() << "scores[" << b << "," << h << "," << i << "," << j << "] is " << g
                          << ", want " << w;
          }
        }
      }
    }
  }
  if (with_v) {
    const std::vector<float> y = Floats(output);
    ASSERT_EQ(y.size(), want.output.size());
    for (size_t i = 0; i < y.size(); ++i) {
      if (!(std::fabs(y[i] - want.output[i]) <= 4e-5) && ++failures <= 10) {
        ADD_FAILURE() << "output[" << i << "] is " << y[i] << ", want " << want.output[i];
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Grid, AttentionGridTest,
    ::testing::Combine(::testing::Values(Rotary::kInterleavedFull, Rotary::kHalfPartial),
                       ::testing::Bool(), ::testing::Bool(),
                       ::testing::Values(Heads::kEqual, Heads::kGroup4, Heads::kMqa),
                       ::testing::Bool(),
                       ::testing::Values(DType::kFloat32, DType::kFloat16, DType::kBFloat16),
                       ::testing::Values(Offsets::kAligned, Offsets::kDecodeAfterKeys,
                                         Offsets::kQueriesBeforeKeys)),
    GridName);

}  // namespace
}  // namespace rope
