// Every way the engine rejects a request: exact status code, a message that
// names the field and value, and (for Rotate) q and k left untouched. Each
// test changes one thing in a request that is otherwise accepted.
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/engine/engine.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/reference_rope.h"
#include "tests/unit/test_util.h"

namespace rope {
namespace {

using absl::StatusCode;
using test::Encode;
using test::HostTensor;
using test::RandomValues;
using test::StatusIs;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

class ValidationTest : public ::testing::Test {
 protected:
  static constexpr int64_t B = 2, S = 5, Hq = 4, Hkv = 2, D = 8;

  ValidationTest() {
    auto backend = NewCpuBackend(1);
    EXPECT_TRUE(backend.ok()) << backend.status();
    EngineLimits limits;
    limits.max_len_cap = 4096;
    limits.table_cache_bytes = 1 << 20;
    limits.max_elements_per_request = 1 << 16;
    engine_ = std::make_unique<Engine>(std::move(backend).value(), limits);
    std::mt19937 rng(42);
    q_ = Encode(DType::kFloat32, {B, S, Hq, D}, RandomValues(DType::kFloat32, B * S * Hq * D, &rng));
    k_ = Encode(DType::kFloat32, {B, S, Hkv, D}, RandomValues(DType::kFloat32, B * S * Hkv * D, &rng));
    v_ = Encode(DType::kFloat32, {B, S, Hkv, 3}, RandomValues(DType::kFloat32, B * S * Hkv * 3, &rng));
  }

  static RopeConfig Config() {
    RopeConfig config;
    config.head_dim = D;
    config.max_len = 64;
    return config;
  }

  // An accepted rotate request over q_ and k_.
  RotateParams ValidRotate() {
    RotateParams params;
    params.config = Config();
    params.q = q_.view();
    params.k = k_.view();
    params.start_pos = 10;
    return params;
  }

  // An accepted attention request over q_, k_ (and v_ when asked).
  AttentionParams ValidAttention(bool with_v = false) {
    AttentionParams params;
    params.config = Config();
    params.q = q_.const_view();
    params.k = k_.const_view();
    if (with_v) params.v = v_.const_view();
    params.q_start_pos = 3;
    params.k_start_pos = 3;
    return params;
  }

  // Rotate must fail with `code` and `substr`, leaving q_ and k_ as they were.
  ::testing::AssertionResult RotateRejected(const RotateParams& params, StatusCode code,
                                            const std::string& substr) {
    const std::vector<uint8_t> q_before = q_.bytes, k_before = k_.bytes;
    ::testing::AssertionResult result = StatusIs(engine_->Rotate(params), code, substr);
    if (result && (q_.bytes != q_before || k_.bytes != k_before)) {
      return ::testing::AssertionFailure() << "a rejected Rotate modified q or k";
    }
    return result;
  }

  ::testing::AssertionResult AttentionRejected(const AttentionParams& params, StatusCode code,
                                               const std::string& substr) {
    std::string scores, output;
    AttentionOutputs out;
    out.scores.bytes = &scores;
    out.output.bytes = &output;
    return StatusIs(engine_->AttentionScores(params, &out), code, substr);
  }

  std::unique_ptr<Engine> engine_;
  HostTensor q_, k_, v_;
};

TEST_F(ValidationTest, BaselineRequestsAreAccepted) {
  EXPECT_TRUE(engine_->Rotate(ValidRotate()).ok());
  std::string scores, output;
  AttentionOutputs out;
  out.scores.bytes = &scores;
  out.output.bytes = &output;
  EXPECT_TRUE(engine_->AttentionScores(ValidAttention(/*with_v=*/true), &out).ok());
}

// ---- Config -----------------------------------------------------------------

TEST_F(ValidationTest, RejectsOddHeadDim) {
  RotateParams p = ValidRotate();
  p.config.head_dim = 7;
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "config.head_dim is 7"));
}

TEST_F(ValidationTest, RejectsZeroHeadDim) {
  RotateParams p = ValidRotate();
  p.config.head_dim = 0;
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "config.head_dim is 0"));
}

TEST_F(ValidationTest, RejectsOddRotaryDim) {
  RotateParams p = ValidRotate();
  p.config.rotary_dim = 5;
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "config.rotary_dim is 5"));
}

TEST_F(ValidationTest, RejectsRotaryDimAboveHeadDim) {
  RotateParams p = ValidRotate();
  p.config.rotary_dim = 10;
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "config.rotary_dim is 10"));
}

TEST_F(ValidationTest, ZeroThetaMeansTheDefault) {
  HostTensor copy = q_;
  RotateParams p = ValidRotate();
  p.k = TensorView();
  p.config.theta = 0;
  ASSERT_TRUE(engine_->Rotate(p).ok());
  p.q = copy.view();
  p.config.theta = kDefaultTheta;
  ASSERT_TRUE(engine_->Rotate(p).ok());
  EXPECT_EQ(q_.bytes, copy.bytes);
}

TEST_F(ValidationTest, RejectsThetaThatIsNotAFiniteBaseAboveOne) {
  const double bad[] = {-5.0, 0.5, 1.0, std::nan(""), std::numeric_limits<double>::infinity(),
                        -std::numeric_limits<double>::infinity()};
  for (double theta : bad) {
    RotateParams p = ValidRotate();
    p.config.theta = theta;
    EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "config.theta is")) << theta;
  }
  RotateParams p = ValidRotate();
  p.config.theta = -5;
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "config.theta is -5"));
}

TEST_F(ValidationTest, RejectsUnknownLayout) {
  RotateParams p = ValidRotate();
  p.config.layout = static_cast<Layout>(7);
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "config.layout is 7"));
}

TEST_F(ValidationTest, RejectsZeroMaxLen) {
  RotateParams p = ValidRotate();
  p.config.max_len = 0;
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "config.max_len is 0"));
}

TEST_F(ValidationTest, MaxLenAboveCapIsResourceExhausted) {
  RotateParams p = ValidRotate();
  p.config.max_len = 4097;
  EXPECT_TRUE(RotateRejected(p, StatusCode::kResourceExhausted, "config.max_len is 4097"));
  EXPECT_TRUE(RotateRejected(p, StatusCode::kResourceExhausted, "4096"));
  p.config.max_len = 4096;
  EXPECT_TRUE(engine_->Rotate(p).ok());
}

TEST_F(ValidationTest, TableOverCacheBudgetIsResourceExhausted) {
  // rotary_dim 66 x 4096 rows: 4096 x 33 x 2 x 4 = 1081344 bytes > the 1 MiB budget.
  HostTensor q = Encode(DType::kFloat32, {1, 1, 66}, std::vector<double>(66, 0.0));
  RotateParams p;
  p.config.head_dim = 66;
  p.config.max_len = 4096;
  p.q = q.view();
  const absl::Status status = engine_->Rotate(p);
  EXPECT_TRUE(StatusIs(status, StatusCode::kResourceExhausted, "needs 1081344 bytes"));
  EXPECT_TRUE(StatusIs(status, StatusCode::kResourceExhausted,
                       "over the table-cache budget of 1048576 bytes"));
}

// ---- Tensor shapes and bytes --------------------------------------------------

TEST_F(ValidationTest, RejectsQOfWrongRank) {
  RotateParams p = ValidRotate();
  p.k = TensorView();
  p.q.shape = {B * S * Hq, D};
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "q.shape is [40,8] (rank 2)"));
  p.q.shape = {1, B, S, Hq, D};
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "(rank 5)"));
}

TEST_F(ValidationTest, RejectsKWhoseRankDiffersFromQ) {
  RotateParams p = ValidRotate();
  p.q.shape = {B * S, Hq, D};  // rank 3, same bytes
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "k.shape [2,5,2,8] has rank 4"));
}

TEST_F(ValidationTest, RejectsHeadDimOtherThanConfig) {
  RotateParams p = ValidRotate();
  p.q.shape = {B, S, 2 * Hq, D / 2};
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument,
                             "q.shape[-1] (head_dim) is 4: must equal config.head_dim 8"));
  p = ValidRotate();
  p.k.shape = {B, S, 2 * Hkv, D / 2};
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "k.shape[-1] (head_dim) is 4"));
}

TEST_F(ValidationTest, RejectsKWithOtherBatchOrSequence) {
  RotateParams p = ValidRotate();
  p.k.shape = {1, S, 2 * Hkv, D};  // same bytes, batch 1
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "k.shape[0] (batch) is 1"));
  p.k.shape = {B, 1, S * Hkv, D};  // same bytes, sequence 1
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "k sequence length is 1"));
}

// Rotation pairs no query head with a key head: any counts (FlashInfer and
// vLLM rotate such q and k in one call); attention refuses them.
TEST_F(ValidationTest, RotateAcceptsQueryHeadsNotAMultipleOfKeyHeads) {
  HostTensor k = Encode(DType::kFloat32, {B, S, 3, D}, std::vector<double>(B * S * 3 * D, 0.5));
  RotateParams p = ValidRotate();
  p.k = k.view();
  EXPECT_TRUE(engine_->Rotate(p).ok());
  AttentionParams a = ValidAttention();
  a.k = k.const_view();
  EXPECT_TRUE(AttentionRejected(a, StatusCode::kInvalidArgument, "q heads (4) % k heads (3)"));
}

TEST_F(ValidationTest, RejectsByteLengthNotMatchingShape) {
  RotateParams p = ValidRotate();
  p.q.byte_size -= 1;
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "q.data has 1279 bytes"));
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "needs 1280"));
  p = ValidRotate();
  p.q.dtype = DType::kFloat16;  // 1280 bytes are 640 float16 values, not 320
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "float16 needs 640"));
  p = ValidRotate();
  p.k.byte_size = 0;
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "k.data has 0 bytes"));
  p = ValidRotate();
  p.q.data = nullptr;
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "q.data has 0 bytes"));
}

TEST_F(ValidationTest, RejectsUnknownDTypeAndMixedDTypes) {
  RotateParams p = ValidRotate();
  p.q.dtype = static_cast<DType>(9);
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "q.dtype is 9"));
  HostTensor k16 = Encode(DType::kFloat16, {B, S, Hkv, D}, std::vector<double>(B * S * Hkv * D, 1));
  p = ValidRotate();
  p.k = k16.view();
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument,
                             "k.dtype is float16: must equal q.dtype float32"));
}

TEST_F(ValidationTest, RejectsElementCountOverflow) {
  RotateParams p = ValidRotate();
  p.k = TensorView();
  p.q.shape = {int64_t{1} << 32, int64_t{1} << 32, 1, D};  // 2^67 elements
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "element count overflows int64"));
  p.q.shape = {kInt64Max, kInt64Max, kInt64Max, D};
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "element count overflows int64"));
  // Fits int64 as elements but not as bytes.
  p.q.shape = {int64_t{1} << 30, int64_t{1} << 30, 1, D};
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "element count overflows int64"));
}

TEST_F(ValidationTest, RejectsZeroAndNegativeDims) {
  RotateParams p = ValidRotate();
  p.q.shape = {B, 0, Hq, D};
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "q.shape[1] is 0"));
  p.q.shape = {B, -S, Hq, D};
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "q.shape[1] is -5"));
  p = ValidRotate();
  p.k.shape = {-B, -S, Hkv, D};  // product is positive: each dim must be checked
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "k.shape[0] is -2"));
}

TEST_F(ValidationTest, RejectsKWithoutShape) {
  RotateParams p = ValidRotate();
  p.k.shape.clear();
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "k.shape is [] (rank 0)"));
}

TEST_F(ValidationTest, ElementsOverLimitAreResourceExhausted) {
  // q alone (38400 elements) fits the 65536-element limit; q + k does not.
  HostTensor q = Encode(DType::kFloat32, {1, 600, 8, D}, std::vector<double>(600 * 8 * D, 0.25));
  HostTensor k = Encode(DType::kFloat32, {1, 600, 8, D}, std::vector<double>(600 * 8 * D, 0.25));
  RotateParams p;
  p.config = Config();
  p.config.max_len = 600;
  p.q = q.view();
  EXPECT_TRUE(engine_->Rotate(p).ok());
  p.k = k.view();
  const HostTensor q_before = q;
  const absl::Status status = engine_->Rotate(p);
  EXPECT_TRUE(StatusIs(status, StatusCode::kResourceExhausted, "request has 76800 tensor elements"));
  EXPECT_TRUE(StatusIs(status, StatusCode::kResourceExhausted,
                       "max_elements_per_request limit of 65536"));
  EXPECT_EQ(q.bytes, q_before.bytes);
}

// ---- Positions ------------------------------------------------------------------

TEST_F(ValidationTest, StartPosMayReachTheLastRowButNotPastIt) {
  RotateParams p = ValidRotate();
  p.start_pos = 64 - S;
  EXPECT_TRUE(engine_->Rotate(p).ok());
  p.start_pos = 64 - S + 1;
  EXPECT_TRUE(RotateRejected(p, StatusCode::kOutOfRange, "start_pos is 60"));
  EXPECT_TRUE(RotateRejected(p, StatusCode::kOutOfRange, "config.max_len 64"));
  p.start_pos = kInt64Max;  // no overflow in start_pos + S
  EXPECT_TRUE(RotateRejected(p, StatusCode::kOutOfRange, "start_pos is 9223372036854775807"));
}

TEST_F(ValidationTest, SequenceLongerThanTheTableIsOutOfRange) {
  HostTensor q = Encode(DType::kFloat32, {1, 65, 1, D}, std::vector<double>(65 * D, 1));
  RotateParams p;
  p.config = Config();  // max_len 64
  p.q = q.view();
  EXPECT_TRUE(StatusIs(engine_->Rotate(p), StatusCode::kOutOfRange,
                       "start_pos is 0 with sequence length 65"));
}

TEST_F(ValidationTest, NegativeStartPosIsInvalid) {
  RotateParams p = ValidRotate();
  p.start_pos = -1;
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "start_pos is -1"));
  p.start_pos = std::numeric_limits<int64_t>::min();
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "start_pos is -9223372036854775808"));
}

// Explicit positions replace start_pos, which must then be 0 (proto3's unset).
RotateParams WithPositions(RotateParams p, std::vector<int64_t> positions) {
  p.start_pos = 0;
  p.positions = std::move(positions);
  return p;
}

TEST_F(ValidationTest, StartPosTogetherWithPositionsIsInvalid) {
  RotateParams p = WithPositions(ValidRotate(), {0, 1, 2, 3, 4});
  EXPECT_TRUE(engine_->Rotate(p).ok());
  p.start_pos = 7;
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument,
                             "start_pos and positions are both set (start_pos is 7, positions "
                             "has 5 values)"));
  // Checked before the positions themselves, so the contradiction is named.
  p.positions = {0, 1, 2, 3, 64};
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "start_pos and positions"));
  p.start_pos = -1;
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "start_pos and positions"));
}

TEST_F(ValidationTest, ExplicitPositionAtMaxLenIsOutOfRange) {
  RotateParams p = WithPositions(ValidRotate(), {});
  p.positions = {0, 1, 63, 2, 3};
  EXPECT_TRUE(engine_->Rotate(p).ok());
  p.positions = {0, 1, 64, 2, 3};
  EXPECT_TRUE(RotateRejected(p, StatusCode::kOutOfRange, "positions[2] is 64"));
  p.positions.assign(B * S, 5);
  p.positions[B * S - 1] = 1000;
  EXPECT_TRUE(RotateRejected(p, StatusCode::kOutOfRange, "positions[9] is 1000"));
}

TEST_F(ValidationTest, NegativeExplicitPositionIsInvalid) {
  RotateParams p = WithPositions(ValidRotate(), {});
  p.positions = {0, -1, 2, 3, 4};
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "positions[1] is -1"));
}

TEST_F(ValidationTest, PositionsCountMustBeSeqOrBatchTimesSeq) {
  RotateParams p = WithPositions(ValidRotate(), {});
  for (size_t n : {size_t{1}, size_t{4}, size_t{6}, size_t{9}, size_t{11}}) {
    p.positions.assign(n, 0);
    EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument,
                               "positions has " + std::to_string(n) + " values"));
  }
  EXPECT_TRUE(RotateRejected(p, StatusCode::kInvalidArgument, "must be S (5) or B*S (10)"));
}

// ---- Attention ------------------------------------------------------------------

TEST_F(ValidationTest, AttentionRejectsBadScale) {
  // 1e39 is a finite double but infinity as the float32 the backends use.
  for (double scale : {-1.0, std::nan(""), std::numeric_limits<double>::infinity(), 1e39}) {
    AttentionParams p = ValidAttention();
    p.scale = scale;
    EXPECT_TRUE(AttentionRejected(p, StatusCode::kInvalidArgument, "scale is")) << scale;
  }
}

TEST_F(ValidationTest, AttentionRejectsVWithOtherSequenceOrHeads) {
  HostTensor v_seq = Encode(DType::kFloat32, {B, S - 1, Hkv, 3},
                            std::vector<double>(B * (S - 1) * Hkv * 3, 1));
  AttentionParams p = ValidAttention();
  p.v = v_seq.const_view();
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kInvalidArgument, "v sequence length is 4"));
  HostTensor v_heads = Encode(DType::kFloat32, {B, S, 1, 3}, std::vector<double>(B * S * 3, 1));
  p.v = v_heads.const_view();
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kInvalidArgument,
                                "v heads (1) must equal k heads (2)"));
  HostTensor v_batch = Encode(DType::kFloat32, {1, S, Hkv, 3}, std::vector<double>(S * Hkv * 3, 1));
  p.v = v_batch.const_view();
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kInvalidArgument, "v.shape[0] (batch) is 1"));
  HostTensor v_half = Encode(DType::kFloat16, {B, S, Hkv, 3}, std::vector<double>(B * S * Hkv * 3, 1));
  p.v = v_half.const_view();
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kInvalidArgument, "v.dtype is float16"));
}

TEST_F(ValidationTest, AttentionRejectsGqaMismatchAndHeadDim) {
  HostTensor k = Encode(DType::kFloat32, {B, S, 3, D}, std::vector<double>(B * S * 3 * D, 1));
  AttentionParams p = ValidAttention();
  p.k = k.const_view();
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kInvalidArgument, "q heads (4) % k heads (3)"));
  p = ValidAttention();
  p.k.shape = {B, S, 2 * Hkv, D / 2};
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kInvalidArgument, "k.shape[-1] (head_dim) is 4"));
}

TEST_F(ValidationTest, AttentionPositionsMustFitTheTable) {
  AttentionParams p = ValidAttention();
  p.q_start_pos = 60;
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kOutOfRange, "q_start_pos is 60"));
  p = ValidAttention();
  p.k_start_pos = 64;
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kOutOfRange, "k_start_pos is 64"));
  p = ValidAttention();
  p.q_start_pos = -3;
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kInvalidArgument, "q_start_pos is -3"));
  p = ValidAttention();
  p.k_start_pos = -1;
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kInvalidArgument, "k_start_pos is -1"));
}

TEST_F(ValidationTest, AttentionCountsScoresTowardTheElementLimit) {
  // q [1,20,1,2] and k [1,4000,1,2] are 8040 elements, but the [1,1,20,4000]
  // scores add 80000: 88040 > 65536.
  HostTensor q = Encode(DType::kFloat32, {1, 20, 1, 2}, std::vector<double>(40, 1));
  HostTensor k = Encode(DType::kFloat32, {1, 4000, 1, 2}, std::vector<double>(8000, 1));
  AttentionParams p;
  p.config.head_dim = 2;
  p.config.max_len = 4096;
  p.q = q.const_view();
  p.k = k.const_view();
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kResourceExhausted,
                                "request has 88040 tensor elements"));
  // With 14 query rows the total is 28 + 8000 + 56000 = 64028: accepted.
  q.shape = {1, 14, 1, 2};
  q.bytes.resize(14 * 2 * sizeof(float));
  p.q = q.const_view();
  std::string scores;
  AttentionOutputs out;
  out.scores.bytes = &scores;
  EXPECT_TRUE(engine_->AttentionScores(p, &out).ok());
}

TEST_F(ValidationTest, AttentionNeedsOutputBuffers) {
  AttentionParams p = ValidAttention(/*with_v=*/true);
  std::string scores;
  AttentionOutputs out;
  EXPECT_TRUE(StatusIs(engine_->AttentionScores(p, &out), StatusCode::kInvalidArgument,
                       "outputs.scores"));
  EXPECT_TRUE(StatusIs(engine_->AttentionScores(p, nullptr), StatusCode::kInvalidArgument,
                       "outputs.scores"));
  out.scores.bytes = &scores;
  EXPECT_TRUE(StatusIs(engine_->AttentionScores(p, &out), StatusCode::kInvalidArgument,
                       "outputs.output is null"));
}

// ---- Attention: results, masks, transforms ----------------------------------------

TEST_F(ValidationTest, AttentionChecksTheResultsList) {
  AttentionParams p = ValidAttention();
  p.results = {AttentionResult::kLse, static_cast<AttentionResult>(0)};
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kInvalidArgument, "results[1] is 0: must be"));
  p.results = {AttentionResult::kLse, static_cast<AttentionResult>(7)};
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kInvalidArgument, "results[1] is 7"));
  p.results = {AttentionResult::kLse, AttentionResult::kOutput, AttentionResult::kLse};
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kInvalidArgument,
                                "results[2] is LSE: listed more than once"));
  p.results = {AttentionResult::kOutput};
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kInvalidArgument,
                                "results asks for OUTPUT but v is absent"));
  p.results = {AttentionResult::kTopK};
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kInvalidArgument,
                                "top_k is 0: results asks for TOP_K"));
}

TEST_F(ValidationTest, AttentionRejectsBadMasksAndTransforms) {
  AttentionParams p = ValidAttention();
  p.window_left = -1;
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kInvalidArgument, "window_left is -1: must be >= 0"));
  p = ValidAttention();
  p.window_right = -5;
  EXPECT_TRUE(
      AttentionRejected(p, StatusCode::kInvalidArgument, "window_right is -5: must be >= 0"));
  p = ValidAttention();
  p.chunk_size = -2;
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kInvalidArgument, "chunk_size is -2: must be >= 0"));
  for (double softcap : {std::nan(""), std::numeric_limits<double>::infinity(), -1.0, 1e300}) {
    p = ValidAttention();
    p.softcap = softcap;
    EXPECT_TRUE(AttentionRejected(p, StatusCode::kInvalidArgument, "softcap is")) << softcap;
  }
  p = ValidAttention();
  p.sinks = {1, 2, 3};  // Hq is 4
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kInvalidArgument,
                                "sinks has 3 values: must be empty or one per query head (Hq = 4)"));
  p.sinks = {1, 2, std::nanf(""), 4};
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kInvalidArgument, "sinks[2] is nan: must be finite"));
  p = ValidAttention();
  p.alibi_slopes = {1, 2, 3, 4, 5};
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kInvalidArgument, "alibi_slopes has 5 values"));
  p.alibi_slopes = {1, -std::numeric_limits<float>::infinity(), 3, 4};
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kInvalidArgument, "alibi_slopes[1] is -inf"));
}

TEST_F(ValidationTest, AttentionChecksTopKAndTheRowRange) {
  AttentionParams p = ValidAttention();  // Sq = Sk = 5
  p.top_k = 6;
  p.results = {AttentionResult::kTopK};
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kInvalidArgument,
                                "top_k is 6: must be in [1, Sk] (Sk = 5 keys)"));
  p.top_k = 5;
  std::string idx, prob;
  AttentionOutputs out;
  out.top_k_indices.bytes = &idx;
  out.top_k_probs.bytes = &prob;
  EXPECT_TRUE(engine_->AttentionScores(p, &out).ok());
  EXPECT_EQ(idx.size(), static_cast<size_t>(B * Hq * S * 5 * 4));
  p = ValidAttention();
  p.score_rows_start = 5;
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kInvalidArgument,
                                "score_rows_start is 5: must be in [0, Sq) (Sq = 5)"));
  p.score_rows_start = -1;
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kInvalidArgument, "score_rows_start is -1"));
  p.score_rows_start = 2;
  p.score_rows_count = 4;
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kInvalidArgument,
                                "score_rows_count is 4: rows [2, 2 + 4) must lie within Sq = 5"));
  p.score_rows_count = -1;
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kInvalidArgument, "score_rows_count is -1"));
}

TEST_F(ValidationTest, AttentionChecksExplicitPositions) {
  AttentionParams p = ValidAttention();  // q_start_pos = k_start_pos = 3
  p.q_positions = {0, 1, 2, 3, 4};
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kInvalidArgument,
                                "q_start_pos and q_positions are both set (q_start_pos is 3, "
                                "q_positions has 5 values): give one of them"));
  p.q_start_pos = 0;
  p.q_positions = {0, 1, 2};
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kInvalidArgument,
                                "q_positions has 3 values: must be S (5) or B*S (10)"));
  p.q_positions = {0, 1, 2, 64, 4};
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kOutOfRange,
                                "q_positions[3] is 64: must be < config.max_len 64"));
  p.q_positions = {0, 1, 2, 3, 4, 5, 6, 7, 8, -9};
  EXPECT_TRUE(
      AttentionRejected(p, StatusCode::kInvalidArgument, "q_positions[9] is -9: must be >= 0"));
  p.q_positions = {0, 1, 2, 3, 4};
  p.k_start_pos = 0;
  p.k_positions = {63, 2, 1, 0, 5, 6, 7, 8, 9, 10};
  std::string scores;
  AttentionOutputs out;
  out.scores.bytes = &scores;
  EXPECT_TRUE(engine_->AttentionScores(p, &out).ok());
}

TEST_F(ValidationTest, AttentionCountsOnlyTheRequestedResults) {
  // q [1,20,1,2] and k [1,4000,1,2]: 8040 elements. The scores [1,1,20,4000]
  // would add 80000 (over 65536); LSE adds 20 and is accepted.
  HostTensor q = Encode(DType::kFloat32, {1, 20, 1, 2}, std::vector<double>(40, 1));
  HostTensor k = Encode(DType::kFloat32, {1, 4000, 1, 2}, std::vector<double>(8000, 1));
  AttentionParams p;
  p.config.head_dim = 2;
  p.config.max_len = 4096;
  p.q = q.const_view();
  p.k = k.const_view();
  EXPECT_TRUE(AttentionRejected(
      p, StatusCode::kResourceExhausted,
      "over the max_elements_per_request limit of 65536; of them, the scores 1x1x20x4000 are "
      "80000: results OUTPUT and LSE (or TOP_K, KEY_MASS) need no Sq x Sk memory"));
  p.results = {AttentionResult::kLse};
  std::string lse;
  AttentionOutputs out;
  out.lse.bytes = &lse;
  ASSERT_TRUE(engine_->AttentionScores(p, &out).ok());
  EXPECT_EQ(lse.size(), 20 * sizeof(float));
  p.results = {AttentionResult::kScoreRows};
  p.score_rows_start = 1;
  p.score_rows_count = 15;
  EXPECT_TRUE(AttentionRejected(p, StatusCode::kResourceExhausted,
                                "the score rows 1x1x15x4000 are 60000"));
}

TEST_F(ValidationTest, AttentionNeedsABufferForEachRequestedResult) {
  AttentionParams p = ValidAttention(/*with_v=*/true);
  p.results = {AttentionResult::kOutput, AttentionResult::kKeyMass};
  std::string output;
  AttentionOutputs out;
  out.output.bytes = &output;
  EXPECT_TRUE(StatusIs(engine_->AttentionScores(p, &out), StatusCode::kInvalidArgument,
                       "AttentionScores needs an outputs.key_mass buffer"));
  EXPECT_TRUE(StatusIs(engine_->AttentionScores(p, nullptr), StatusCode::kInvalidArgument,
                       "outputs"));
}

// ---- GetTable -------------------------------------------------------------------

TEST_F(ValidationTest, GetTableChecksTheRowRange) {
  const RopeConfig config = Config();  // max_len 64
  EXPECT_TRUE(StatusIs(engine_->GetTable(config, -1, 0).status(), StatusCode::kInvalidArgument,
                       "start is -1"));
  EXPECT_TRUE(StatusIs(engine_->GetTable(config, 0, -2).status(), StatusCode::kInvalidArgument,
                       "count is -2"));
  EXPECT_TRUE(StatusIs(engine_->GetTable(config, 64, 0).status(), StatusCode::kOutOfRange,
                       "start is 64"));
  EXPECT_TRUE(StatusIs(engine_->GetTable(config, 60, 5).status(), StatusCode::kOutOfRange,
                       "count 5"));
  RopeConfig bad = config;
  bad.head_dim = 3;
  EXPECT_TRUE(StatusIs(engine_->GetTable(bad, 0, 0).status(), StatusCode::kInvalidArgument,
                       "config.head_dim is 3"));
}

TEST_F(ValidationTest, GetTableCountZeroMeansToTheEnd) {
  auto slice = engine_->GetTable(Config(), 60, 0);
  ASSERT_TRUE(slice.ok()) << slice.status();
  EXPECT_EQ(slice->start, 60);
  EXPECT_EQ(slice->count, 4);
  ASSERT_NE(slice->table, nullptr);
  EXPECT_EQ(slice->table->max_len(), 64);
  const std::vector<double> inv = reference::InvFreq(kDefaultTheta, D);
  for (int i = 0; i < D / 2; ++i) {
    EXPECT_NEAR(slice->table->cos_row(63)[i], std::cos(63 * inv[i]), 1.2e-7);
    EXPECT_NEAR(slice->table->sin_row(63)[i], std::sin(63 * inv[i]), 1.2e-7);
  }
}

}  // namespace
}  // namespace rope
