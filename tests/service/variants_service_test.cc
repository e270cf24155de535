// The serving engines' variants through a real server: float8 replies of
// Rotate and RotateStream, DeepSeek's whole MLA head, Llama 4's NoPE layers
// (Rotate, GetTable, AttentionScores with the temperature tuning),
// DeepSeek-V4's rope groups, and what ResolveConfig says of each published
// config.json (tests/fixtures/hf_configs).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/service/hf_fixtures.h"
#include "tests/service/service_fixture.h"
#include "tests/support/grpc_test_util.h"
#include "tests/unit/reference_rope.h"

namespace rope {
namespace test {
namespace {

class VariantsServiceTest : public ServiceTest {
 protected:
};

v1::RopeConfig FromFixture(const std::string& name, uint32_t max_len, v1::Layout layout) {
  v1::RopeConfig config;
  config.set_hf_config_json(HfConfigFixture(name));
  config.set_max_len(max_len);
  config.set_layout(layout);
  return config;
}

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

// Float8 codes of `rotated` (the float32 reply) times `scale`, one float32
// product each, by value (reference_rope.h, not the server's conversion).
std::string ExpectedFloat8(const std::string& rotated, float scale, bool e5m2) {
  std::string out;
  for (float v : Floats(rotated)) {
    out.push_back(static_cast<char>(reference::DoubleToFloat8(static_cast<double>(v * scale), e5m2)));
  }
  return out;
}

TEST_F(VariantsServiceTest, RotateAndRotateStreamReplyInFloat8) {
  // q 3 heads and k 2: Rotate takes any head counts.
  v1::RotateRequest request = MakeRotateRequest(2, 3, 3, 16, 256, 0, 31);
  *request.mutable_k() = MakeRotateRequest(2, 3, 2, 16, 256, 0, 32).q();
  // Values past E4M3's 448 once scaled: saturation.
  std::string* q = request.mutable_q()->mutable_data();
  const float big = 300;
  std::memcpy(&(*q)[0], &big, sizeof(big));
  for (int64_t p : {0, 1, 200, 7, 8, 255}) request.add_positions(p);
  v1::RotateResponse plain;
  ASSERT_TRUE(GrpcStatusIs(Rotate(request, &plain), grpc::StatusCode::OK, ""));

  for (const bool e5m2 : {false, true}) {
    v1::RotateRequest fp8 = request;
    fp8.set_output_dtype(e5m2 ? v1::FLOAT8_E5M2 : v1::FLOAT8_E4M3FN);
    fp8.set_output_scale(4);
    fp8.set_k_output_scale(0.5);
    v1::RotateResponse reply;
    ASSERT_TRUE(GrpcStatusIs(Rotate(fp8, &reply), grpc::StatusCode::OK, ""));
    EXPECT_EQ(reply.q().dtype(), fp8.output_dtype());
    EXPECT_EQ(reply.k().dtype(), fp8.output_dtype());
    EXPECT_EQ(std::vector<int64_t>(reply.q().shape().begin(), reply.q().shape().end()),
              (std::vector<int64_t>{2, 3, 3, 16}));
    // One byte per element: a quarter of float32, half of bfloat16.
    EXPECT_EQ(reply.q().data().size(), 2u * 3 * 3 * 16);
    EXPECT_EQ(reply.q().data(), ExpectedFloat8(plain.q().data(), 4, e5m2)) << e5m2;
    EXPECT_EQ(reply.k().data(), ExpectedFloat8(plain.k().data(), 0.5f, e5m2)) << e5m2;
    if (!e5m2) {
      EXPECT_EQ(static_cast<uint8_t>(reply.q().data()[0]) & 0x7f, 0x7e);  // 448
    }

    // The same through RotateStream, twice in one stream.
    grpc::ClientContext context;
    SetDeadline(&context);
    auto stream = stub_->RotateStream(&context);
    ASSERT_TRUE(stream->Write(fp8));
    ASSERT_TRUE(stream->Write(fp8));
    ASSERT_TRUE(stream->WritesDone());
    v1::RotateResponse streamed;
    int received = 0;
    while (received < 3 && stream->Read(&streamed)) {
      EXPECT_EQ(streamed.SerializeAsString(), reply.SerializeAsString()) << received;
      ++received;
    }
    EXPECT_EQ(received, 2);
    EXPECT_TRUE(GrpcStatusIs(stream->Finish(), grpc::StatusCode::OK, ""));
  }
}

TEST_F(VariantsServiceTest, DeepSeekConfigRotatesTheWholeMlaHeadsLastFeatures) {
  const v1::RopeConfig config = FromFixture("DeepSeek-V2-Lite-Chat", 4096, v1::INTERLEAVED);
  v1::ResolvedConfig resolved;
  ASSERT_TRUE(GrpcStatusIs(Resolve(config, &resolved), grpc::StatusCode::OK, ""));
  EXPECT_EQ(resolved.hf_layout(), v1::INTERLEAVED);
  EXPECT_EQ(resolved.whole_head_dim(), 192u);
  EXPECT_EQ(resolved.max_position_embeddings(), 163840u);
  EXPECT_EQ(resolved.layer_type(), "full_attention");
  EXPECT_FALSE(resolved.no_rope());
  EXPECT_EQ(resolved.config().head_dim(), 64u);
  EXPECT_EQ(resolved.config().rotary_dim(), 64u);
  ASSERT_EQ(resolved.config().scaling_case(), v1::RopeConfig::kYarn);

  // The whole head [.., 192] and its rope part [.., 64] alone.
  v1::RotateRequest whole = MakeRotateRequest(1, 3, 2, 192, 4096, 0, 41);
  *whole.mutable_config() = config;
  for (int64_t p : {3, 4000, 17}) whole.add_positions(p);
  const std::vector<float> in = Floats(whole.q().data());
  v1::RotateRequest part = whole;
  std::vector<float> rope_part;
  for (size_t i = 0; i < in.size(); ++i) {
    if (i % 192 >= 128) rope_part.push_back(in[i]);
  }
  part.mutable_q()->set_data(std::string(reinterpret_cast<const char*>(rope_part.data()),
                                         rope_part.size() * sizeof(float)));
  part.mutable_q()->set_shape(3, 64);
  v1::RotateResponse whole_reply, part_reply;
  ASSERT_TRUE(GrpcStatusIs(Rotate(whole, &whole_reply), grpc::StatusCode::OK, ""));
  ASSERT_TRUE(GrpcStatusIs(Rotate(part, &part_reply), grpc::StatusCode::OK, ""));
  const std::vector<float> got = Floats(whole_reply.q().data());
  const std::vector<float> rotated_part = Floats(part_reply.q().data());
  ASSERT_EQ(got.size(), in.size());
  size_t next = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (i % 192 < 128) {
      ASSERT_EQ(std::memcmp(&got[i], &in[i], sizeof(float)), 0) << "nope feature " << i;
    } else {
      ASSERT_EQ(std::memcmp(&got[i], &rotated_part[next++], sizeof(float)), 0)
          << "rope feature " << i;
    }
  }
  // A width that is neither is refused, naming both.
  v1::RotateRequest odd = MakeRotateRequest(1, 1, 1, 96, 4096);
  *odd.mutable_config() = config;
  v1::RotateResponse refused;
  EXPECT_TRUE(GrpcStatusIs(Rotate(odd, &refused), grpc::StatusCode::INVALID_ARGUMENT, "192"));
}

TEST_F(VariantsServiceTest, Llama4NopeLayerByIndex) {
  v1::RopeConfig config = FromFixture("Llama-4-Scout-17B-16E-Instruct", 65536, v1::INTERLEAVED);
  config.set_hf_layer_index(3);
  v1::ResolvedConfig resolved;
  ASSERT_TRUE(GrpcStatusIs(Resolve(config, &resolved), grpc::StatusCode::OK, ""));
  EXPECT_TRUE(resolved.no_rope());
  EXPECT_EQ(resolved.inv_freq_size(), 0);
  EXPECT_EQ(resolved.layer_type(), "full_attention");
  EXPECT_EQ(resolved.hf_layout(), v1::INTERLEAVED);
  ASSERT_TRUE(resolved.config().has_no_rope());
  EXPECT_EQ(resolved.config().no_rope().floor_scale(), 8192);
  EXPECT_EQ(resolved.config().no_rope().attn_scale(), 0.1);

  // Layer 0 rotates (transformers: chunked_attention).
  v1::RopeConfig rope_layer = config;
  rope_layer.set_hf_layer_index(0);
  v1::ResolvedConfig rotating;
  ASSERT_TRUE(GrpcStatusIs(Resolve(rope_layer, &rotating), grpc::StatusCode::OK, ""));
  EXPECT_FALSE(rotating.no_rope());
  EXPECT_EQ(rotating.layer_type(), "chunked_attention");
  EXPECT_EQ(rotating.inv_freq_size(), 64);
  rope_layer.set_hf_layer_index(48);
  EXPECT_TRUE(GrpcStatusIs(Resolve(rope_layer, &rotating), grpc::StatusCode::INVALID_ARGUMENT,
                           "hf_layer_index is 48: hf_config_json has 48 decoder layers"));

  // Rotate: the identity.
  v1::RotateRequest rotate = MakeRotateRequest(1, 2, 2, 128, 65536, 30000, 51);
  *rotate.mutable_k() = MakeRotateRequest(1, 2, 1, 128, 65536, 30000, 52).q();
  *rotate.mutable_config() = config;
  v1::RotateResponse rotated;
  ASSERT_TRUE(GrpcStatusIs(Rotate(rotate, &rotated), grpc::StatusCode::OK, ""));
  EXPECT_EQ(rotated.q().data(), rotate.q().data());
  EXPECT_EQ(rotated.k().data(), rotate.k().data());

  // GetTable: no table.
  v1::GetTableRequest table;
  *table.mutable_config() = config;
  table.set_count(4);
  v1::GetTableResponse rows;
  EXPECT_TRUE(GrpcStatusIs(Table(table, &rows), grpc::StatusCode::INVALID_ARGUMENT,
                           "no cos/sin table"));

  // AttentionScores: queries scaled by the temperature, nothing rotated; the
  // explicit form (ResolveConfig's) gives the same bytes.
  constexpr int64_t kSq = 3, kSk = 4, kD = 128, kQStart = 20000;
  v1::AttentionScoresRequest scores;
  *scores.mutable_config() = config;
  *scores.mutable_q() = MakeRotateRequest(1, kSq, 2, kD, 65536, 0, 53).q();
  *scores.mutable_k() = MakeRotateRequest(1, kSk, 1, kD, 65536, 0, 54).q();
  scores.set_q_start_pos(kQStart);
  scores.set_k_start_pos(kQStart - 1);
  v1::AttentionScoresResponse by_index, by_fields;
  ASSERT_TRUE(GrpcStatusIs(Scores(scores, &by_index), grpc::StatusCode::OK, ""));
  *scores.mutable_config() = resolved.config();
  ASSERT_TRUE(GrpcStatusIs(Scores(scores, &by_fields), grpc::StatusCode::OK, ""));
  EXPECT_EQ(by_index.SerializeAsString(), by_fields.SerializeAsString());
  const std::vector<float> q = Floats(scores.q().data());
  const std::vector<float> k = Floats(scores.k().data());
  const std::vector<float> got = Floats(by_index.scores().data());
  ASSERT_EQ(got.size(), static_cast<size_t>(2 * kSq * kSk));
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t i = 0; i < kSq; ++i) {
      const double t =
          std::log(std::floor((kQStart + i + 1.0) / 8192.0) + 1.0) * 0.1 + 1.0;
      for (int64_t j = 0; j < kSk; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < kD; ++d) {
          dot += q[(i * 2 + h) * kD + d] * t * k[j * kD + d];
        }
        const double want = dot / std::sqrt(static_cast<double>(kD));
        EXPECT_NEAR(got[(h * kSq + i) * kSk + j], want, 2e-6 * (1 + std::abs(want)))
            << h << " " << i << " " << j;
      }
    }
  }
}

TEST_F(VariantsServiceTest, DeepSeekV4RopeGroupsByTypeOrIndex) {
  v1::RopeConfig config = FromFixture("DeepSeek-V4-Flash", 4096, v1::INTERLEAVED);
  v1::ResolvedConfig unset;
  EXPECT_TRUE(GrpcStatusIs(Resolve(config, &unset), grpc::StatusCode::INVALID_ARGUMENT,
                           "DeepSeek-V4 has two rope groups"));
  std::string keys[2][2];
  for (int g = 0; g < 2; ++g) {
    v1::RopeConfig by_type = config;
    by_type.set_hf_layer_type(g == 0 ? "main" : "compress");
    v1::RopeConfig by_index = config;
    by_index.set_hf_layer_index(g == 0 ? 0 : 2);  // compress_ratios 0, 4
    v1::ResolvedConfig a, b;
    ASSERT_TRUE(GrpcStatusIs(Resolve(by_type, &a), grpc::StatusCode::OK, ""));
    ASSERT_TRUE(GrpcStatusIs(Resolve(by_index, &b), grpc::StatusCode::OK, ""));
    EXPECT_EQ(a.table_key(), b.table_key());
    EXPECT_EQ(a.whole_head_dim(), 512u);
    EXPECT_EQ(a.config().rotary_dim(), 64u);
    EXPECT_EQ(a.attention_factor(), 1.0);
    keys[g][0] = a.table_key();
    keys[g][1] = a.config().has_yarn() ? "yarn" : "plain";
    EXPECT_EQ(a.config().theta(), g == 0 ? 10000 : 160000);
  }
  EXPECT_NE(keys[0][0], keys[1][0]);
  EXPECT_EQ(keys[0][1], "plain");
  EXPECT_EQ(keys[1][1], "yarn");
}

// Each new fixture's explicit form (ResolveConfig's) rotates bit-identically
// to its config.json, and says what the models need.
TEST_F(VariantsServiceTest, PublishedConfigsAndTheirExplicitFormsAgree) {
  struct Case {
    const char* fixture;
    v1::Layout layout;
    uint32_t head_dim;     // the tensor's
    uint32_t rotary_dim;   // ResolveConfig's
    bool mrope;
  };
  for (const Case& c : std::vector<Case>{{"Hunyuan-7B-Instruct", v1::HALF, 128, 128, false},
                                         {"Kimi-K2-Instruct", v1::INTERLEAVED, 64, 64, false},
                                         {"ERNIE-4.5-VL-28B-A3B-PT", v1::INTERLEAVED, 128, 128, true},
                                         {"pythia-2.8b", v1::HALF, 80, 20, false}}) {
    const v1::RopeConfig config = FromFixture(c.fixture, 8192, c.layout);
    v1::ResolvedConfig resolved;
    ASSERT_TRUE(GrpcStatusIs(Resolve(config, &resolved), grpc::StatusCode::OK, "")) << c.fixture;
    EXPECT_EQ(resolved.hf_layout(), c.layout) << c.fixture;
    EXPECT_EQ(resolved.config().rotary_dim(), c.rotary_dim) << c.fixture;
    v1::RotateRequest rotate = MakeRotateRequest(1, 2, 2, c.head_dim, 8192, 0, 61);
    const std::vector<int64_t> positions =
        c.mrope ? std::vector<int64_t>{7, 8, 7, 9, 7, 10} : std::vector<int64_t>{7, 8000};
    for (int64_t p : positions) rotate.add_positions(p);
    std::string replies[2];
    int i = 0;
    for (const v1::RopeConfig& form : {config, resolved.config()}) {
      *rotate.mutable_config() = form;
      v1::RotateResponse reply;
      ASSERT_TRUE(GrpcStatusIs(Rotate(rotate, &reply), grpc::StatusCode::OK, "")) << c.fixture;
      replies[i++] = reply.SerializeAsString();
    }
    EXPECT_EQ(replies[0], replies[1]) << c.fixture;
  }
}

}  // namespace
}  // namespace test
}  // namespace rope
