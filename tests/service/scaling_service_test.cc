// Every scaling variant end to end through a real server: GetTable,
// Rotate, RotateStream and AttentionScores against the reference formulas of
// tests/unit/reference_scaling.*, and the table cache never sharing an entry
// between configs one scaling parameter apart.
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/grpc_test_util.h"
#include "tests/service/service_fixture.h"
#include "tests/unit/reference_scaling.h"

namespace rope {
namespace test {
namespace {

constexpr uint32_t kHeadDim = 16;
constexpr uint32_t kMaxLen = 256;
constexpr double kTheta = 10000;

struct Variant {
  std::string name;
  v1::RopeConfig config;
  std::vector<double> inv_freq;  // reference, for a request reaching max_position
  double attention_factor = 1;
};

// The variants, each with what the reference says for positions up to
// `max_position`.
std::vector<Variant> Variants(int64_t max_position) {
  std::vector<Variant> out;
  auto base = [] { return MakeConfig(kHeadDim, kMaxLen, v1::INTERLEAVED, 0, kTheta); };
  {
    Variant v{"linear", base(), reference::LinearInvFreq(kTheta, kHeadDim, 4), 1};
    v.config.mutable_linear()->set_factor(4);
    out.push_back(v);
  }
  {
    const double b = reference::DynamicNtkBase(kTheta, kHeadDim, 2, 64, max_position + 1.0);
    Variant v{"dynamic", base(), reference::DefaultInvFreq(b, kHeadDim), 1};
    v.config.mutable_dynamic_ntk()->set_factor(2);
    v.config.mutable_dynamic_ntk()->set_original_max_position_embeddings(64);
    out.push_back(v);
  }
  {
    Variant v{"yarn", base(), reference::YarnInvFreq(kTheta, kHeadDim, 8, 32, 32, 1),
              reference::YarnAttentionFactor(8, 0, 0, 0)};
    v.config.mutable_yarn()->set_factor(8);
    v.config.mutable_yarn()->set_original_max_position_embeddings(32);
    out.push_back(v);
  }
  {
    Variant v{"llama3", base(), reference::Llama3InvFreq(kTheta, kHeadDim, 8, 1, 4, 64), 1};
    v.config.mutable_llama3()->set_original_max_position_embeddings(64);
    out.push_back(v);
  }
  {
    std::vector<double> short_f, long_f;
    for (uint32_t i = 0; i < kHeadDim / 2; ++i) {
      short_f.push_back(1.0 + 0.1 * i);
      long_f.push_back(2.0 + 0.5 * i);
    }
    Variant v{"longrope", base(), reference::LongRopeInvFreq(kTheta, kHeadDim, long_f),
              reference::LongRopeAttentionFactor(kMaxLen, 64, 0)};
    auto* l = v.config.mutable_longrope();
    for (double f : short_f) l->add_short_factor(f);
    for (double f : long_f) l->add_long_factor(f);
    l->set_original_max_position_embeddings(64);
    out.push_back(v);
  }
  {
    // Gemma 4's full-attention form: two pairs turn (inv / 4), the rest stay.
    std::vector<double> inv = reference::DefaultInvFreq(kTheta, kHeadDim);
    for (size_t i = 0; i < inv.size(); ++i) inv[i] = i < 2 ? inv[i] / 4 : 0.0;
    Variant v{"proportional", base(), inv, 1};
    v.config.mutable_proportional()->set_factor(4);
    v.config.mutable_proportional()->set_rotated_pairs(2);
    out.push_back(v);
  }
  return out;
}

// Reference rotation of q [1, S, H, D] (interleaved) at positions start + s.
std::vector<double> ReferenceRotate(const Variant& v, const std::vector<double>& q, int64_t seq,
                                    int64_t heads, int64_t start) {
  std::vector<double> out = q;
  for (int64_t s = 0; s < seq; ++s) {
    for (int64_t h = 0; h < heads; ++h) {
      double* x = out.data() + (s * heads + h) * kHeadDim;
      for (uint32_t i = 0; i < kHeadDim / 2; ++i) {
        const double a = (start + s) * v.inv_freq[i];
        const double c = v.attention_factor * std::cos(a), sn = v.attention_factor * std::sin(a);
        const double x0 = x[2 * i], x1 = x[2 * i + 1];
        x[2 * i] = x0 * c - x1 * sn;
        x[2 * i + 1] = x0 * sn + x1 * c;
      }
    }
  }
  return out;
}

using ScalingServiceTest = ServiceTest;

TEST_F(ScalingServiceTest, GetTableMatchesReferenceForEveryVariant) {
  for (const Variant& v : Variants(/*max_position=*/199)) {
    v1::GetTableRequest request;
    *request.mutable_config() = v.config;
    request.set_start(100);
    request.set_count(100);  // dynamic NTK: sequence length 200
    v1::GetTableResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    ASSERT_TRUE(stub_->GetTable(&context, request, &response).ok()) << v.name;
    ASSERT_EQ(response.inv_freq_size(), static_cast<int>(kHeadDim / 2)) << v.name;
    for (int i = 0; i < response.inv_freq_size(); ++i) {
      EXPECT_NEAR(response.inv_freq(i), v.inv_freq[i], 1e-14 * v.inv_freq[i]) << v.name << " " << i;
    }
    EXPECT_DOUBLE_EQ(response.attention_factor(), v.attention_factor) << v.name;
    const std::vector<double> cos = Decode(FromProto(response.cos()));
    const std::vector<double> sin = Decode(FromProto(response.sin()));
    for (int row = 0; row < 100; row += 33) {
      for (uint32_t i = 0; i < kHeadDim / 2; ++i) {
        const double a = (100 + row) * v.inv_freq[i];
        EXPECT_NEAR(cos[row * kHeadDim / 2 + i], v.attention_factor * std::cos(a), 3e-7) << v.name;
        EXPECT_NEAR(sin[row * kHeadDim / 2 + i], v.attention_factor * std::sin(a), 3e-7) << v.name;
      }
    }
  }
}

TEST_F(ScalingServiceTest, RotateAndRotateStreamMatchReferenceForEveryVariant) {
  constexpr int64_t kSeq = 5, kHeads = 2, kStart = 120;
  for (const Variant& v : Variants(kStart + kSeq - 1)) {
    v1::RotateRequest request = MakeRotateRequest(1, kSeq, kHeads, kHeadDim, kMaxLen, kStart);
    *request.mutable_config() = v.config;
    const std::vector<double> q = Decode(FromProto(request.q()));
    const std::vector<double> want = ReferenceRotate(v, q, kSeq, kHeads, kStart);

    v1::RotateResponse unary;
    grpc::ClientContext context;
    SetDeadline(&context);
    ASSERT_TRUE(stub_->Rotate(&context, request, &unary).ok()) << v.name;
    const std::vector<double> got = Decode(FromProto(unary.q()));
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 2e-6 * (1 + std::abs(want[i]))) << v.name << " " << i;
    }

    grpc::ClientContext stream_context;
    SetDeadline(&stream_context);
    auto stream = stub_->RotateStream(&stream_context);
    for (int m = 0; m < 3; ++m) {
      ASSERT_TRUE(stream->Write(request)) << v.name;
      v1::RotateResponse reply;
      ASSERT_TRUE(stream->Read(&reply)) << v.name;
      EXPECT_EQ(reply.q().data(), unary.q().data()) << v.name << " stream message " << m;
    }
    stream->WritesDone();
    EXPECT_TRUE(stream->Finish().ok()) << v.name;
  }
}

TEST_F(ScalingServiceTest, AttentionScoresMatchReferenceForEveryVariant) {
  constexpr int64_t kSq = 3, kSk = 4, kQStart = 60, kKStart = 57;
  for (const Variant& v : Variants(kQStart + kSq - 1)) {
    v1::AttentionScoresRequest request;
    *request.mutable_config() = v.config;
    const v1::RotateRequest qr = MakeRotateRequest(1, kSq, 1, kHeadDim, kMaxLen, 0, 11);
    const v1::RotateRequest kr = MakeRotateRequest(1, kSk, 1, kHeadDim, kMaxLen, 0, 12);
    *request.mutable_q() = qr.q();
    *request.mutable_k() = kr.q();
    request.set_q_start_pos(kQStart);
    request.set_k_start_pos(kKStart);
    request.set_scale(1.0);
    v1::AttentionScoresResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    ASSERT_TRUE(stub_->AttentionScores(&context, request, &response).ok()) << v.name;
    const std::vector<double> q = ReferenceRotate(v, Decode(FromProto(qr.q())), kSq, 1, kQStart);
    const std::vector<double> k = ReferenceRotate(v, Decode(FromProto(kr.q())), kSk, 1, kKStart);
    const std::vector<double> scores = Decode(FromProto(response.scores()));
    ASSERT_EQ(scores.size(), static_cast<size_t>(kSq * kSk));
    for (int64_t i = 0; i < kSq; ++i) {
      for (int64_t j = 0; j < kSk; ++j) {
        double want = 0;
        for (uint32_t d = 0; d < kHeadDim; ++d) want += q[i * kHeadDim + d] * k[j * kHeadDim + d];
        EXPECT_NEAR(scores[i * kSk + j], want, 1e-4 * (1 + std::abs(want))) << v.name;
      }
    }
  }
}

// Two configs one scaling parameter apart: each GetTable is a cache miss.
TEST_F(ScalingServiceTest, ConfigsOneParameterApartNeverShareATable) {
  auto misses = [&] {
    v1::ServerInfo info;
    grpc::ClientContext context;
    SetDeadline(&context);
    EXPECT_TRUE(stub_->GetServerInfo(&context, v1::GetServerInfoRequest(), &info).ok());
    return info.table_cache().misses();
  };
  auto get_table = [&](const v1::RopeConfig& config) {
    v1::GetTableRequest request;
    *request.mutable_config() = config;
    request.set_count(1);
    v1::GetTableResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    return stub_->GetTable(&context, request, &response).ok();
  };
  v1::RopeConfig yarn = MakeConfig(kHeadDim, kMaxLen, v1::INTERLEAVED, 0, kTheta);
  yarn.mutable_yarn()->set_factor(4);
  yarn.mutable_yarn()->set_original_max_position_embeddings(64);
  std::vector<v1::RopeConfig> configs = {yarn};
  for (int field = 0; field < 5; ++field) {
    v1::RopeConfig c = yarn;
    auto* y = c.mutable_yarn();
    if (field == 0) y->set_factor(4.5);
    if (field == 1) y->set_original_max_position_embeddings(65);
    if (field == 2) y->set_beta_fast(33);
    if (field == 3) y->set_beta_slow(2);
    if (field == 4) y->set_attention_factor(1.01);
    configs.push_back(c);
  }
  v1::RopeConfig llama = MakeConfig(kHeadDim, kMaxLen, v1::INTERLEAVED, 0, kTheta);
  llama.mutable_llama3();
  configs.push_back(llama);
  llama.mutable_llama3()->set_high_freq_factor(5);
  configs.push_back(llama);
  v1::RopeConfig linear = MakeConfig(kHeadDim, kMaxLen, v1::INTERLEAVED, 0, kTheta);
  linear.mutable_linear()->set_factor(2);
  configs.push_back(linear);
  linear.mutable_linear()->set_factor(2.0000001);
  configs.push_back(linear);

  const int64_t before = misses();
  for (const v1::RopeConfig& c : configs) ASSERT_TRUE(get_table(c));
  EXPECT_EQ(misses() - before, static_cast<int64_t>(configs.size()));
  for (const v1::RopeConfig& c : configs) ASSERT_TRUE(get_table(c));  // now all hits
  EXPECT_EQ(misses() - before, static_cast<int64_t>(configs.size()));
}

TEST_F(ScalingServiceTest, BadScalingParametersNameTheField) {
  v1::RotateRequest request = MakeRotateRequest(1, 2, 1, kHeadDim, kMaxLen);
  request.mutable_config()->mutable_yarn()->set_original_max_position_embeddings(64);
  v1::RotateResponse response;
  {
    grpc::ClientContext context;
    SetDeadline(&context);
    EXPECT_TRUE(GrpcStatusIs(stub_->Rotate(&context, request, &response),
                             grpc::StatusCode::INVALID_ARGUMENT, "config.yarn.factor is 0"));
  }
  request.mutable_config()->mutable_llama3()->set_low_freq_factor(9);
  {
    grpc::ClientContext context;
    SetDeadline(&context);
    EXPECT_TRUE(GrpcStatusIs(stub_->Rotate(&context, request, &response),
                             grpc::StatusCode::INVALID_ARGUMENT,
                             "config.llama3.low_freq_factor is 9"));
  }
  request.mutable_config()->mutable_longrope()->add_short_factor(1);
  {
    grpc::ClientContext context;
    SetDeadline(&context);
    EXPECT_TRUE(GrpcStatusIs(stub_->Rotate(&context, request, &response),
                             grpc::StatusCode::INVALID_ARGUMENT,
                             "config.longrope.original_max_position_embeddings is 0"));
  }
}

TEST_F(ScalingServiceTest, ServerInfoListsEveryVariant) {
  v1::ServerInfo info;
  grpc::ClientContext context;
  SetDeadline(&context);
  ASSERT_TRUE(stub_->GetServerInfo(&context, v1::GetServerInfoRequest(), &info).ok());
  std::vector<std::string> names(info.supported_scalings().begin(),
                                 info.supported_scalings().end());
  EXPECT_EQ(names, (std::vector<std::string>{"none", "linear", "dynamic", "yarn", "llama3",
                                             "longrope", "proportional", "dynamic_alpha", "ntk",
                                             "deepseek_yarn"}));
}

}  // namespace
}  // namespace test
}  // namespace rope
