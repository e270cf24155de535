// Engine::Rotate on the CPU backend against the reference rotation, over
// layout x dtype x rotary_dim x head grouping x position mode x direction,
// plus the algebraic properties (inverse, layout permutation, untouched tail,
// rank 3 = batch 1).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "core/engine/engine.h"
#include "tests/unit/cpu_test_engine.h"
#include "tests/unit/reference_rope.h"
#include "tests/unit/test_util.h"

namespace rope {
namespace {

using test::Decode;
using test::Encode;
using test::HostTensor;
using test::RandomValues;

constexpr uint32_t kMaxLen = 4096;
constexpr double kTheta = 10000.0;

// Float32 arithmetic with float32 cos/sin is within a few 1e-7 of the exact
// rotation, relative to the norm of the rotated pair; this bound leaves a
// margin of about ten.
constexpr double kF32PairTolerance = 2e-6;

// The CPU engine on the SIMD path ROPE_CPU_SIMD names (cpu_test_engine.h);
// *skip says why there is none.
std::unique_ptr<Engine> MakeEngine(std::string* skip) { return test::MakeCpuTestEngine(skip); }

reference::Rope RefRope(const RopeConfig& config) {
  reference::Rope rope;
  rope.theta = config.EffectiveTheta();
  rope.head_dim = static_cast<int>(config.head_dim);
  rope.rotary_dim = static_cast<int>(config.EffectiveRotaryDim());
  rope.interleaved = config.layout == Layout::kInterleaved;
  return rope;
}

// Checks `got` (decoded engine output) against `want` (reference output on
// the same dequantized input `in`), head vector by head vector. Rotated
// features: float32 within kF32PairTolerance x pair norm; float16/bfloat16
// within one storage ulp of the rounded reference, plus the same float32
// allowance (a rounding boundary may fall between the float32 result and the
// exact one). Features past rotary_dim: exactly the input.
::testing::AssertionResult MatchesReference(DType dtype, const reference::Rope& rope,
                                            const std::vector<double>& in,
                                            const std::vector<double>& got,
                                            const std::vector<double>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size mismatch";
  const int64_t d = rope.head_dim;
  int failures = 0;
  ::testing::AssertionResult result = ::testing::AssertionSuccess();
  for (size_t base = 0; base < got.size(); base += d) {
    for (int i = 0; i < rope.rotary_dim / 2; ++i) {
      int f0, f1;
      reference::Pair(rope, i, &f0, &f1);
      const double norm = std::hypot(in[base + f0], in[base + f1]);
      for (int f : {f0, f1}) {
        const double g = got[base + f];
        const double w = test::Quantize(dtype, want[base + f]);
        const double tol = test::StorageUlp(dtype, w) + kF32PairTolerance * norm;
        if (!(std::fabs(g - w) <= tol) && ++failures <= 5) {
          result = ::testing::AssertionFailure();
          result << "element " << base + f << " (head offset " << base << ", feature " << f
                 << "): got " << g << ", want " << w << " (exact " << want[base + f]
                 << "), tolerance " << tol << "\n";
        }
      }
    }
    for (int64_t f = rope.rotary_dim; f < d; ++f) {
      if (got[base + f] != in[base + f] && ++failures <= 5) {
        result = ::testing::AssertionFailure();
        result << "tail element " << base + f << " changed: " << in[base + f] << " -> "
               << got[base + f] << "\n";
      }
    }
  }
  if (failures > 0) result << failures << " elements out of tolerance";
  return result;
}

// ---- The grid -----------------------------------------------------------------

enum class Heads { kEqual, kGroup4, kMqa, kNoK };
enum class PosMode { kStartPos, kPerSeq, kPerBatchSeq };

using GridParam = std::tuple<Layout, DType, bool /*partial*/, Heads, PosMode, bool /*inverse*/>;

std::string GridName(const ::testing::TestParamInfo<GridParam>& info) {
  const auto& [layout, dtype, partial, heads, pos, inverse] = info.param;
  std::string name = layout == Layout::kInterleaved ? "Interleaved" : "Half";
  name += dtype == DType::kFloat32 ? "_F32" : dtype == DType::kFloat16 ? "_F16" : "_BF16";
  name += partial ? "_Partial" : "_Full";
  switch (heads) {
    case Heads::kEqual: name += "_MhaEqualHeads"; break;
    case Heads::kGroup4: name += "_Gqa4"; break;
    case Heads::kMqa: name += "_Mqa"; break;
    case Heads::kNoK: name += "_NoK"; break;
  }
  switch (pos) {
    case PosMode::kStartPos: name += "_StartPos"; break;
    case PosMode::kPerSeq: name += "_PositionsS"; break;
    case PosMode::kPerBatchSeq: name += "_PositionsBS"; break;
  }
  name += inverse ? "_Inverse" : "_Forward";
  return name;
}

class RotateGridTest : public ::testing::TestWithParam<GridParam> {
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

Engine* RotateGridTest::engine_ = nullptr;
std::string RotateGridTest::skip_;

TEST_P(RotateGridTest, MatchesReference) {
  const auto& [layout, dtype, partial, heads, pos_mode, inverse] = GetParam();
  constexpr int64_t B = 2, S = 5, D = 32;
  int64_t hq = 3, hkv = 3;
  if (heads == Heads::kGroup4) hq = 8, hkv = 2;
  if (heads == Heads::kMqa) hq = 4, hkv = 1;
  const bool has_k = heads != Heads::kNoK;

  RopeConfig config;
  config.theta = kTheta;
  config.head_dim = D;
  config.rotary_dim = partial ? 12 : 0;
  config.max_len = kMaxLen;
  config.layout = layout;

  std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>()(
      GridName(::testing::TestParamInfo<GridParam>(GetParam(), 0)))));
  const std::vector<double> q_in = RandomValues(dtype, B * S * hq * D, &rng);
  const std::vector<double> k_in = RandomValues(dtype, B * S * hkv * D, &rng);
  HostTensor q = Encode(dtype, {B, S, hq, D}, q_in);
  HostTensor k = Encode(dtype, {B, S, hkv, D}, k_in);

  RotateParams params;
  params.config = config;
  params.q = q.view();
  if (has_k) params.k = k.view();
  params.inverse = inverse;
  std::vector<int64_t> resolved(B * S);  // position of token (b, s), for the reference
  std::uniform_int_distribution<int64_t> any_pos(0, kMaxLen - 1);
  switch (pos_mode) {
    case PosMode::kStartPos:
      params.start_pos = kMaxLen - S;  // the last positions of the table
      for (int64_t t = 0; t < B * S; ++t) resolved[t] = params.start_pos + t % S;
      break;
    case PosMode::kPerSeq:
      for (int64_t s = 0; s < S; ++s) params.positions.push_back(any_pos(rng));
      params.positions[0] = 0;
      for (int64_t t = 0; t < B * S; ++t) resolved[t] = params.positions[t % S];
      break;
    case PosMode::kPerBatchSeq:
      for (int64_t t = 0; t < B * S; ++t) params.positions.push_back(any_pos(rng));
      params.positions[1] = kMaxLen - 1;
      resolved = params.positions;
      break;
  }

  const absl::Status status = engine_->Rotate(params);
  ASSERT_TRUE(status.ok()) << status;

  const reference::Rope rope = RefRope(config);
  std::vector<double> q_want = q_in;
  reference::RotateTensor(rope, B, S, hq, resolved, inverse, &q_want);
  EXPECT_TRUE(MatchesReference(dtype, rope, q_in, Decode(q), q_want)) << "q";
  if (has_k) {
    std::vector<double> k_want = k_in;
    reference::RotateTensor(rope, B, S, hkv, resolved, inverse, &k_want);
    EXPECT_TRUE(MatchesReference(dtype, rope, k_in, Decode(k), k_want)) << "k";
  } else {
    EXPECT_EQ(Decode(k), k_in) << "k was not passed and must not change";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Grid, RotateGridTest,
    ::testing::Combine(::testing::Values(Layout::kInterleaved, Layout::kHalf),
                       ::testing::Values(DType::kFloat32, DType::kFloat16, DType::kBFloat16),
                       ::testing::Bool(),
                       ::testing::Values(Heads::kEqual, Heads::kGroup4, Heads::kMqa, Heads::kNoK),
                       ::testing::Values(PosMode::kStartPos, PosMode::kPerSeq,
                                         PosMode::kPerBatchSeq),
                       ::testing::Bool()),
    GridName);

// ---- Properties -----------------------------------------------------------------

class RotateTest : public ::testing::Test {
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

  static RopeConfig Config(uint32_t head_dim, uint32_t rotary_dim, Layout layout) {
    RopeConfig config;
    config.theta = 500000;
    config.head_dim = head_dim;
    config.rotary_dim = rotary_dim;
    config.max_len = kMaxLen;
    config.layout = layout;
    return config;
  }

  static Engine* engine_;
  static std::string skip_;
};

Engine* RotateTest::engine_ = nullptr;
std::string RotateTest::skip_;

TEST_F(RotateTest, InverseUndoesRotate) {
  std::mt19937 rng(1);
  constexpr int64_t B = 2, S = 7, H = 4, D = 64;
  const std::vector<double> x = RandomValues(DType::kFloat32, B * S * H * D, &rng);
  for (Layout layout : {Layout::kInterleaved, Layout::kHalf}) {
    HostTensor q = Encode(DType::kFloat32, {B, S, H, D}, x);
    RotateParams params;
    params.config = Config(D, 0, layout);
    params.q = q.view();
    params.positions = {5, 4095, 1000, 0, 17, 3333, 2048, 1, 2, 3, 4, 5, 6, 7};
    ASSERT_TRUE(engine_->Rotate(params).ok());
    EXPECT_NE(Decode(q), x) << "the forward rotation should change q";
    params.inverse = true;
    ASSERT_TRUE(engine_->Rotate(params).ok());
    const std::vector<double> back = Decode(q);
    for (size_t i = 0; i < x.size(); ++i) {
      // Two rotations: twice the single-rotation allowance, relative to the
      // largest magnitude the pair can have (|x| <= 2 per component).
      ASSERT_NEAR(back[i], x[i], 2 * kF32PairTolerance * 2.9) << "element " << i;
    }
  }
}

TEST_F(RotateTest, HalfLayoutEqualsInterleavedUnderFeaturePermutation) {
  // Interleaved pair i is features (2i, 2i+1); half pair i is (i, i + r/2).
  // Moving feature 2i to i and 2i+1 to i + r/2 turns one into the other; the
  // float32 arithmetic per pair is the same, so the results are identical.
  constexpr int64_t S = 6, H = 2, D = 24, R = 16;
  std::mt19937 rng(2);
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    const std::vector<double> x = RandomValues(dtype, S * H * D, &rng);
    std::vector<double> x_half = x;
    for (int64_t head = 0; head < S * H; ++head) {
      for (int64_t i = 0; i < R / 2; ++i) {
        x_half[head * D + i] = x[head * D + 2 * i];
        x_half[head * D + i + R / 2] = x[head * D + 2 * i + 1];
      }
    }
    HostTensor qi = Encode(dtype, {S, H, D}, x);
    HostTensor qh = Encode(dtype, {S, H, D}, x_half);
    RotateParams params;
    params.config = Config(D, R, Layout::kInterleaved);
    params.q = qi.view();
    params.start_pos = 123;
    ASSERT_TRUE(engine_->Rotate(params).ok());
    params.config.layout = Layout::kHalf;
    params.q = qh.view();
    ASSERT_TRUE(engine_->Rotate(params).ok());
    const std::vector<double> yi = Decode(qi), yh = Decode(qh);
    for (int64_t head = 0; head < S * H; ++head) {
      for (int64_t i = 0; i < R / 2; ++i) {
        EXPECT_EQ(yh[head * D + i], yi[head * D + 2 * i]) << "head " << head << " pair " << i;
        EXPECT_EQ(yh[head * D + i + R / 2], yi[head * D + 2 * i + 1])
            << "head " << head << " pair " << i;
      }
      for (int64_t f = R; f < D; ++f) EXPECT_EQ(yh[head * D + f], yi[head * D + f]);
    }
  }
}

TEST_F(RotateTest, PartialRotaryLeavesTailBitIdentical) {
  // Arbitrary bit patterns in the tail (NaN payloads, infinities, subnormals)
  // must come back byte for byte: the tail is never loaded or stored.
  constexpr int64_t B = 2, S = 3, H = 2, D = 16, R = 6;
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> bits;
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (Layout layout : {Layout::kInterleaved, Layout::kHalf}) {
      HostTensor q = Encode(dtype, {B, S, H, D}, RandomValues(dtype, B * S * H * D, &rng));
      HostTensor k = Encode(dtype, {B, S, H, D}, RandomValues(dtype, B * S * H * D, &rng));
      const size_t elem = DTypeSize(dtype);
      for (HostTensor* t : {&q, &k}) {
        for (int64_t head = 0; head < B * S * H; ++head) {
          for (int64_t f = R; f < D; ++f) {
            const uint32_t u = bits(rng);
            std::memcpy(t->bytes.data() + (head * D + f) * elem, &u, elem);
          }
        }
      }
      const HostTensor q_before = q, k_before = k;
      RotateParams params;
      params.config = Config(D, R, layout);
      params.q = q.view();
      params.k = k.view();
      params.start_pos = 40;
      ASSERT_TRUE(engine_->Rotate(params).ok());
      for (const auto& [after, before] : {std::pair{&q, &q_before}, std::pair{&k, &k_before}}) {
        for (int64_t head = 0; head < B * S * H; ++head) {
          const size_t off = (head * D + R) * elem;
          EXPECT_EQ(std::memcmp(after->bytes.data() + off, before->bytes.data() + off,
                                (D - R) * elem),
                    0)
              << DTypeName(dtype) << " " << LayoutName(layout) << " head " << head;
        }
        EXPECT_NE(after->bytes, before->bytes) << "the rotary part should have changed";
      }
    }
  }
}

TEST_F(RotateTest, RankThreeIsBatchOne) {
  constexpr int64_t S = 9, Hq = 4, Hkv = 2, D = 32;
  std::mt19937 rng(4);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    const std::vector<double> qv = RandomValues(dtype, S * Hq * D, &rng);
    const std::vector<double> kv = RandomValues(dtype, S * Hkv * D, &rng);
    HostTensor q3 = Encode(dtype, {S, Hq, D}, qv), k3 = Encode(dtype, {S, Hkv, D}, kv);
    HostTensor q4 = Encode(dtype, {1, S, Hq, D}, qv), k4 = Encode(dtype, {1, S, Hkv, D}, kv);
    RotateParams params;
    params.config = Config(D, 0, Layout::kHalf);
    params.positions = {3, 1, 4, 1, 5, 9, 2, 6, 5};
    params.q = q3.view();
    params.k = k3.view();
    ASSERT_TRUE(engine_->Rotate(params).ok());
    params.q = q4.view();
    params.k = k4.view();
    ASSERT_TRUE(engine_->Rotate(params).ok());
    EXPECT_EQ(q3.bytes, q4.bytes);
    EXPECT_EQ(k3.bytes, k4.bytes);
    const reference::Rope rope = RefRope(params.config);
    std::vector<double> want = qv;
    reference::RotateTensor(rope, 1, S, Hq, params.positions, false, &want);
    EXPECT_TRUE(MatchesReference(dtype, rope, qv, Decode(q3), want));
  }
}

TEST_F(RotateTest, PositionZeroIsTheIdentity) {
  std::mt19937 rng(5);
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    HostTensor q = Encode(dtype, {2, 1, 3, 8}, RandomValues(dtype, 48, &rng));
    const HostTensor before = q;
    RotateParams params;
    params.config = Config(8, 0, Layout::kInterleaved);
    params.q = q.view();
    ASSERT_TRUE(engine_->Rotate(params).ok());
    EXPECT_EQ(q.bytes, before.bytes) << DTypeName(dtype);
  }
}

TEST_F(RotateTest, ManyTokensSplitAcrossThreadsMatchReference) {
  constexpr int64_t B = 3, S = 150, Hq = 4, Hkv = 2, D = 64;
  std::mt19937 rng(6);
  for (bool inverse : {false, true}) {
    const std::vector<double> qv = RandomValues(DType::kFloat32, B * S * Hq * D, &rng);
    const std::vector<double> kv = RandomValues(DType::kFloat32, B * S * Hkv * D, &rng);
    HostTensor q = Encode(DType::kFloat32, {B, S, Hq, D}, qv);
    HostTensor k = Encode(DType::kFloat32, {B, S, Hkv, D}, kv);
    RotateParams params;
    params.config = Config(D, 48, Layout::kInterleaved);
    params.q = q.view();
    params.k = k.view();
    params.start_pos = 3000;
    params.inverse = inverse;
    ASSERT_TRUE(engine_->Rotate(params).ok());
    std::vector<int64_t> pos(B * S);
    for (int64_t t = 0; t < B * S; ++t) pos[t] = 3000 + t % S;
    const reference::Rope rope = RefRope(params.config);
    std::vector<double> qw = qv, kw = kv;
    reference::RotateTensor(rope, B, S, Hq, pos, inverse, &qw);
    reference::RotateTensor(rope, B, S, Hkv, pos, inverse, &kw);
    EXPECT_TRUE(MatchesReference(DType::kFloat32, rope, qv, Decode(q), qw));
    EXPECT_TRUE(MatchesReference(DType::kFloat32, rope, kv, Decode(k), kw));
  }
}

TEST_F(RotateTest, WideHeadInverseMatchesReference) {
  // rotary_dim / 2 above 512 takes the float32 path's heap-allocated sin row.
  constexpr int64_t S = 3, H = 1, D = 2048;
  std::mt19937 rng(7);
  const std::vector<double> qv = RandomValues(DType::kFloat32, S * H * D, &rng);
  HostTensor q = Encode(DType::kFloat32, {S, H, D}, qv);
  RotateParams params;
  params.config = Config(D, 0, Layout::kHalf);
  params.q = q.view();
  params.start_pos = 77;
  params.inverse = true;
  ASSERT_TRUE(engine_->Rotate(params).ok());
  const reference::Rope rope = RefRope(params.config);
  std::vector<double> want = qv;
  reference::RotateTensor(rope, 1, S, H, {77, 78, 79}, true, &want);
  EXPECT_TRUE(MatchesReference(DType::kFloat32, rope, qv, Decode(q), want));
}

TEST(RotateTableSharingTest, LayoutHeadDimAndDefaultThetaDoNotChangeTheTable) {
  // The table depends on theta, rotary_dim, max_len and scaling only.
  std::string skip;
  std::unique_ptr<Engine> engine = MakeEngine(&skip);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_NE(engine, nullptr);
  HostTensor q8 = Encode(DType::kFloat32, {1, 2, 1, 8}, std::vector<double>(16, 1.0));
  HostTensor q16 = Encode(DType::kFloat32, {1, 2, 1, 16}, std::vector<double>(32, 1.0));
  RotateParams params;
  params.config.head_dim = 8;
  params.config.max_len = 32;
  params.q = q8.view();
  ASSERT_TRUE(engine->Rotate(params).ok());  // theta 0 = 10000, rotary 8, interleaved
  params.config.layout = Layout::kHalf;
  ASSERT_TRUE(engine->Rotate(params).ok());
  params.config.theta = kDefaultTheta;
  ASSERT_TRUE(engine->Rotate(params).ok());
  params.config.head_dim = 16;
  params.config.rotary_dim = 8;
  params.q = q16.view();
  ASSERT_TRUE(engine->Rotate(params).ok());
  TableCacheStats stats = engine->cache_stats();
  EXPECT_EQ(stats.misses, 1);
  EXPECT_EQ(stats.hits, 3);
  EXPECT_EQ(stats.entries, 1);
  EXPECT_EQ(stats.bytes, 32 * 4 * 2 * 4);
  params.config.max_len = 33;  // a different table
  ASSERT_TRUE(engine->Rotate(params).ok());
  stats = engine->cache_stats();
  EXPECT_EQ(stats.misses, 2);
  EXPECT_EQ(stats.entries, 2);
}

TEST_F(RotateTest, ConcurrentCallsWithDifferentConfigsMatchReference) {
  constexpr int kThreads = 4, kCallsPerThread = 5;
  constexpr int64_t S = 16, H = 4, D = 32;
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &failures] {
      std::mt19937 rng(100 + t);
      for (int call = 0; call < kCallsPerThread; ++call) {
        const DType dtype = call % 2 == 0 ? DType::kFloat32 : DType::kBFloat16;
        const std::vector<double> qv = RandomValues(dtype, S * H * D, &rng);
        HostTensor q = Encode(dtype, {S, H, D}, qv);
        RotateParams params;
        params.config = Config(D, 16 + 8 * (t % 3), t % 2 ? Layout::kHalf : Layout::kInterleaved);
        params.config.theta = 10000 * (1 + t);
        params.q = q.view();
        params.start_pos = 100 * call;
        if (!engine_->Rotate(params).ok()) {
          ++failures[t];
          continue;
        }
        std::vector<int64_t> pos(S);
        for (int64_t s = 0; s < S; ++s) pos[s] = 100 * call + s;
        const reference::Rope rope = RefRope(params.config);
        std::vector<double> want = qv;
        reference::RotateTensor(rope, 1, S, H, pos, false, &want);
        if (!MatchesReference(dtype, rope, qv, Decode(q), want)) ++failures[t];
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace rope
