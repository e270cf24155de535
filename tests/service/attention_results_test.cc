// AttentionScores' results beyond scores and output, through a real server
// on 127.0.0.1: OUTPUT and LSE (the tiled pass, no Sq x Sk buffer) against
// the SCORES path of the same request, TOP_K / KEY_MASS / SCORE_ROWS against
// the probabilities SCORES returns, the reply's tensors (names, dtypes,
// shapes), a reply without the new fields for a client that sets none, and
// the reply limit counting only the requested results.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/service/service_fixture.h"

namespace rope {
namespace test {
namespace {

using ::google::protobuf::RepeatedField;

v1::Tensor FloatTensor(std::vector<int64_t> shape, unsigned seed) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> values(n);
  for (float& x : values) x = dist(rng);
  v1::Tensor t;
  t.set_dtype(v1::FLOAT32);
  t.mutable_shape()->Assign(shape.begin(), shape.end());
  t.mutable_data()->assign(reinterpret_cast<const char*>(values.data()), n * sizeof(float));
  return t;
}

template <typename T>
std::vector<T> Values(const v1::Tensor& t) {
  std::vector<T> out(t.data().size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), t.data().data(), out.size() * sizeof(T));
  return out;
}

std::vector<int64_t> Shape(const v1::Tensor& t) { return {t.shape().begin(), t.shape().end()}; }

// q [1, Sq, Hq, D], k [1, Sk, Hkv, D], v [1, Sk, Hkv, Dv]: GQA 4/2, a
// sliding window over a causal mask, softcap and sinks, keys after the
// queries' start (k_start_pos 0, q_start_pos Sk - Sq).
constexpr int64_t kSq = 24, kSk = 40, kHq = 4, kHkv = 2, kD = 16, kDv = 8;

v1::AttentionScoresRequest BaseRequest() {
  v1::AttentionScoresRequest r;
  *r.mutable_config() = MakeConfig(kD, 128);
  *r.mutable_q() = FloatTensor({1, kSq, kHq, kD}, 1);
  *r.mutable_k() = FloatTensor({1, kSk, kHkv, kD}, 2);
  *r.mutable_v() = FloatTensor({1, kSk, kHkv, kDv}, 3);
  r.set_q_start_pos(kSk - kSq);
  r.set_causal(true);
  r.set_softmax(true);
  r.set_window_left(20);
  r.set_softcap(5.0);
  for (int h = 0; h < kHq; ++h) r.add_sinks(0.25f * static_cast<float>(h) - 0.5f);
  return r;
}

v1::AttentionScoresResponse Call(v1::RopeService::Stub* stub,
                                 const v1::AttentionScoresRequest& request) {
  v1::AttentionScoresResponse reply;
  grpc::ClientContext context;
  SetDeadline(&context);
  const grpc::Status status = stub->AttentionScores(&context, request, &reply);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return reply;
}

TEST_F(ServiceTest, AttentionOutputAndLseEqualTheScoresPath) {
  // The SCORES path: probabilities and output of today's fields plus the
  // masks, and the raw logits (softmax off) to take each row's LSE from.
  v1::AttentionScoresRequest request = BaseRequest();
  request.add_results(v1::SCORES);
  request.add_results(v1::OUTPUT);
  const v1::AttentionScoresResponse by_scores = Call(stub_.get(), request);
  request.set_softmax(false);
  request.clear_results();
  request.add_results(v1::SCORES);
  const v1::AttentionScoresResponse logits_reply = Call(stub_.get(), request);

  // The tiled pass: OUTPUT and LSE only.
  request = BaseRequest();
  request.add_results(v1::OUTPUT);
  request.add_results(v1::LSE);
  const v1::AttentionScoresResponse tiled = Call(stub_.get(), request);
  EXPECT_FALSE(tiled.has_scores());
  EXPECT_FALSE(tiled.has_top_k_indices());
  EXPECT_FALSE(tiled.has_key_mass());
  EXPECT_FALSE(tiled.has_score_rows());
  ASSERT_EQ(tiled.output().dtype(), v1::FLOAT32);
  ASSERT_EQ(Shape(tiled.output()), (std::vector<int64_t>{1, kSq, kHq, kDv}));
  ASSERT_EQ(tiled.lse().dtype(), v1::FLOAT32);
  ASSERT_EQ(Shape(tiled.lse()), (std::vector<int64_t>{1, kHq, kSq}));

  const std::vector<float> out = Values<float>(tiled.output());
  const std::vector<float> want_out = Values<float>(by_scores.output());
  ASSERT_EQ(out.size(), want_out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_NEAR(out[i], want_out[i], 2e-5) << "output element " << i;
  }

  // LSE = log(sum over visible keys of exp(logit) + exp(sink)), in double.
  const std::vector<float> logits = Values<float>(logits_reply.scores());
  const std::vector<float> lse = Values<float>(tiled.lse());
  ASSERT_EQ(logits.size(), static_cast<size_t>(kHq * kSq * kSk));
  for (int64_t h = 0; h < kHq; ++h) {
    for (int64_t i = 0; i < kSq; ++i) {
      double sum = std::exp(static_cast<double>(request.sinks(h)));
      for (int64_t j = 0; j < kSk; ++j) {
        const float s = logits[(h * kSq + i) * kSk + j];
        if (s != -std::numeric_limits<float>::infinity()) sum += std::exp(static_cast<double>(s));
      }
      EXPECT_NEAR(lse[h * kSq + i], std::log(sum), 1e-5) << "head " << h << " query " << i;
    }
  }
}

TEST_F(ServiceTest, AttentionTopKKeyMassAndScoreRowsFollowTheProbabilities) {
  v1::AttentionScoresRequest request = BaseRequest();
  request.clear_v();
  request.add_results(v1::SCORES);
  const std::vector<float> probs = Values<float>(Call(stub_.get(), request).scores());
  ASSERT_EQ(probs.size(), static_cast<size_t>(kHq * kSq * kSk));

  constexpr int64_t kTopK = 5, kRowsStart = 10, kRows = 6;
  request.clear_results();
  request.add_results(v1::TOP_K);
  request.add_results(v1::KEY_MASS);
  request.add_results(v1::SCORE_ROWS);
  request.set_top_k(kTopK);
  request.set_score_rows_start(kRowsStart);
  request.set_score_rows_count(kRows);
  const v1::AttentionScoresResponse reply = Call(stub_.get(), request);
  EXPECT_FALSE(reply.has_scores());
  EXPECT_FALSE(reply.has_output());
  EXPECT_FALSE(reply.has_lse());
  ASSERT_EQ(reply.top_k_indices().dtype(), v1::INT32);
  ASSERT_EQ(Shape(reply.top_k_indices()), (std::vector<int64_t>{1, kHq, kSq, kTopK}));
  ASSERT_EQ(reply.top_k_probs().dtype(), v1::FLOAT32);
  ASSERT_EQ(Shape(reply.top_k_probs()), (std::vector<int64_t>{1, kHq, kSq, kTopK}));
  ASSERT_EQ(Shape(reply.key_mass()), (std::vector<int64_t>{1, kHq, kSk}));
  ASSERT_EQ(Shape(reply.score_rows()), (std::vector<int64_t>{1, kHq, kRows, kSk}));

  const std::vector<int32_t> idx = Values<int32_t>(reply.top_k_indices());
  const std::vector<float> top = Values<float>(reply.top_k_probs());
  const std::vector<float> mass = Values<float>(reply.key_mass());
  const std::vector<float> rows = Values<float>(reply.score_rows());
  for (int64_t h = 0; h < kHq; ++h) {
    for (int64_t i = 0; i < kSq; ++i) {
      const float* row = &probs[(h * kSq + i) * kSk];
      // The expected order: probability descending, ties to the smaller index;
      // keys of probability 0 that the row cannot see are never listed.
      std::vector<int32_t> order(kSk);
      for (int32_t j = 0; j < kSk; ++j) order[j] = j;
      std::stable_sort(order.begin(), order.end(),
                       [row](int32_t a, int32_t b) { return row[a] > row[b]; });
      for (int64_t t = 0; t < kTopK; ++t) {
        const int64_t at = (h * kSq + i) * kTopK + t;
        EXPECT_NEAR(top[at], row[order[t]], 1e-6) << "h " << h << " i " << i << " rank " << t;
        if (idx[at] >= 0) {
          EXPECT_NEAR(row[idx[at]], top[at], 1e-6);
        } else {
          EXPECT_EQ(top[at], 0.0f);
        }
      }
      if (i >= kRowsStart && i < kRowsStart + kRows) {
        for (int64_t j = 0; j < kSk; ++j) {
          EXPECT_NEAR(rows[(h * kRows + i - kRowsStart) * kSk + j], row[j], 1e-6);
        }
      }
    }
    for (int64_t j = 0; j < kSk; ++j) {
      double sum = 0;
      for (int64_t i = 0; i < kSq; ++i) sum += probs[(h * kSq + i) * kSk + j];
      EXPECT_NEAR(mass[h * kSk + j], sum, 1e-5) << "h " << h << " key " << j;
    }
  }
}

TEST_F(ServiceTest, AttentionWithoutTheNewFieldsRepliesAsBefore) {
  // Today's fields only: scores and output, and nothing else in the reply.
  v1::AttentionScoresRequest request;
  *request.mutable_config() = MakeConfig(kD, 128);
  *request.mutable_q() = FloatTensor({1, kSq, kHq, kD}, 1);
  *request.mutable_k() = FloatTensor({1, kSk, kHkv, kD}, 2);
  *request.mutable_v() = FloatTensor({1, kSk, kHkv, kDv}, 3);
  request.set_causal(true);
  request.set_softmax(true);
  const v1::AttentionScoresResponse reply = Call(stub_.get(), request);
  EXPECT_EQ(Shape(reply.scores()), (std::vector<int64_t>{1, kHq, kSq, kSk}));
  EXPECT_EQ(Shape(reply.output()), (std::vector<int64_t>{1, kSq, kHq, kDv}));
  v1::AttentionScoresResponse only_today;
  *only_today.mutable_scores() = reply.scores();
  *only_today.mutable_output() = reply.output();
  EXPECT_EQ(reply.SerializeAsString(), only_today.SerializeAsString());
}

class SmallReplyLimitTest : public ServiceTest {
 protected:
  void SetUp() override {
    ServerOptions options = DefaultOptions();
    options.max_message_bytes = 64 << 10;
    StartServer(options);
  }
};

TEST_F(SmallReplyLimitTest, ScoresPastTheReplyLimitNameItAndOutputLseFit) {
  // Scores [1, 1, 128, 256] float32 = 128 KiB > 64 KiB; output and LSE are
  // 128 x 8 + 128 floats.
  v1::AttentionScoresRequest request;
  *request.mutable_config() = MakeConfig(8, 512);
  *request.mutable_q() = FloatTensor({1, 128, 1, 8}, 4);
  *request.mutable_k() = FloatTensor({1, 256, 1, 8}, 5);
  *request.mutable_v() = FloatTensor({1, 256, 1, 8}, 6);
  request.set_q_start_pos(128);
  request.set_causal(true);
  request.set_softmax(true);
  for (bool today : {true, false}) {
    SCOPED_TRACE(today ? "today's fields" : "results SCORES");
    if (!today) request.add_results(v1::SCORES);
    v1::AttentionScoresResponse reply;
    grpc::ClientContext context;
    SetDeadline(&context);
    const grpc::Status status = stub_->AttentionScores(&context, request, &reply);
    EXPECT_TRUE(GrpcStatusIs(status, grpc::StatusCode::RESOURCE_EXHAUSTED,
                             "is over the server's max_message_bytes 65536"));
    EXPECT_NE(status.error_message().find("OUTPUT and LSE need no Sq x Sk memory"),
              std::string::npos)
        << status.error_message();
  }
  request.clear_results();
  request.add_results(v1::OUTPUT);
  request.add_results(v1::LSE);
  const v1::AttentionScoresResponse reply = Call(stub_.get(), request);
  EXPECT_EQ(Shape(reply.output()), (std::vector<int64_t>{1, 128, 1, 8}));
  EXPECT_EQ(Shape(reply.lse()), (std::vector<int64_t>{1, 1, 128}));
}

}  // namespace
}  // namespace test
}  // namespace rope
