// MergeAttentionStates: attention computed over 2 to 8 disjoint key ranges
// (each a call with OUTPUT and LSE, on an in-process CPU engine) merges into
// what one call over all keys gives: causal prefill, decode, GQA, sinks
// given to one range, ranges that some queries do not see at all.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "client/attention_merge.h"
#include "core/engine/engine.h"
#include "core/proto_engine/local_engine.h"
#include "tests/support/status_matchers.h"

namespace rope {
namespace {

using client::AttentionState;
using client::MergeAttentionStates;

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

struct Problem {
  int64_t batch, sq, sk, hq, hkv, d, dv;
  int64_t q_start;
  bool causal;
  std::vector<float> q, k, v, sinks;
};

// OUTPUT and LSE over keys [begin, end) (positions begin..end-1).
AttentionState Attend(Engine& engine, const Problem& p, int64_t begin, int64_t end, bool sinks) {
  const int64_t n = end - begin;
  std::vector<float> k(p.batch * n * p.hkv * p.d), v(p.batch * n * p.hkv * p.dv);
  for (int64_t b = 0; b < p.batch; ++b) {
    std::memcpy(k.data() + b * n * p.hkv * p.d, p.k.data() + (b * p.sk + begin) * p.hkv * p.d,
                n * p.hkv * p.d * sizeof(float));
    std::memcpy(v.data() + b * n * p.hkv * p.dv, p.v.data() + (b * p.sk + begin) * p.hkv * p.dv,
                n * p.hkv * p.dv * sizeof(float));
  }
  AttentionParams params;
  params.config.head_dim = static_cast<uint32_t>(p.d);
  params.config.max_len = 8192;
  params.q = ConstTensorView(DType::kFloat32, {p.batch, p.sq, p.hq, p.d}, p.q.data(),
                             p.q.size() * sizeof(float));
  params.k = ConstTensorView(DType::kFloat32, {p.batch, n, p.hkv, p.d}, k.data(),
                             k.size() * sizeof(float));
  params.v = ConstTensorView(DType::kFloat32, {p.batch, n, p.hkv, p.dv}, v.data(),
                             v.size() * sizeof(float));
  params.q_start_pos = p.q_start;
  params.k_start_pos = begin;
  params.causal = p.causal;
  params.results = {AttentionResult::kOutput, AttentionResult::kLse};
  if (sinks) params.sinks = p.sinks;
  std::string output, lse;
  AttentionOutputs out;
  out.output.bytes = &output;
  out.lse.bytes = &lse;
  const absl::Status status = engine.AttentionScores(params, &out);
  EXPECT_TRUE(status.ok()) << status;
  AttentionState state;
  state.batch = p.batch;
  state.q_seq = p.sq;
  state.q_heads = p.hq;
  state.v_dim = p.dv;
  state.output = Floats(output);
  state.lse = Floats(lse);
  return state;
}

Problem MakeProblem(int64_t batch, int64_t sq, int64_t sk, int64_t hq, int64_t hkv, bool causal,
                    uint32_t seed) {
  Problem p{batch, sq, sk, hq, hkv, 32, 16, sk - sq, causal, {}, {}, {}, {}};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto fill = [&](std::vector<float>& x, int64_t n) {
    x.resize(n);
    for (float& e : x) e = dist(rng);
  };
  fill(p.q, batch * sq * hq * p.d);
  fill(p.k, batch * sk * hkv * p.d);
  fill(p.v, batch * sk * hkv * p.dv);
  for (int64_t h = 0; h < hq; ++h) p.sinks.push_back(0.25f * static_cast<float>(h % 5));
  return p;
}

class AttentionMergeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto engine = NewLocalCpuEngine(2, EngineLimits());
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(engine).value();
  }
  // Splits the keys into `ranges` (uneven) ranges, merges, and compares
  // with one call over all keys.
  void ExpectMergeEqualsOneCall(const Problem& p, int ranges, bool sinks) {
    std::vector<AttentionState> parts;
    int64_t begin = 0;
    for (int r = 0; r < ranges; ++r) {
      // Uneven: range r gets a share growing with r; the last takes the rest.
      const int64_t end = r == ranges - 1 ? p.sk : begin + (p.sk - begin) * (r + 1) / (ranges + 1);
      parts.push_back(Attend(*engine_, p, begin, std::max(end, begin + 1), sinks && r == 1));
      begin = std::max(end, begin + 1);
    }
    const AttentionState whole = Attend(*engine_, p, 0, p.sk, sinks);
    absl::StatusOr<AttentionState> merged = MergeAttentionStates(parts);
    ASSERT_TRUE(merged.ok()) << merged.status();
    ASSERT_EQ(merged->output.size(), whole.output.size());
    int failures = 0;
    for (size_t i = 0; i < whole.lse.size(); ++i) {
      const float w = whole.lse[i], g = merged->lse[i];
      const bool ok = std::isinf(w) ? g == w : std::fabs(g - w) <= 2e-6 * (1 + std::fabs(w));
      if (!ok && ++failures <= 5) ADD_FAILURE() << "lse[" << i << "] is " << g << ", want " << w;
    }
    for (size_t i = 0; i < whole.output.size(); ++i) {
      if (!(std::fabs(merged->output[i] - whole.output[i]) <= 3e-6) && ++failures <= 10) {
        ADD_FAILURE() << "output[" << i << "] is " << merged->output[i] << ", want "
                      << whole.output[i];
      }
    }
    EXPECT_EQ(failures, 0) << ranges << " ranges";
  }
  std::unique_ptr<Engine> engine_;
};

TEST_F(AttentionMergeTest, CausalPrefillOverTwoToEightRanges) {
  const Problem p = MakeProblem(2, 300, 700, 8, 2, /*causal=*/true, 1);
  for (int ranges = 2; ranges <= 8; ++ranges) ExpectMergeEqualsOneCall(p, ranges, false);
}

TEST_F(AttentionMergeTest, DecodeOverEightRangesWithSinksInOne) {
  const Problem p = MakeProblem(1, 1, 5000, 32, 8, /*causal=*/true, 2);
  ExpectMergeEqualsOneCall(p, 8, /*sinks=*/true);
  ExpectMergeEqualsOneCall(p, 3, /*sinks=*/true);
}

TEST_F(AttentionMergeTest, RangesSomeQueriesDoNotSee) {
  // Queries 0..99 over keys 0..399 causally: later ranges are fully masked
  // for the early queries (LSE -inf, output 0), and weigh nothing.
  Problem p = MakeProblem(1, 100, 400, 4, 1, /*causal=*/true, 3);
  p.q_start = 0;
  for (int ranges : {2, 5, 8}) ExpectMergeEqualsOneCall(p, ranges, false);
}

TEST(AttentionMergeArgsTest, RefusesMismatchedParts) {
  EXPECT_TRUE(test::StatusIs(MergeAttentionStates({}).status(),
                             absl::StatusCode::kInvalidArgument, "no parts"));
  AttentionState a;
  a.q_seq = 2;
  a.q_heads = 1;
  a.v_dim = 3;
  a.output.assign(6, 0.0f);
  a.lse.assign(2, 0.0f);
  AttentionState b = a;
  b.v_dim = 4;
  EXPECT_TRUE(test::StatusIs(MergeAttentionStates({a, b}).status(),
                             absl::StatusCode::kInvalidArgument,
                             "parts[1] is [B 1, Sq 2, Hq 1, Dv 4] but parts[0] is"));
  b = a;
  b.lse.resize(3);
  EXPECT_TRUE(test::StatusIs(MergeAttentionStates({a, b}).status(),
                             absl::StatusCode::kInvalidArgument,
                             "parts[1] has 6 output and 3 lse values"));
  // A row no range sees: output 0, LSE -inf.
  a.lse.assign(2, -std::numeric_limits<float>::infinity());
  absl::StatusOr<AttentionState> merged = MergeAttentionStates({a, a});
  ASSERT_TRUE(merged.ok());
  EXPECT_TRUE(std::isinf(merged->lse[0]) && merged->lse[0] < 0);
  EXPECT_EQ(merged->output, std::vector<float>(6, 0.0f));
}

}  // namespace
}  // namespace rope
