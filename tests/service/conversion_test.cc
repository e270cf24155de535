// ToGrpcStatus and the proto -> engine conversions, without a server.
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "core/proto_engine/request_conversion.h"
#include "server/service/status_conversion.h"
#include "tests/service/service_fixture.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/test_util.h"

namespace rope {
namespace test {
namespace {

TEST(ToGrpcStatusTest, MapsEveryCanonicalCodeOneToOne) {
  for (int code = 1; code <= 16; ++code) {
    const grpc::Status status =
        ToGrpcStatus(absl::Status(static_cast<absl::StatusCode>(code), "why"));
    EXPECT_EQ(static_cast<int>(status.error_code()), code);
    EXPECT_EQ(status.error_message(), "why");
  }
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

TEST(ToGrpcStatusTest, TruncatesLongMessagesOnACharacterBoundary) {
  // 2-byte UTF-8 characters: a cut at an odd byte would split one.
  std::string message;
  for (int i = 0; i < 2000; ++i) message += "\xC3\xA9";
  const grpc::Status status = ToGrpcStatus(absl::InvalidArgumentError(message));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_LE(status.error_message().size(), kMaxGrpcStatusMessageBytes);
  const std::string kept = status.error_message().substr(
      0, status.error_message().size() - std::string("... (truncated)").size());
  EXPECT_EQ(kept.size() % 2, 0u);
  EXPECT_EQ(kept, message.substr(0, kept.size()));
}

TEST(RequestConversionTest, DTypeUnspecifiedAndUnknownValuesNameTheField) {
  EXPECT_TRUE(StatusIs(DTypeFromProto(0, "v.dtype").status(),
                       absl::StatusCode::kInvalidArgument, "v.dtype is DTYPE_UNSPECIFIED (0)"));
  EXPECT_TRUE(StatusIs(DTypeFromProto(-3, "q.dtype").status(),
                       absl::StatusCode::kInvalidArgument, "q.dtype is -3"));
  EXPECT_EQ(*DTypeFromProto(v1::BFLOAT16, "q.dtype"), DType::kBFloat16);
  EXPECT_EQ(DTypeToProto(DType::kFloat16), v1::FLOAT16);
}

TEST(RequestConversionTest, LayoutUnspecifiedMeansInterleaved) {
  EXPECT_EQ(*LayoutFromProto(v1::LAYOUT_UNSPECIFIED, "config.layout"), Layout::kInterleaved);
  EXPECT_EQ(*LayoutFromProto(v1::HALF, "config.layout"), Layout::kHalf);
  EXPECT_TRUE(StatusIs(LayoutFromProto(3, "config.layout").status(),
                       absl::StatusCode::kInvalidArgument, "config.layout is 3"));
}

TEST(RequestConversionTest, ScalingParametersAreCopiedAsSent) {
  v1::RopeConfig config = MakeConfig(8, 16);
  auto* yarn = config.mutable_yarn();
  yarn->set_factor(4);
  yarn->set_original_max_position_embeddings(4096);
  yarn->set_beta_fast(24);
  yarn->set_beta_slow(2);
  yarn->set_mscale(0.5);
  yarn->set_mscale_all_dim(0.25);
  yarn->set_attention_factor(1.5);
  absl::StatusOr<RopeConfig> converted = ConfigFromProto(config);
  ASSERT_TRUE(converted.ok()) << converted.status();
  const auto* y = std::get_if<YarnScaling>(&converted->scaling);
  ASSERT_NE(y, nullptr);
  EXPECT_EQ(y->factor, 4);
  EXPECT_EQ(y->original_max_position_embeddings, 4096u);
  EXPECT_EQ(y->beta_fast, 24);
  EXPECT_EQ(y->beta_slow, 2);
  EXPECT_EQ(y->mscale, 0.5);
  EXPECT_EQ(y->mscale_all_dim, 0.25);
  EXPECT_EQ(y->attention_factor, 1.5);

  config.mutable_longrope()->add_short_factor(1.5);
  config.mutable_longrope()->add_long_factor(2.5);
  config.mutable_longrope()->set_original_max_position_embeddings(64);
  converted = ConfigFromProto(config);
  ASSERT_TRUE(converted.ok()) << converted.status();
  const auto* l = std::get_if<LongRopeScaling>(&converted->scaling);
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(l->short_factor, std::vector<double>{1.5});
  EXPECT_EQ(l->long_factor, std::vector<double>{2.5});

  config.mutable_dynamic_ntk()->set_factor(2);
  converted = ConfigFromProto(config);
  ASSERT_TRUE(converted.ok());
  EXPECT_EQ(std::get<DynamicNtkScaling>(converted->scaling).factor, 2);
  config.mutable_llama3()->set_factor(8);
  EXPECT_EQ(std::get<Llama3Scaling>(ConfigFromProto(config)->scaling).factor, 8);
  config.mutable_linear()->set_factor(3);
  EXPECT_EQ(std::get<LinearScaling>(ConfigFromProto(config)->scaling).factor, 3);
  config.clear_linear();
  EXPECT_TRUE(std::holds_alternative<NoScaling>(ConfigFromProto(config)->scaling));
}

TEST(RequestConversionTest, NewConfigFieldsAreCopiedAndAbsentOnesKeepTheirOldMeaning) {
  v1::RopeConfig proto = MakeConfig(128, 4096);
  proto.mutable_yarn()->set_factor(32);
  absl::StatusOr<RopeConfig> config = ConfigFromProto(proto);
  ASSERT_TRUE(config.ok());
  EXPECT_TRUE(std::get<YarnScaling>(config->scaling).truncate);  // absent: true
  EXPECT_FALSE(config->mrope.enabled());
  EXPECT_TRUE(config->hf_config_json.empty());
  proto.mutable_yarn()->set_truncate(false);
  proto.mutable_mrope()->add_section(16);
  proto.mutable_mrope()->add_section(24);
  proto.mutable_mrope()->add_section(24);
  proto.mutable_mrope()->set_interleaved(true);
  proto.set_hf_layer_type("sliding_attention");
  config = ConfigFromProto(proto);
  ASSERT_TRUE(config.ok());
  EXPECT_FALSE(std::get<YarnScaling>(config->scaling).truncate);
  EXPECT_EQ(config->mrope.section, (std::vector<uint32_t>{16, 24, 24}));
  EXPECT_TRUE(config->mrope.interleaved);
  EXPECT_EQ(config->hf_layer_type, "sliding_attention");
  proto.mutable_mrope()->clear_section();
  EXPECT_TRUE(StatusIs(ConfigFromProto(proto).status(), absl::StatusCode::kInvalidArgument,
                       "config.mrope is set with no section"));
}

TEST(RequestConversionTest, ConfigToProtoRoundTripsEveryScaling) {
  LongRopeScaling longrope;
  longrope.short_factor = {1, 2};
  longrope.long_factor = {3, 4};
  longrope.original_max_position_embeddings = 16;
  longrope.attention_factor = 1.5;
  longrope.max_position_embeddings = 64;
  YarnScaling yarn;
  yarn.factor = 4;
  yarn.original_max_position_embeddings = 32;
  yarn.beta_fast = 16;
  yarn.beta_slow = 2;
  yarn.mscale = 0.5;
  yarn.mscale_all_dim = 0.25;
  yarn.attention_factor = 1.1;
  yarn.truncate = false;
  DeepseekYarnScaling deepseek;
  deepseek.factor = 40;
  deepseek.original_max_position_embeddings = 4096;
  deepseek.beta_fast = 30;
  deepseek.beta_slow = 2;
  deepseek.mscale = 0;  // explicit 0s survive (they are not vLLM's defaults)
  deepseek.mscale_all_dim = 0.707;
  deepseek.attn_factor = 1.25;
  deepseek.extrapolation_factor = 0.5;
  for (const ScalingConfig& scaling :
       std::vector<ScalingConfig>{NoScaling{}, LinearScaling{2}, DynamicNtkScaling{2, 16}, yarn,
                                  Llama3Scaling{16, 1, 1, 8192}, longrope,
                                  DynamicNtkAlphaScaling{1000}, NtkScaling{4, false, 0},
                                  NtkScaling{4, true, 0}, NtkScaling{4, true, 0.75}, deepseek}) {
    RopeConfig config;
    config.theta = 500000;
    config.head_dim = 4;
    config.rotary_dim = 4;
    config.max_len = 64;
    config.layout = Layout::kHalf;
    config.scaling = scaling;
    config.mrope.section = {1, 0, 1};
    absl::StatusOr<RopeConfig> back = ConfigFromProto(ConfigToProto(config));
    ASSERT_TRUE(back.ok());
    EXPECT_TRUE(back->scaling == config.scaling) << ScalingName(scaling);
    EXPECT_EQ(back->theta, config.theta);
    EXPECT_EQ(back->rotary_dim, config.rotary_dim);
    EXPECT_EQ(back->layout, config.layout);
    EXPECT_TRUE(back->mrope == config.mrope);
  }
}

TEST(RequestConversionTest, TheServingEnginesFieldsRoundTrip) {
  RopeConfig config;
  config.head_dim = 24;
  config.rotary_dim = 8;
  config.rotary_offset = 16;
  config.max_len = 64;
  config.no_rope.enabled = true;
  config.no_rope.floor_scale = 8192;
  config.no_rope.attn_scale = 0.1;
  config.mrope.section = {2, 1, 1};
  config.mrope.ernie_3d = true;
  absl::StatusOr<RopeConfig> back = ConfigFromProto(ConfigToProto(config));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->rotary_offset, 16u);
  EXPECT_TRUE(back->no_rope == config.no_rope);
  EXPECT_TRUE(back->mrope == config.mrope);
  EXPECT_FALSE(back->hf_layer_index.has_value());
  // Absent, each keeps today's meaning; hf_layer_index 0 is a layer.
  v1::RopeConfig proto = MakeConfig(8, 16);
  absl::StatusOr<RopeConfig> plain = ConfigFromProto(proto);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->rotary_offset, 0u);
  EXPECT_FALSE(plain->no_rope.enabled);
  EXPECT_FALSE(plain->hf_layer_index.has_value());
  proto.set_hf_layer_index(0);
  proto.mutable_no_rope();  // present, zero fields: NoPE without tuning
  plain = ConfigFromProto(proto);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->hf_layer_index, std::optional<uint32_t>(0));
  EXPECT_TRUE(plain->no_rope.enabled);
  EXPECT_FALSE(plain->no_rope.tuned());
}

TEST(RequestConversionTest, Float8OutputsAndTheirScales) {
  v1::RotateRequest request = MakeRotateRequest(1, 2, 2, 8);
  *request.mutable_k() = request.q();
  absl::StatusOr<RotateParams> params = RotateParamsFromProto(&request);
  ASSERT_TRUE(params.ok());
  EXPECT_FALSE(params->output_dtype.has_value());  // unset: in place
  EXPECT_EQ(params->q_output_scale, 1.0);
  request.set_output_dtype(v1::FLOAT8_E4M3FN);
  request.set_output_scale(0.5);  // k's 0: q's
  params = RotateParamsFromProto(&request);
  ASSERT_TRUE(params.ok());
  EXPECT_EQ(params->output_dtype, std::optional<DType>(DType::kFloat8E4M3));
  EXPECT_EQ(params->q_output_scale, 0.5);
  EXPECT_EQ(params->k_output_scale, 0.5);
  request.set_k_output_scale(4);
  params = RotateParamsFromProto(&request);
  ASSERT_TRUE(params.ok());
  EXPECT_EQ(params->k_output_scale, 4);
  EXPECT_EQ(*DTypeFromProto(v1::FLOAT8_E5M2, "output_dtype"), DType::kFloat8E5M2);
  EXPECT_EQ(DTypeToProto(DType::kFloat8E4M3), v1::FLOAT8_E4M3FN);
  request.mutable_k()->mutable_shm()->set_region("r");
  EXPECT_TRUE(StatusIs(RotateParamsFromProto(&request).status(),
                       absl::StatusCode::kInvalidArgument,
                       "output_dtype is FLOAT8_E4M3FN with k.shm"));
}

TEST(RequestConversionTest, RotateParamsPointIntoTheRequestsOwnBytes) {
  v1::RotateRequest request = MakeRotateRequest(1, 2, 2, 8, 64, 3);
  *request.mutable_k() = request.q();
  request.add_positions(5);
  request.add_positions(6);
  request.set_inverse(true);
  absl::StatusOr<RotateParams> params = RotateParamsFromProto(&request);
  ASSERT_TRUE(params.ok()) << params.status();
  EXPECT_EQ(params->q.data, request.q().data().data());  // in place: no copy
  EXPECT_EQ(params->k.data, request.k().data().data());
  EXPECT_EQ(params->q.byte_size, request.q().data().size());
  EXPECT_EQ(params->q.shape, (std::vector<int64_t>{1, 2, 2, 8}));
  EXPECT_EQ(params->positions, (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(params->start_pos, 3);
  EXPECT_TRUE(params->inverse);
  EXPECT_EQ(params->config.head_dim, 8u);
  EXPECT_EQ(params->config.max_len, 64u);
}

TEST(RequestConversionTest, AbsentKLeavesTheViewEmpty) {
  v1::RotateRequest request = MakeRotateRequest(1, 2, 2, 8);
  absl::StatusOr<RotateParams> params = RotateParamsFromProto(&request);
  ASSERT_TRUE(params.ok()) << params.status();
  EXPECT_EQ(params->k.data, nullptr);
  EXPECT_TRUE(params->k.shape.empty());
}

TEST(RequestConversionTest, AttentionFieldsAreCopiedAndAbsentOnesMeanNone) {
  v1::AttentionScoresRequest request;
  *request.mutable_config() = MakeConfig(8, 64);
  *request.mutable_q() = MakeRotateRequest(1, 1, 1, 8).q();
  *request.mutable_k() = MakeRotateRequest(1, 2, 1, 8).q();
  absl::StatusOr<AttentionParams> plain = AttentionParamsFromProto(request);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_TRUE(plain->results.empty());
  EXPECT_FALSE(plain->window_left.has_value());
  EXPECT_FALSE(plain->window_right.has_value());
  EXPECT_EQ(plain->chunk_size, 0);
  EXPECT_TRUE(plain->q_positions.empty() && plain->k_positions.empty());
  EXPECT_EQ(plain->softcap, 0.0);
  EXPECT_TRUE(plain->sinks.empty() && plain->alibi_slopes.empty());
  EXPECT_EQ(plain->top_k, 0);
  EXPECT_EQ(plain->score_rows_start, 0);
  EXPECT_EQ(plain->score_rows_count, 0);

  request.add_results(v1::LSE);
  request.add_results(v1::TOP_K);
  request.add_results(static_cast<v1::AttentionResult>(42));  // refused by the engine
  request.set_window_left(0);  // set to 0: only the query's own position
  request.set_window_right(7);
  request.set_chunk_size(8192);
  request.add_q_positions(5);
  request.add_k_positions(2);
  request.add_k_positions(3);
  request.set_softcap(50);
  request.add_sinks(-1.5f);
  request.add_alibi_slopes(0.25f);
  request.set_top_k(9);
  request.set_score_rows_start(3);
  request.set_score_rows_count(4);
  absl::StatusOr<AttentionParams> params = AttentionParamsFromProto(request);
  ASSERT_TRUE(params.ok()) << params.status();
  EXPECT_EQ(params->results, (std::vector<AttentionResult>{AttentionResult::kLse,
                                                           AttentionResult::kTopK,
                                                           static_cast<AttentionResult>(42)}));
  EXPECT_EQ(params->window_left, std::optional<int64_t>(0));
  EXPECT_EQ(params->window_right, std::optional<int64_t>(7));
  EXPECT_EQ(params->chunk_size, 8192);
  EXPECT_EQ(params->q_positions, (std::vector<int64_t>{5}));
  EXPECT_EQ(params->k_positions, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(params->softcap, 50.0);
  EXPECT_EQ(params->sinks, (std::vector<float>{-1.5f}));
  EXPECT_EQ(params->alibi_slopes, (std::vector<float>{0.25f}));
  EXPECT_EQ(params->top_k, 9);
  EXPECT_EQ(params->score_rows_start, 3);
  EXPECT_EQ(params->score_rows_count, 4);
}

TEST(RequestConversionTest, Int32IsAReplyOnlyDType) {
  EXPECT_TRUE(StatusIs(DTypeFromProto(v1::INT32, "q.dtype").status(),
                       absl::StatusCode::kInvalidArgument,
                       "q.dtype is INT32 (4): a reply-only type"));
}

}  // namespace
}  // namespace test
}  // namespace rope
