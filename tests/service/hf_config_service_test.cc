// config.json through a real server: ResolveConfig, and every RPC given
// RopeConfig.hf_config_json replying bit-identically to the same request
// with the explicit fields (the existing scaling variants, and the published
// configs of tests/fixtures/hf_configs with their M-RoPE positions).
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/support/grpc_test_util.h"
#include "tests/service/hf_fixtures.h"
#include "tests/service/service_fixture.h"
#include "tests/unit/reference_scaling.h"

namespace rope {
namespace test {
namespace {

std::string Fixture(const std::string& name) { return HfConfigFixture(name); }

const char* const kFixtures[] = {"Llama-3.1-8B-Instruct", "Llama-4-Scout-17B-16E-Instruct",
                                 "gemma-3-12b-it",        "DeepSeek-V3",
                                 "Phi-4-mini-instruct",   "gpt-oss-20b",
                                 "Qwen3-8B",              "Qwen3-8B-yarn",
                                 "Qwen2-VL-7B-Instruct",  "Qwen3-VL-8B-Instruct"};

class HfConfigServiceTest : public ServiceTest {
 protected:

  // Rotate, GetTable (rows reaching past 4096, where LongRoPE switches
  // lists) and AttentionScores with `json_config` and with `explicit_config`:
  // the replies must be byte for byte the same. AttentionScores' scale 0 is
  // the model's softmax scale with a config.json (ResolvedConfig's
  // softmax_scale, e.g. DeepSeek's mscale correction): the explicit call
  // passes that value.
  void ExpectSameReplies(const std::string& what, const v1::RopeConfig& json_config,
                         const v1::RopeConfig& explicit_config, uint32_t head_dim, bool mrope) {
    v1::RotateRequest rotate = MakeRotateRequest(2, 3, 2, head_dim, json_config.max_len());
    *rotate.mutable_k() = MakeRotateRequest(2, 3, 1, head_dim, json_config.max_len(), 0, 9).q();
    const std::vector<int64_t> positions =
        mrope ? std::vector<int64_t>{5, 6, 7, 9000, 1, 2, 5, 6, 8, 9001, 1, 2, 5, 7, 7, 9002, 1, 2}
              : std::vector<int64_t>{5, 6, 7, 9000, 4095, 4096};
    for (int64_t p : positions) rotate.add_positions(p);
    v1::GetTableRequest table;
    table.set_start(4090);
    table.set_count(10);
    v1::AttentionScoresRequest scores;
    *scores.mutable_q() = rotate.q();
    *scores.mutable_k() = rotate.k();
    scores.set_q_start_pos(100);
    scores.set_k_start_pos(98);
    scores.set_causal(true);

    v1::ResolvedConfig resolved;
    ASSERT_TRUE(GrpcStatusIs(Resolve(json_config, &resolved), grpc::StatusCode::OK, "")) << what;
    ASSERT_GT(resolved.softmax_scale(), 0.0) << what;

    std::string replies[2][3];
    int i = 0;
    for (const v1::RopeConfig& config : {json_config, explicit_config}) {
      *rotate.mutable_config() = config;
      *table.mutable_config() = config;
      *scores.mutable_config() = config;
      scores.set_scale(i == 0 ? 0.0 : resolved.softmax_scale());
      v1::RotateResponse rotated;
      v1::GetTableResponse rows;
      v1::AttentionScoresResponse scored;
      ASSERT_TRUE(GrpcStatusIs(Rotate(rotate, &rotated), grpc::StatusCode::OK, "")) << what;
      ASSERT_TRUE(GrpcStatusIs(Table(table, &rows), grpc::StatusCode::OK, "")) << what;
      ASSERT_TRUE(GrpcStatusIs(Scores(scores, &scored), grpc::StatusCode::OK, "")) << what;
      replies[i][0] = rotated.SerializeAsString();
      replies[i][1] = rows.SerializeAsString();
      replies[i][2] = scored.SerializeAsString();
      ++i;
    }
    EXPECT_EQ(replies[0][0], replies[1][0]) << what << ": Rotate";
    EXPECT_EQ(replies[0][1], replies[1][1]) << what << ": GetTable";
    EXPECT_EQ(replies[0][2], replies[1][2]) << what << ": AttentionScores";
  }
};

TEST_F(HfConfigServiceTest, ResolveConfigReportsWhatAConfigJsonBecomes) {
  v1::RopeConfig config;
  config.set_hf_config_json(Fixture("Llama-3.1-8B-Instruct"));
  config.set_max_len(8192);
  config.set_layout(v1::HALF);
  v1::ResolvedConfig resolved;
  ASSERT_TRUE(GrpcStatusIs(Resolve(config, &resolved), grpc::StatusCode::OK, ""));
  const v1::RopeConfig& c = resolved.config();
  EXPECT_EQ(c.theta(), 500000);
  EXPECT_EQ(c.head_dim(), 128u);
  EXPECT_EQ(c.rotary_dim(), 128u);
  EXPECT_EQ(c.max_len(), 8192u);
  EXPECT_EQ(c.layout(), v1::HALF);
  EXPECT_TRUE(c.hf_config_json().empty());
  ASSERT_EQ(c.scaling_case(), v1::RopeConfig::kLlama3);
  EXPECT_EQ(c.llama3().factor(), 8);
  EXPECT_EQ(c.llama3().low_freq_factor(), 1);
  EXPECT_EQ(c.llama3().high_freq_factor(), 4);
  EXPECT_EQ(c.llama3().original_max_position_embeddings(), 8192u);
  const std::vector<double> want =
      reference::Llama3InvFreqTransformers(500000, 128, 8, 1, 4, 8192);
  ASSERT_EQ(resolved.inv_freq_size(), 64);
  for (int i = 0; i < 64; ++i) {
    EXPECT_NEAR(resolved.inv_freq(i), want[i], 1e-14 * want[i]) << i;
  }
  EXPECT_EQ(resolved.attention_factor(), 1);
  EXPECT_EQ(resolved.table_key(),
            "theta=500000 rotary_dim=128 max_len=8192 scaling=llama3(factor=8 low_freq_factor=1 "
            "high_freq_factor=4 original_max_position_embeddings=8192)");

  // The explicit form resolves to the same key.
  v1::ResolvedConfig again;
  ASSERT_TRUE(GrpcStatusIs(Resolve(c, &again), grpc::StatusCode::OK, ""));
  EXPECT_EQ(again.table_key(), resolved.table_key());
  EXPECT_EQ(again.config().SerializeAsString(), c.SerializeAsString());
}

TEST_F(HfConfigServiceTest, ResolveConfigShowsYarnTruncateAndMrope) {
  v1::RopeConfig config;
  config.set_hf_config_json(Fixture("gpt-oss-20b"));
  config.set_max_len(4096);
  v1::ResolvedConfig resolved;
  ASSERT_TRUE(GrpcStatusIs(Resolve(config, &resolved), grpc::StatusCode::OK, ""));
  ASSERT_EQ(resolved.config().scaling_case(), v1::RopeConfig::kYarn);
  EXPECT_TRUE(resolved.config().yarn().has_truncate());
  EXPECT_FALSE(resolved.config().yarn().truncate());
  EXPECT_NE(resolved.table_key().find("truncate=false"), std::string::npos);

  config.set_hf_config_json(Fixture("Qwen3-VL-8B-Instruct"));
  ASSERT_TRUE(GrpcStatusIs(Resolve(config, &resolved), grpc::StatusCode::OK, ""));
  ASSERT_TRUE(resolved.config().has_mrope());
  EXPECT_TRUE(resolved.config().mrope().interleaved());
  EXPECT_EQ(std::vector<uint32_t>(resolved.config().mrope().section().begin(),
                                  resolved.config().mrope().section().end()),
            (std::vector<uint32_t>{24, 20, 20}));
}

TEST_F(HfConfigServiceTest, ResolveConfigRefusesWithTheConfigErrors) {
  v1::RopeConfig config;
  config.set_hf_config_json(R"({"rope_theta": 10000, "rope_scaling": {"rope_type": "su"}})");
  config.set_head_dim(64);
  config.set_max_len(64);
  v1::ResolvedConfig resolved;
  EXPECT_TRUE(GrpcStatusIs(Resolve(config, &resolved), grpc::StatusCode::INVALID_ARGUMENT,
                           "hf_config_json: rope_scaling.rope_type is \"su\": not supported"));
  config.set_hf_config_json("{\"rope_theta\": ");
  EXPECT_TRUE(GrpcStatusIs(Resolve(config, &resolved), grpc::StatusCode::INVALID_ARGUMENT,
                           "hf_config_json is not valid JSON"));
  config.set_hf_config_json(R"({"rope_theta": 10000})");
  config.set_max_len(0);
  EXPECT_TRUE(GrpcStatusIs(Resolve(config, &resolved), grpc::StatusCode::INVALID_ARGUMENT,
                           "config.max_len is 0"));
  v1::RopeConfig explicit_config = MakeConfig(64, 1u << 30);
  EXPECT_TRUE(GrpcStatusIs(Resolve(explicit_config, &resolved),
                           grpc::StatusCode::RESOURCE_EXHAUSTED, "over the server's max_len cap"));
  // No tensor bounds head_dim in ResolveConfig: the head_dim cap does.
  explicit_config = MakeConfig(0xFFFFFFFEu, 64);
  EXPECT_TRUE(GrpcStatusIs(Resolve(explicit_config, &resolved),
                           grpc::StatusCode::INVALID_ARGUMENT,
                           "config.head_dim is 4294967294: at most 8192"));
}

// Every scaling the explicit fields can express, as a config.json.
TEST_F(HfConfigServiceTest, EveryScalingAsFieldsAndAsConfigJsonRepliesIdentically) {
  constexpr uint32_t kHeadDim = 16, kMaxLen = 10240;
  struct Case {
    std::string name;
    std::string rope_scaling;  // the config.json's
    v1::RopeConfig explicit_config;
  };
  std::vector<Case> cases;
  auto base = [] {
    v1::RopeConfig c = MakeConfig(kHeadDim, kMaxLen, v1::HALF, 0, 10000);
    return c;
  };
  {
    Case c{"none", "null", base()};
    cases.push_back(c);
  }
  {
    Case c{"linear", R"({"rope_type": "linear", "factor": 4.0})", base()};
    c.explicit_config.mutable_linear()->set_factor(4);
    cases.push_back(c);
  }
  {
    Case c{"dynamic", R"({"rope_type": "dynamic", "factor": 2.0})", base()};
    c.explicit_config.mutable_dynamic_ntk()->set_factor(2);
    c.explicit_config.mutable_dynamic_ntk()->set_original_max_position_embeddings(4096);
    cases.push_back(c);
  }
  {
    Case c{"yarn", R"({"type": "yarn", "factor": 8, "original_max_position_embeddings": 512,
                       "beta_fast": 16, "mscale": 0.707, "mscale_all_dim": 1.0})",
           base()};
    auto* y = c.explicit_config.mutable_yarn();
    y->set_factor(8);
    y->set_original_max_position_embeddings(512);
    y->set_beta_fast(16);
    y->set_mscale(0.707);
    y->set_mscale_all_dim(1.0);
    cases.push_back(c);
  }
  {
    Case c{"llama3", R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 512})",
           base()};
    auto* l = c.explicit_config.mutable_llama3();
    l->set_factor(8);
    l->set_low_freq_factor(1);
    l->set_high_freq_factor(4);
    l->set_original_max_position_embeddings(512);
    cases.push_back(c);
  }
  {
    Case c{"longrope", R"({"type": "longrope", "short_factor": [1, 1.5, 2, 2, 3, 3, 4, 4],
                           "long_factor": [1, 2, 4, 8, 16, 16, 32, 48]})",
           base()};
    auto* l = c.explicit_config.mutable_longrope();
    for (double f : {1.0, 1.5, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0}) l->add_short_factor(f);
    for (double f : {1.0, 2.0, 4.0, 8.0, 16.0, 16.0, 32.0, 48.0}) l->add_long_factor(f);
    l->set_original_max_position_embeddings(4096);  // the config.json's top-level key
    l->set_max_position_embeddings(131072);
    cases.push_back(c);
  }
  for (const Case& c : cases) {
    v1::RopeConfig json_config;
    json_config.set_max_len(kMaxLen);
    json_config.set_layout(v1::HALF);
    json_config.set_hf_config_json(
        R"({"rope_theta": 10000, "hidden_size": 128, "num_attention_heads": 8,
            "max_position_embeddings": )" +
        std::string(c.name == "longrope" ? "131072, \"original_max_position_embeddings\": 4096"
                                         : "4096") +
        R"(, "rope_scaling": )" + c.rope_scaling + "}");
    ExpectSameReplies(c.name, json_config, c.explicit_config, kHeadDim, /*mrope=*/false);
  }
}

// Every published config, both layer types: the config.json and the
// explicit form ResolveConfig reports reply identically.
TEST_F(HfConfigServiceTest, PublishedConfigsAndTheirExplicitFormsReplyIdentically) {
  for (const char* name : kFixtures) {
    for (const char* layer : {"full_attention", "sliding_attention"}) {
      v1::RopeConfig json_config;
      json_config.set_hf_config_json(Fixture(name));
      json_config.set_hf_layer_type(layer);
      json_config.set_max_len(10240);
      json_config.set_layout(v1::HALF);
      v1::ResolvedConfig resolved;
      ASSERT_TRUE(GrpcStatusIs(Resolve(json_config, &resolved), grpc::StatusCode::OK, "")) << name;
      ExpectSameReplies(std::string(name) + " " + layer, json_config, resolved.config(),
                        resolved.config().head_dim(), resolved.config().has_mrope());
    }
  }
}

TEST_F(HfConfigServiceTest, MropeWithEqualRowsRepliesAsPlainRope) {
  v1::RotateRequest plain = MakeRotateRequest(1, 4, 2, 128, 4096);
  for (int64_t p : {7, 300, 2, 4095}) plain.add_positions(p);
  v1::RotateRequest mrope = plain;
  mrope.clear_positions();
  for (int axis = 0; axis < 3; ++axis) {
    for (int64_t p : {7, 300, 2, 4095}) mrope.add_positions(p);
  }
  mrope.mutable_config()->mutable_mrope()->add_section(16);
  mrope.mutable_config()->mutable_mrope()->add_section(24);
  mrope.mutable_config()->mutable_mrope()->add_section(24);
  v1::RotateResponse want, got;
  ASSERT_TRUE(GrpcStatusIs(Rotate(plain, &want), grpc::StatusCode::OK, ""));
  ASSERT_TRUE(GrpcStatusIs(Rotate(mrope, &got), grpc::StatusCode::OK, ""));
  EXPECT_EQ(got.q().data(), want.q().data());
}

}  // namespace
}  // namespace test
}  // namespace rope
