// config.json -> RoPE (core/engine/hf_config.*) on the published configs of
// tests/fixtures/hf_configs: what each resolves to, its inverse frequencies,
// attention factor and table rows against tests/unit/reference_scaling.*
// (transformers' formulas in double, evaluated with the values the model
// card publishes), the explicit form giving bit-identical rotations, and
// every way a config.json can be refused.
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/engine/engine.h"
#include "core/engine/hf_config.h"
#include "core/engine/hf_config_cache.h"
#include "core/engine/interrupt.h"
#include "tests/unit/reference_scaling.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/test_util.h"

#ifndef ROPE_HF_CONFIGS_DIR
#error "ROPE_HF_CONFIGS_DIR must name tests/fixtures/hf_configs"
#endif

namespace rope {
namespace {

using test::StatusIs;

std::string Fixture(const std::string& name) {
  std::ifstream in(std::string(ROPE_HF_CONFIGS_DIR) + "/" + name + ".json");
  EXPECT_TRUE(in.good()) << name;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::unique_ptr<Engine> NewEngine(EngineLimits limits = EngineLimits()) {
  return std::make_unique<Engine>(NewCpuBackend(1).value(), limits);
}

RopeConfig FromJson(const std::string& json, const std::string& layer_type = "",
                    uint32_t max_len = 8192) {
  RopeConfig c;
  c.hf_config_json = json;
  c.hf_layer_type = layer_type;
  c.max_len = max_len;
  c.layout = Layout::kHalf;
  return c;
}

absl::StatusOr<ResolvedConfig> Resolve(const std::string& json, const std::string& layer_type = "",
                                       uint32_t max_len = 8192) {
  return NewEngine()->ResolveConfig(FromJson(json, layer_type, max_len));
}

void ExpectInvFreq(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-14 * std::abs(want[i])) << "inv_freq[" << i << "]";
  }
}

// Rows of the engine's table for `config` at a few positions against
// attention * cos/sin(pos * inv_freq) of the reference.
void ExpectTableRows(const RopeConfig& config, const std::vector<double>& inv_freq,
                     double attention, std::vector<int64_t> positions) {
  auto engine = NewEngine();
  for (int64_t pos : positions) {
    absl::StatusOr<TableSlice> slice = engine->GetTable(config, pos, 1);
    ASSERT_TRUE(slice.ok()) << slice.status();
    const RopeTable& table = *slice->table;
    ASSERT_EQ(table.half(), static_cast<int>(inv_freq.size()));
    for (size_t i = 0; i < inv_freq.size(); ++i) {
      const double angle = static_cast<double>(pos) * inv_freq[i];
      EXPECT_NEAR(table.cos_row(pos)[i], attention * std::cos(angle), 1.2e-7 * attention)
          << pos << " " << i;
      EXPECT_NEAR(table.sin_row(pos)[i], attention * std::sin(angle), 1.2e-7 * attention)
          << pos << " " << i;
    }
  }
}

// ---- The published configs ------------------------------------------------------------

TEST(HfConfigTest, Llama31_8BInstruct) {
  const std::string json = Fixture("Llama-3.1-8B-Instruct");
  auto r = Resolve(json);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->config.theta, 500000);
  EXPECT_EQ(r->config.head_dim, 128u);  // hidden_size 4096 / 32 heads
  EXPECT_EQ(r->config.rotary_dim, 128u);
  EXPECT_TRUE(r->config.scaling == ScalingConfig(Llama3Scaling{8, 1, 4, 8192}));
  const std::vector<double> want = reference::Llama3InvFreqTransformers(500000, 128, 8, 1, 4, 8192);
  ExpectInvFreq(r->inv_freq, want);
  EXPECT_EQ(r->attention_factor, 1.0);
  ExpectTableRows(FromJson(json), want, 1.0, {0, 1, 4095, 8191});
}

TEST(HfConfigTest, Llama4ScoutKeeps35AndDivides29Frequencies) {
  const std::string json = Fixture("Llama-4-Scout-17B-16E-Instruct");
  auto r = Resolve(json);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->config.head_dim, 128u);  // text_config.head_dim
  EXPECT_TRUE(r->config.scaling == ScalingConfig(Llama3Scaling{16, 1, 1, 8192}));
  const std::vector<double> want =
      reference::Llama3InvFreqTransformers(500000, 128, 16, 1, 1, 8192);
  ExpectInvFreq(r->inv_freq, want);
  const std::vector<double> plain = reference::DefaultInvFreq(500000, 128);
  int kept = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    kept += std::abs(r->inv_freq[i] - plain[i]) <= 1e-15 * plain[i];
  }
  EXPECT_EQ(kept, 35);
  ExpectTableRows(FromJson(json), want, 1.0, {0, 3, 8191});
}

TEST(HfConfigTest, Gemma3FullAttentionLayersUseClassDefaultsAndLinearScaling) {
  const std::string json = Fixture("gemma-3-12b-it");
  auto r = Resolve(json, "full_attention");
  ASSERT_TRUE(r.ok()) << r.status();
  // Gemma3TextConfig's defaults: head_dim 256 (not hidden 3840 / 16 = 240),
  // rope_theta 1e6.
  EXPECT_EQ(r->config.head_dim, 256u);
  EXPECT_EQ(r->config.theta, 1000000);
  EXPECT_TRUE(r->config.scaling == ScalingConfig(LinearScaling{8}));
  const std::vector<double> want = reference::LinearInvFreq(1000000, 256, 8);
  ExpectInvFreq(r->inv_freq, want);
  ExpectTableRows(FromJson(json, "full_attention"), want, 1.0, {0, 1000, 8191});
  // "" means full_attention.
  auto by_default = Resolve(json);
  ASSERT_TRUE(by_default.ok());
  EXPECT_EQ(by_default->key, r->key);
}

TEST(HfConfigTest, Gemma3SlidingLayersUseTheLocalBaseWithoutScaling) {
  const std::string json = Fixture("gemma-3-12b-it");
  auto r = Resolve(json, "sliding_attention");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->config.theta, 10000);  // rope_local_base_freq default
  EXPECT_EQ(r->config.head_dim, 256u);
  EXPECT_TRUE(std::holds_alternative<NoScaling>(r->config.scaling));
  const std::vector<double> want = reference::DefaultInvFreq(10000, 256);
  ExpectInvFreq(r->inv_freq, want);
  ExpectTableRows(FromJson(json, "sliding_attention"), want, 1.0, {0, 1023, 8191});
}

TEST(HfConfigTest, DeepSeekV3RotatesQkRopeHeadDimWithYarnMscale) {
  const std::string json = Fixture("DeepSeek-V3");
  auto r = Resolve(json, "", 16384);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->config.head_dim, 64u);  // qk_rope_head_dim, not 7168 / 128
  EXPECT_EQ(r->config.theta, 10000);
  const auto& yarn = std::get<YarnScaling>(r->config.scaling);
  EXPECT_EQ(yarn.factor, 40);
  EXPECT_EQ(yarn.original_max_position_embeddings, 4096u);
  const std::vector<double> want = reference::YarnInvFreq(10000, 64, 40, 4096, 32, 1);
  ExpectInvFreq(r->inv_freq, want);
  // mscale == mscale_all_dim == 1: get_mscale(40, 1) / get_mscale(40, 1).
  const double attention = reference::YarnAttentionFactor(40, 1.0, 1.0, 0);
  EXPECT_DOUBLE_EQ(attention, 1.0);
  EXPECT_DOUBLE_EQ(r->attention_factor, attention);
  ExpectTableRows(FromJson(json, "", 16384), want, attention, {0, 4096, 16383});
}

// The softmax scale the model's attention uses (transformers' `scaling`),
// which AttentionScores takes when its scale is 0.
TEST(HfConfigTest, SoftmaxScaleFollowsTheModelsAttention) {
  // DeepSeek-V3: qk_head_dim = 128 + 64, times yarn_get_mscale(40, 1)^2.
  auto deepseek = Resolve(Fixture("DeepSeek-V3"), "", 16384);
  ASSERT_TRUE(deepseek.ok()) << deepseek.status();
  const double mscale = 0.1 * 1.0 * std::log(40.0) + 1.0;
  EXPECT_NEAR(deepseek->softmax_scale, mscale * mscale / std::sqrt(192.0), 1e-15);
  // 1.87x what 1/sqrt(qk_head_dim) would be, and not 1/sqrt(64).
  EXPECT_NEAR(deepseek->softmax_scale * std::sqrt(192.0), 1.8739, 1e-4);
  // Gemma 3: query_pre_attn_scalar, by Gemma3TextConfig's default 256.
  for (const char* layer : {"full_attention", "sliding_attention"}) {
    auto gemma = Resolve(Fixture("gemma-3-12b-it"), layer);
    ASSERT_TRUE(gemma.ok()) << gemma.status();
    EXPECT_DOUBLE_EQ(gemma->softmax_scale, 1.0 / 16) << layer;
  }
  // Gemma 2 27B: query_pre_attn_scalar 144 with head_dim 128.
  auto gemma2 = Resolve(R"({"model_type": "gemma2", "head_dim": 128,
      "query_pre_attn_scalar": 144, "rope_theta": 10000})");
  ASSERT_TRUE(gemma2.ok()) << gemma2.status();
  EXPECT_DOUBLE_EQ(gemma2->softmax_scale, 1.0 / 12);
  // Everything else: head_dim^-0.5, as without a config.json.
  auto llama = Resolve(Fixture("Llama-3.1-8B-Instruct"));
  ASSERT_TRUE(llama.ok()) << llama.status();
  EXPECT_DOUBLE_EQ(llama->softmax_scale, 1.0 / std::sqrt(128.0));
  RopeConfig plain;
  plain.head_dim = 64;
  plain.max_len = 16;
  auto explicit_config = NewEngine()->ResolveConfig(plain);
  ASSERT_TRUE(explicit_config.ok());
  EXPECT_DOUBLE_EQ(explicit_config->softmax_scale, 0.125);
  // DeepSeek without a scaled rope: no mscale.
  auto unscaled = Resolve(R"({"qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
      "rope_theta": 10000})");
  ASSERT_TRUE(unscaled.ok()) << unscaled.status();
  EXPECT_DOUBLE_EQ(unscaled->softmax_scale, 1.0 / std::sqrt(192.0));
}

TEST(HfConfigTest, AttentionScaleZeroTakesTheModelsScale) {
  auto engine = NewEngine();
  RopeConfig config = FromJson(Fixture("gemma-3-12b-it"));
  std::vector<float> ones(256, 1.0f), twos(256, 0.5f);
  AttentionParams p;
  p.config = config;
  p.q = ConstTensorView(DType::kFloat32, {1, 1, 256}, ones.data(), 256 * sizeof(float));
  p.k = ConstTensorView(DType::kFloat32, {1, 1, 256}, twos.data(), 256 * sizeof(float));
  std::string by_default, explicit_scale;
  AttentionOutputs out;
  out.scores.bytes = &by_default;
  ASSERT_TRUE(engine->AttentionScores(p, &out).ok());
  p.scale = 1.0 / 16;
  out.scores.bytes = &explicit_scale;
  ASSERT_TRUE(engine->AttentionScores(p, &out).ok());
  EXPECT_EQ(by_default, explicit_scale);
  // DeepSeek: not 1/sqrt(64).
  p.config = FromJson(Fixture("DeepSeek-V3"), "", 64);
  p.q = ConstTensorView(DType::kFloat32, {1, 1, 64}, ones.data(), 64 * sizeof(float));
  p.k = ConstTensorView(DType::kFloat32, {1, 1, 64}, twos.data(), 64 * sizeof(float));
  p.scale = 0;
  out.scores.bytes = &by_default;
  ASSERT_TRUE(engine->AttentionScores(p, &out).ok());
  float got;
  std::memcpy(&got, by_default.data(), sizeof(float));
  const double mscale = 0.1 * std::log(40.0) + 1.0;
  EXPECT_NEAR(got, 32.0 * mscale * mscale / std::sqrt(192.0), 1e-5);
}

TEST(HfConfigTest, Phi4MiniLongRopeFollowsTransformers) {
  const std::string json = Fixture("Phi-4-mini-instruct");
  auto r = Resolve(json, "", 131072);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->config.head_dim, 128u);
  EXPECT_EQ(r->config.rotary_dim, 96u);  // partial_rotary_factor 0.75
  const auto& longrope = std::get<LongRopeScaling>(r->config.scaling);
  ASSERT_EQ(longrope.long_factor.size(), 48u);
  ASSERT_EQ(longrope.short_factor.size(), 48u);
  EXPECT_EQ(longrope.long_factor[1], 1.118320672);
  EXPECT_EQ(longrope.long_factor[47], 47.77);
  EXPECT_EQ(longrope.original_max_position_embeddings, 4096u);  // the top-level key
  EXPECT_EQ(longrope.max_position_embeddings, 131072u);
  // sqrt(1 + ln 32 / ln 4096), whatever the table length.
  const double attention = reference::LongRopeAttentionFactorFromConfig(131072, 4096);
  EXPECT_NEAR(attention, 1.190238, 5e-7);
  for (uint32_t max_len : {8192u, 131072u}) {
    auto at = Resolve(json, "", max_len);
    ASSERT_TRUE(at.ok());
    EXPECT_DOUBLE_EQ(at->attention_factor, attention) << max_len;
  }
  // A request at position 0 (ResolveConfig's) uses the short factors.
  const std::vector<double> short_want =
      reference::LongRopeInvFreq(10000, 96, longrope.short_factor);
  ExpectInvFreq(r->inv_freq, short_want);
  // Up to position 4095: short; from 4096 on: long.
  auto engine = NewEngine();
  const RopeConfig config = FromJson(json, "", 131072);
  absl::StatusOr<TableSlice> short_slice = engine->GetTable(config, 0, 4096);
  absl::StatusOr<TableSlice> long_slice = engine->GetTable(config, 4090, 7);
  ASSERT_TRUE(short_slice.ok() && long_slice.ok());
  ExpectInvFreq(short_slice->table->inv_freq(), short_want);
  const std::vector<double> long_want =
      reference::LongRopeInvFreq(10000, 96, longrope.long_factor);
  ExpectInvFreq(long_slice->table->inv_freq(), long_want);
  ExpectTableRows(config, short_want, attention, {0, 17, 4095});
}

// A Phi-3 style longrope config for head_dim 64: 32 values per list.
std::string PhiStyleConfig(const std::string& model_type, const std::string& scaling_extra) {
  std::string short_list, long_list;
  for (int i = 0; i < 32; ++i) {
    absl::StrAppend(&short_list, i ? ", " : "", 1.0 + 0.01 * i);
    absl::StrAppend(&long_list, i ? ", " : "", 1.0 + 1.5 * i);
  }
  return absl::StrCat(R"({"model_type": ")", model_type,
                      R"(", "hidden_size": 2048, "num_attention_heads": 32, )",
                      R"("max_position_embeddings": 131072, "original_max_position_embeddings": 4096, )",
                      R"("rope_theta": 10000.0, "rope_scaling": {"short_factor": [)", short_list,
                      R"(], "long_factor": [)", long_list, "], ", scaling_extra, "}}");
}

// transformers' Phi3Config reads "su" (the first Phi-3-mini-128k-instruct
// config) and "yarn" as longrope.
TEST(HfConfigTest, Phi3LegacySuAndYarnTypesAreLongRope) {
  auto longrope = Resolve(PhiStyleConfig("phi3", R"("type": "longrope")"), "", 131072);
  ASSERT_TRUE(longrope.ok()) << longrope.status();
  for (const std::string type : {"su", "yarn"}) {
    auto legacy = Resolve(PhiStyleConfig("phi3", absl::StrCat(R"("type": ")", type, R"(")")), "",
                          131072);
    ASSERT_TRUE(legacy.ok()) << type << ": " << legacy.status();
    EXPECT_TRUE(legacy->config.scaling == longrope->config.scaling) << type;
    EXPECT_EQ(legacy->attention_factor, longrope->attention_factor) << type;
    ExpectInvFreq(legacy->inv_freq, longrope->inv_freq);
  }
  // sqrt(1 + ln 32 / ln 4096), the longrope default.
  EXPECT_DOUBLE_EQ(longrope->attention_factor,
                   reference::LongRopeAttentionFactorFromConfig(131072, 4096));
  // Only phi3 configs: for another model_type "su" stays unknown.
  EXPECT_TRUE(StatusIs(Resolve(PhiStyleConfig("llama", R"("type": "su")")).status(),
                       absl::StatusCode::kInvalidArgument,
                       "hf_config_json: rope_scaling.rope_type is \"su\": not supported"));
}

// Phi-3.5-MoE: cos/sin scaled by short_mscale / long_mscale (equal as
// published) instead of longrope's attention factor.
TEST(HfConfigTest, PhiMoeEqualMscalesAreTheAttentionFactorOfBothLists) {
  const double mscale = 1.243163121016122;
  const std::string json = PhiStyleConfig(
      "phimoe", R"("type": "longrope", "short_mscale": 1.243163121016122, )"
                R"("long_mscale": 1.243163121016122)");
  auto r = Resolve(json, "", 131072);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->attention_factor, mscale);
  const auto& longrope = std::get<LongRopeScaling>(r->config.scaling);
  const RopeConfig config = FromJson(json, "", 131072);
  // Short factors up to position 4095, long ones from 4096: the same factor.
  ExpectTableRows(config, reference::LongRopeInvFreq(10000, 64, longrope.short_factor), mscale,
                  {0, 17, 4095});
  ExpectTableRows(config, reference::LongRopeInvFreq(10000, 64, longrope.long_factor), mscale,
                  {4096, 100000});
}

TEST(HfConfigErrorsTest, DifferentOrLoneMscalesAreRefused) {
  EXPECT_TRUE(StatusIs(
      Resolve(PhiStyleConfig("phimoe", R"("type": "longrope", "short_mscale": 1.2, )"
                                       R"("long_mscale": 1.3)"))
          .status(),
      absl::StatusCode::kInvalidArgument,
      "hf_config_json: rope_scaling.short_mscale (1.2) and rope_scaling.long_mscale (1.3) differ"));
  EXPECT_TRUE(StatusIs(
      Resolve(PhiStyleConfig("phimoe", R"("type": "longrope", "long_mscale": 1.3)")).status(),
      absl::StatusCode::kInvalidArgument,
      "rope_scaling.short_mscale (absent) and rope_scaling.long_mscale (1.3) differ"));
  EXPECT_TRUE(StatusIs(
      Resolve(PhiStyleConfig("phimoe", R"("type": "longrope", "short_mscale": -1, )"
                                       R"("long_mscale": -1)"))
          .status(),
      absl::StatusCode::kInvalidArgument, "rope_scaling.short_mscale"));
}

// Gemma 4 as transformers v5 saves it: per-layer rope_parameters, the
// full-attention layers "proportional" over global_head_dim with a quarter of
// the pairs rotating, the sliding ones plain over head_dim.
constexpr char kGemma4Like[] = R"({"model_type": "gemma4", "text_config": {
  "model_type": "gemma4_text", "head_dim": 256, "global_head_dim": 512,
  "max_position_embeddings": 131072,
  "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
  "rope_parameters": {
    "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0,
                       "rope_type": "proportional"},
    "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}}}})";

// transformers' _compute_proportional_rope_parameters, in double.
std::vector<double> ProportionalInvFreq(double theta, int head_dim, double partial, double factor) {
  const int rotated = static_cast<int>(std::floor(partial * head_dim / 2));
  std::vector<double> inv(head_dim / 2, 0.0);
  for (int i = 0; i < rotated; ++i) inv[i] = std::pow(theta, -2.0 * i / head_dim) / factor;
  return inv;
}

TEST(HfConfigTest, Gemma4ProportionalRotatesAQuarterOfTheGlobalHeadsPairs) {
  auto full = Resolve(kGemma4Like, "full_attention", 4096);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->config.head_dim, 512u);    // global_head_dim
  EXPECT_EQ(full->config.rotary_dim, 512u);  // the whole head pairs
  EXPECT_TRUE(full->config.scaling == ScalingConfig(ProportionalScaling{1.0, 64}));
  const std::vector<double> want = ProportionalInvFreq(1e6, 512, 0.25, 1.0);
  ExpectInvFreq(full->inv_freq, want);
  EXPECT_EQ(full->inv_freq[64], 0.0);
  EXPECT_EQ(full->attention_factor, 1.0);
  ExpectTableRows(FromJson(kGemma4Like, "full_attention", 4096), want, 1.0, {0, 1, 4095});
  // "" is the full-attention layer too.
  auto plain = Resolve(kGemma4Like, "", 4096);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->config.head_dim, 512u);
  EXPECT_TRUE(plain->config.scaling == full->config.scaling);

  auto sliding = Resolve(kGemma4Like, "sliding_attention", 4096);
  ASSERT_TRUE(sliding.ok()) << sliding.status();
  EXPECT_EQ(sliding->config.head_dim, 256u);
  EXPECT_EQ(sliding->config.rotary_dim, 256u);
  EXPECT_EQ(sliding->config.theta, 10000.0);
  EXPECT_TRUE(std::holds_alternative<NoScaling>(sliding->config.scaling));

  // Rotating: pairs (i, i + 256) turn for i < 64; every other feature keeps
  // its bits.
  auto engine = NewEngine();
  std::mt19937 rng(7);
  const test::HostTensor q =
      test::Encode(DType::kFloat32, {1, 2, 1, 512}, test::RandomValues(DType::kFloat32, 1024, &rng));
  test::HostTensor rotated = q;
  RotateParams p;
  p.config = FromJson(kGemma4Like, "full_attention", 4096);
  p.q = rotated.view();
  p.start_pos = 1000;
  ASSERT_TRUE(engine->Rotate(p).ok());
  const float* in = reinterpret_cast<const float*>(q.bytes.data());
  const float* out = reinterpret_cast<const float*>(rotated.bytes.data());
  for (int t = 0; t < 2; ++t) {
    for (int i = 0; i < 256; ++i) {
      const int a = t * 512 + i, b = a + 256;
      if (i >= 64) {
        EXPECT_EQ(out[a], in[a]) << t << " " << i;
        EXPECT_EQ(out[b], in[b]) << t << " " << i;
        continue;
      }
      const double angle = (1000.0 + t) * want[i];
      EXPECT_NEAR(out[a], in[a] * std::cos(angle) - in[b] * std::sin(angle), 1e-5) << i;
      EXPECT_NEAR(out[b], in[a] * std::sin(angle) + in[b] * std::cos(angle), 1e-5) << i;
    }
  }
}

TEST(HfConfigTest, ProportionalFactorDividesTheRotatingFrequencies) {
  const std::string json =
      R"({"head_dim": 64, "rope_parameters": {"rope_type": "proportional", "rope_theta": 10000,)"
      R"( "factor": 8.0, "partial_rotary_factor": 0.5}})";
  auto r = Resolve(json);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->config.scaling == ScalingConfig(ProportionalScaling{8.0, 16}));
  ExpectInvFreq(r->inv_freq, ProportionalInvFreq(10000, 64, 0.5, 8.0));
  // Whole, it is linear scaling over the whole head.
  auto whole = Resolve(
      R"({"head_dim": 64, "rope_parameters": {"rope_type": "proportional", "rope_theta": 10000,)"
      R"( "factor": 8.0}})");
  ASSERT_TRUE(whole.ok()) << whole.status();
  RopeConfig linear;
  linear.theta = 10000;
  linear.head_dim = 64;
  linear.max_len = 8192;
  linear.scaling = LinearScaling{8.0};
  auto linear_resolved = NewEngine()->ResolveConfig(linear);
  ASSERT_TRUE(linear_resolved.ok());
  ExpectInvFreq(whole->inv_freq, linear_resolved->inv_freq);
  EXPECT_TRUE(StatusIs(
      Resolve(R"({"head_dim": 4, "rope_parameters": {"rope_type": "proportional", "rope_theta":)"
              R"( 10000, "partial_rotary_factor": 0.25}})")
          .status(),
      absl::StatusCode::kInvalidArgument,
      "rope_type proportional with partial_rotary_factor 0.25 and head_dim 4 rotates 0 pairs"));
}

TEST(HfConfigTest, GptOss20bYarnKeepsTheFractionalRangeOnBothLayerTypes) {
  const std::string json = Fixture("gpt-oss-20b");
  const std::vector<double> want = reference::YarnInvFreq(150000, 64, 32, 4096, 32, 1, false);
  const double attention = reference::YarnAttentionFactor(32, 0, 0, 0);
  for (const std::string layer : {"full_attention", "sliding_attention"}) {
    auto r = Resolve(json, layer);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->config.head_dim, 64u);
    EXPECT_FALSE(std::get<YarnScaling>(r->config.scaling).truncate);
    ExpectInvFreq(r->inv_freq, want);
    EXPECT_DOUBLE_EQ(r->attention_factor, attention);
  }
  ExpectTableRows(FromJson(json), want, attention, {0, 4096, 8191});
}

TEST(HfConfigTest, Qwen3_8BPlainAndWithTheModelCardsYarn) {
  auto plain = Resolve(Fixture("Qwen3-8B"));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->config.theta, 1000000);
  EXPECT_EQ(plain->config.head_dim, 128u);
  EXPECT_TRUE(std::holds_alternative<NoScaling>(plain->config.scaling));  // "rope_scaling": null
  ExpectInvFreq(plain->inv_freq, reference::DefaultInvFreq(1000000, 128));

  const std::string yarn_json = Fixture("Qwen3-8B-yarn");
  auto yarn = Resolve(yarn_json, "", 131072);
  ASSERT_TRUE(yarn.ok()) << yarn.status();
  const auto& y = std::get<YarnScaling>(yarn->config.scaling);
  // factor 4 as given, not max_position_embeddings 40960 / 32768.
  EXPECT_EQ(y.factor, 4);
  EXPECT_EQ(y.original_max_position_embeddings, 32768u);
  const std::vector<double> want = reference::YarnInvFreq(1000000, 128, 4, 32768, 32, 1);
  ExpectInvFreq(yarn->inv_freq, want);
  const double attention = reference::YarnAttentionFactor(4, 0, 0, 0);
  EXPECT_DOUBLE_EQ(yarn->attention_factor, attention);
  ExpectTableRows(FromJson(yarn_json, "", 131072), want, attention, {0, 32768, 131071});
}

TEST(HfConfigTest, Qwen2VlChunkedMrope) {
  const std::string json = Fixture("Qwen2-VL-7B-Instruct");
  auto r = Resolve(json);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->config.head_dim, 128u);  // 3584 / 28
  EXPECT_EQ(r->config.theta, 1000000);
  EXPECT_TRUE(std::holds_alternative<NoScaling>(r->config.scaling));  // type "mrope"
  EXPECT_EQ(r->config.mrope.section, (std::vector<uint32_t>{16, 24, 24}));
  EXPECT_FALSE(r->config.mrope.interleaved);
  ExpectInvFreq(r->inv_freq, reference::DefaultInvFreq(1000000, 128));
  ExpectTableRows(FromJson(json), reference::DefaultInvFreq(1000000, 128), 1.0, {0, 8191});
}

TEST(HfConfigTest, Qwen3VlInterleavedMropeFromTextConfig) {
  const std::string json = Fixture("Qwen3-VL-8B-Instruct");
  auto r = Resolve(json);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->config.head_dim, 128u);
  EXPECT_EQ(r->config.theta, 5000000);
  EXPECT_EQ(r->config.mrope.section, (std::vector<uint32_t>{24, 20, 20}));
  EXPECT_TRUE(r->config.mrope.interleaved);
  ExpectInvFreq(r->inv_freq, reference::DefaultInvFreq(5000000, 128));
}

// Every fixture: its explicit form (ResolveConfig's) rotates bit-identically.
TEST(HfConfigTest, ExplicitFormRotatesBitIdentically) {
  auto engine = NewEngine();
  std::mt19937 rng(5);
  for (const char* name : {"Llama-3.1-8B-Instruct", "Llama-4-Scout-17B-16E-Instruct",
                           "gemma-3-12b-it", "DeepSeek-V3", "Phi-4-mini-instruct", "gpt-oss-20b",
                           "Qwen3-8B", "Qwen3-8B-yarn", "Qwen2-VL-7B-Instruct",
                           "Qwen3-VL-8B-Instruct"}) {
    for (const std::string layer : {"full_attention", "sliding_attention"}) {
      const RopeConfig json_config = FromJson(Fixture(name), layer, 16384);
      absl::StatusOr<ResolvedConfig> resolved = engine->ResolveConfig(json_config);
      ASSERT_TRUE(resolved.ok()) << name << ": " << resolved.status();
      const int64_t d = resolved->config.head_dim;
      const test::HostTensor q = test::Encode(DType::kBFloat16, {2, 3, 2, d},
                                              test::RandomValues(DType::kBFloat16, 12 * d, &rng));
      const std::vector<int64_t> positions =
          resolved->config.mrope.enabled()
              ? std::vector<int64_t>{5, 6, 7, 9000, 1, 2, 5, 6, 8, 16000, 1, 2, 5, 7, 7, 3, 1, 2}
              : std::vector<int64_t>{5, 6, 7, 9000, 4095, 4096};
      std::vector<uint8_t> outputs[2];
      int i = 0;
      for (const RopeConfig& config : {json_config, resolved->config}) {
        test::HostTensor copy = q;
        RotateParams p;
        p.config = config;
        p.q = copy.view();
        p.positions = positions;
        ASSERT_TRUE(engine->Rotate(p).ok()) << name << " " << engine->Rotate(p);
        outputs[i++] = copy.bytes;
      }
      EXPECT_EQ(outputs[0], outputs[1]) << name << " " << layer;
    }
  }
}

// ---- Other forms transformers reads ---------------------------------------------------------

TEST(HfConfigTest, PerLayerRopeParametersPickTheLayerType) {
  const std::string json = R"({
    "model_type": "gemma3_text", "head_dim": 256, "max_position_embeddings": 131072,
    "layer_types": ["sliding_attention", "full_attention"],
    "rope_parameters": {
      "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
      "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}})";
  auto full = Resolve(json, "full_attention");
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_TRUE(full->config.scaling == ScalingConfig(LinearScaling{8}));
  EXPECT_EQ(full->config.theta, 1000000);
  auto sliding = Resolve(json, "sliding_attention");
  ASSERT_TRUE(sliding.ok()) << sliding.status();
  EXPECT_EQ(sliding->config.theta, 10000);
  EXPECT_TRUE(std::holds_alternative<NoScaling>(sliding->config.scaling));
  EXPECT_TRUE(StatusIs(Resolve(json, "chunked_attention").status(),
                       absl::StatusCode::kInvalidArgument,
                       "hf_layer_type is 'chunked_attention': hf_config_json's rope_parameters has "
                       "no entry for it (it has full_attention, sliding_attention)"));
}

TEST(HfConfigTest, NewFormatRopeParametersCarryThetaAndPartialRotary) {
  // transformers v5 writes rope_theta and partial_rotary_factor inside.
  const std::string json = R"({"head_dim": 256, "max_position_embeddings": 262144,
    "rope_parameters": {"mrope_interleaved": true, "mrope_section": [11, 11, 10],
                        "partial_rotary_factor": 0.25, "rope_theta": 10000000,
                        "rope_type": "default"}})";
  auto r = Resolve(json);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->config.theta, 10000000);
  EXPECT_EQ(r->config.rotary_dim, 64u);
  EXPECT_EQ(r->config.mrope.section, (std::vector<uint32_t>{11, 11, 10}));
  ExpectInvFreq(r->inv_freq, reference::DefaultInvFreq(10000000, 64));
}

TEST(HfConfigTest, RopeKeysAloneTakeHeadDimFromTheRequest) {
  RopeConfig c = FromJson(R"({"rope_theta": 10000, "rope_scaling": {"rope_type": "dynamic",
                             "factor": 2.0}, "max_position_embeddings": 2048})");
  c.head_dim = 64;
  auto r = NewEngine()->ResolveConfig(c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->config.head_dim, 64u);
  EXPECT_TRUE(r->config.scaling == ScalingConfig(DynamicNtkScaling{2.0, 2048}));
}

// transformers' validate_rope requires factor for yarn (a KeyError).
TEST(HfConfigErrorsTest, YarnWithoutFactorIsRefusedAsTransformersRefusesIt) {
  EXPECT_TRUE(StatusIs(Resolve(R"({"rope_theta": 10000, "head_dim": 64,
                                  "max_position_embeddings": 32768,
                                  "rope_scaling": {"rope_type": "yarn",
                                                   "original_max_position_embeddings": 4096}})")
                           .status(),
                       absl::StatusCode::kInvalidArgument,
                       "hf_config_json: rope_scaling.factor is missing: rope_type yarn needs it"));
}

// ---- Refusals -----------------------------------------------------------------------------

TEST(HfConfigErrorsTest, MalformedJsonNamesTheProblem) {
  EXPECT_TRUE(StatusIs(Resolve("{\"rope_theta\": 10000,").status(),
                       absl::StatusCode::kInvalidArgument, "hf_config_json is not valid JSON"));
  EXPECT_TRUE(StatusIs(Resolve(R"({"rope_theta": NaN})").status(),
                       absl::StatusCode::kInvalidArgument, "hf_config_json is not valid JSON"));
  EXPECT_TRUE(StatusIs(Resolve(R"({"rope_theta": 1e999})").status(),
                       absl::StatusCode::kInvalidArgument, "number overflow"));
  EXPECT_TRUE(StatusIs(Resolve("[1, 2]").status(), absl::StatusCode::kInvalidArgument,
                       "hf_config_json is [1,2]: must be a JSON object"));
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_TRUE(StatusIs(Resolve(absl::StrCat(R"({"x": )", deep, "}")).status(),
                       absl::StatusCode::kInvalidArgument, "deeper than 64 levels"));
}

// `levels` nested objects, the top-level one included: {"a":{"a":{}}} is 3.
std::string NestedObjects(int levels) {
  std::string json;
  for (int i = 1; i < levels; ++i) json += R"({"a":)";
  json += "{}";
  json += std::string(levels - 1, '}');
  return json;
}

TEST(HfConfigErrorsTest, DepthLimitIsExactlySixtyFourLevels) {
  // 64 levels are parsed (and refused for what they lack, not for depth).
  const absl::Status at_limit = Resolve(NestedObjects(64)).status();
  EXPECT_FALSE(absl::StrContains(at_limit.message(), "deeper")) << at_limit;
  EXPECT_TRUE(StatusIs(at_limit, absl::StatusCode::kInvalidArgument, "hf_config_json"));
  EXPECT_TRUE(StatusIs(Resolve(NestedObjects(65)).status(), absl::StatusCode::kInvalidArgument,
                       "deeper than 64 levels"));
  // Arrays count as levels too.
  const std::string arrays = absl::StrCat(R"({"x": )", std::string(63, '['),
                                          std::string(63, ']'), "}");
  EXPECT_FALSE(absl::StrContains(Resolve(arrays).status().message(), "deeper"));
  EXPECT_TRUE(StatusIs(Resolve(absl::StrCat(R"({"x": )", std::string(64, '['),
                                            std::string(64, ']'), "}"))
                           .status(),
                       absl::StatusCode::kInvalidArgument, "deeper than 64 levels"));
  // Brackets inside strings are text, not nesting.
  EXPECT_TRUE(StatusIs(Resolve(absl::StrCat(R"({"rope_theta": 10000, "head_dim": 64, "s": ")",
                                            std::string(100, '['), R"(\"]"})"))
                           .status(),
                       absl::StatusCode::kOk, ""));
}

// 4 MiB of empty objects in one array: nlohmann's callback parser walked the
// array after every '}' (quadratic: minutes); the parse is linear now. The
// deadline is far beyond a linear parse (well under a second here, and
// under AddressSanitizer) and far short of the quadratic one.
TEST(HfConfigErrorsTest, FourMebibytesOfEmptyObjectsParseWithinADeadline) {
  std::string json = R"({"rope_theta": 10000, "head_dim": 64, "x": [)";
  while (json.size() < (4u << 20) - 16) json += "{},";
  json += "{}]}";
  const Interrupt interrupt(nullptr, absl::Now() + absl::Seconds(60));
  absl::StatusOr<HfRopeConfig> parsed = ParseHfRopeConfig(json, HfLayerSelector{}, &interrupt);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->theta, 10000);
}

TEST(HfConfigErrorsTest, ParsingStopsWhenTheCallerGoesOrItsDeadlinePasses) {
  std::string json = R"({"x": [)";
  for (int i = 0; i < 100000; ++i) json += "1,";
  json += "1]}";
  const Interrupt cancelled([] { return true; }, absl::InfiniteFuture());
  EXPECT_TRUE(StatusIs(ParseHfRopeConfig(json, HfLayerSelector{}, &cancelled).status(),
                       absl::StatusCode::kCancelled, "parsing hf_config_json stopped"));
  const Interrupt late(nullptr, absl::Now() - absl::Seconds(1));
  EXPECT_TRUE(StatusIs(ParseHfRopeConfig(json, HfLayerSelector{}, &late).status(),
                       absl::StatusCode::kDeadlineExceeded, "parsing hf_config_json stopped"));
  // A stopped parse is not cached: the same text parses in full next time.
  HfConfigCache cache(/*budget_bytes=*/1 << 20, /*max_entries=*/4);
  EXPECT_EQ(cache.Get(json, "", &late)->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(cache.stats().entries, 0);
  EXPECT_EQ(cache.Get(json, "")->status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(HfConfigErrorsTest, WrongTypesNameKeyAndValue) {
  const std::string base = R"("rope_theta": 500000, "hidden_size": 4096, "num_attention_heads": 32)";
  EXPECT_TRUE(StatusIs(
      Resolve(absl::StrCat("{", base, R"(, "rope_scaling": {"rope_type": "linear", "factor": "8"}})"))
          .status(),
      absl::StatusCode::kInvalidArgument,
      "hf_config_json: rope_scaling.factor is \"8\": must be a number (it is string)"));
  EXPECT_TRUE(StatusIs(Resolve(R"({"rope_theta": true, "head_dim": 64})").status(),
                       absl::StatusCode::kInvalidArgument,
                       "hf_config_json: rope_theta is true: must be a number (it is a boolean)"));
  EXPECT_TRUE(StatusIs(Resolve(R"({"rope_theta": 10000, "head_dim": 64.5})").status(),
                       absl::StatusCode::kInvalidArgument, "hf_config_json: head_dim is 64.5"));
  EXPECT_TRUE(StatusIs(Resolve(R"({"rope_theta": 10000, "head_dim": 1e30})").status(),
                       absl::StatusCode::kInvalidArgument, "must be a whole number in [1, 4294967295]"));
  EXPECT_TRUE(StatusIs(
      Resolve(R"({"text_config": {"rope_theta": 10000, "head_dim": 64, "rope_scaling": [1]}})")
          .status(),
      absl::StatusCode::kInvalidArgument,
      "hf_config_json: text_config.rope_scaling is [1]: must be an object (it is array)"));
  EXPECT_TRUE(StatusIs(
      Resolve(R"({"rope_theta": 10000, "head_dim": 64, "rope_scaling": {"rope_type": "longrope",
                 "short_factor": [1, -2], "long_factor": [1, 2]}, "max_position_embeddings": 8})")
          .status(),
      absl::StatusCode::kInvalidArgument,
      "hf_config_json: rope_scaling.short_factor[1] is -2: must be finite and > 0"));
}

TEST(HfConfigErrorsTest, MissingKeysAreNamed) {
  EXPECT_TRUE(StatusIs(
      Resolve(R"({"rope_theta": 500000, "head_dim": 128, "rope_scaling": {"rope_type": "llama3",
                 "factor": 8, "high_freq_factor": 4, "original_max_position_embeddings": 8192}})")
          .status(),
      absl::StatusCode::kInvalidArgument,
      "hf_config_json: rope_scaling.low_freq_factor is missing: rope_type llama3 needs it"));
  EXPECT_TRUE(StatusIs(Resolve(R"({"model_type": "mistral", "head_dim": 128})").status(),
                       absl::StatusCode::kInvalidArgument, "hf_config_json: rope_theta is missing"));
  EXPECT_TRUE(StatusIs(
      Resolve(R"({"rope_theta": 10000, "head_dim": 64, "rope_scaling": {"type": "mrope"}})").status(),
      absl::StatusCode::kInvalidArgument, "rope_scaling.mrope_section is missing"));
  RopeConfig no_head = FromJson(R"({"rope_theta": 10000})");
  EXPECT_TRUE(StatusIs(NewEngine()->ResolveConfig(no_head).status(),
                       absl::StatusCode::kInvalidArgument,
                       "config.head_dim is 0 and hf_config_json gives none"));
}

TEST(HfConfigErrorsTest, UnknownRopeTypeIsNamed) {
  EXPECT_TRUE(StatusIs(
      Resolve(R"({"rope_theta": 10000, "head_dim": 64, "rope_scaling": {"type": "su"}})").status(),
      absl::StatusCode::kInvalidArgument,
      "hf_config_json: rope_scaling.rope_type is \"su\": not supported"));
  // A 1 MiB value is named, but not quoted whole.
  const std::string huge(1 << 20, 'x');
  absl::Status status =
      Resolve(absl::StrCat(R"({"rope_theta": 10000, "head_dim": 64, "rope_scaling": {"rope_type": ")",
                           huge, "\"}}"))
          .status();
  EXPECT_TRUE(StatusIs(status, absl::StatusCode::kInvalidArgument, "not supported"));
  EXPECT_LT(status.message().size(), 400u);
}

TEST(HfConfigErrorsTest, ConflictingRequestFieldsAreRefused) {
  const std::string json = Fixture("Llama-3.1-8B-Instruct");
  auto engine = NewEngine();
  RopeConfig c = FromJson(json);
  c.theta = 500000;
  EXPECT_TRUE(StatusIs(engine->ResolveConfig(c).status(), absl::StatusCode::kInvalidArgument,
                       "config.theta is 500000: must be unset (0) when config.hf_config_json is set"));
  c = FromJson(json);
  c.scaling = LinearScaling{2};
  EXPECT_TRUE(StatusIs(engine->ResolveConfig(c).status(), absl::StatusCode::kInvalidArgument,
                       "config.linear is set"));
  c = FromJson(json);
  c.head_dim = 64;
  EXPECT_TRUE(StatusIs(engine->ResolveConfig(c).status(), absl::StatusCode::kInvalidArgument,
                       "config.head_dim is 64 but hf_config_json gives head_dim 128"));
  c.head_dim = 128;  // equal is fine
  EXPECT_TRUE(engine->ResolveConfig(c).ok());
  c = FromJson(json);
  c.mrope.section = {16, 24, 24};
  EXPECT_TRUE(StatusIs(engine->ResolveConfig(c).status(), absl::StatusCode::kInvalidArgument,
                       "config.mrope is chunked[16,24,24]: must be unset"));
  RopeConfig layer_only;
  layer_only.head_dim = 64;
  layer_only.max_len = 64;
  layer_only.hf_layer_type = "sliding_attention";
  EXPECT_TRUE(StatusIs(engine->ResolveConfig(layer_only).status(),
                       absl::StatusCode::kInvalidArgument,
                       "config.hf_layer_type is set but config.hf_config_json is empty"));
  EXPECT_TRUE(StatusIs(Resolve(json, "local_attention").status(),
                       absl::StatusCode::kInvalidArgument,
                       "hf_layer_type is 'local_attention': must be full_attention or "
                       "sliding_attention"));
}

TEST(HfConfigErrorsTest, UnusableDerivedValuesSayTheyCameFromTheJson) {
  // 47 long factors for rotary_dim 96.
  std::string json = Fixture("Phi-4-mini-instruct");
  json.replace(json.find("      47.77\n"), 12, "");
  json.replace(json.find("      44.16,\n"), 13, "      44.16\n");
  EXPECT_TRUE(StatusIs(Resolve(json).status(), absl::StatusCode::kInvalidArgument,
                       "hf_config_json gives an unusable config: config.longrope.long_factor has "
                       "47 values: must have rotary_dim/2 = 48"));
  EXPECT_TRUE(StatusIs(Resolve(R"({"rope_theta": 10000, "head_dim": 64,
                                  "partial_rotary_factor": 0.3})").status(),
                       absl::StatusCode::kInvalidArgument,
                       "partial_rotary_factor 0.3 gives rotary_dim int(64 * 0.3) = 19"));
  EXPECT_TRUE(StatusIs(Resolve(R"({"rope_theta": 10000, "head_dim": 128, "rope_scaling":
                                  {"type": "mrope", "mrope_section": [16, 24, 25]}})").status(),
                       absl::StatusCode::kInvalidArgument,
                       "hf_config_json gives an unusable config: config.mrope.section is "
                       "[16,24,25] (sum 65)"));
}

TEST(HfConfigErrorsTest, AHugeHeadDimIsRefusedBeforeAnyAllocation) {
  // Found by rope_request_fuzzer: ResolveConfig has no tensor to bound
  // head_dim, and 2415919102 / 2 inverse frequencies are 9.6 GB; kMaxHeadDim
  // refuses it before anything is made.
  EngineLimits limits;
  limits.max_elements_per_request = 1 << 16;
  for (const RopeConfig& config : [] {
         RopeConfig fields;
         fields.head_dim = 2415919102u;
         fields.max_len = 64;
         RopeConfig json = FromJson(R"({"rope_theta": 10000, "head_dim": 2415919102})", "", 64);
         return std::vector<RopeConfig>{fields, json};
       }()) {
    EXPECT_TRUE(StatusIs(NewEngine(limits)->ResolveConfig(config).status(),
                         absl::StatusCode::kInvalidArgument,
                         "config.head_dim is 2415919102: at most 8192"));
  }
}

TEST(HfConfigErrorsTest, OversizedJsonIsOverTheLimit) {
  EngineLimits limits;
  limits.max_hf_config_json_bytes = 1000;
  RopeConfig c = FromJson(std::string(1001, ' ') + "{}");
  EXPECT_TRUE(StatusIs(NewEngine(limits)->ResolveConfig(c).status(),
                       absl::StatusCode::kResourceExhausted,
                       "config.hf_config_json is 1003 bytes: over the server's limit of 1000"));
}

// ---- Cache ------------------------------------------------------------------------------

TEST(HfConfigCacheTest, ARepeatedConfigIsParsedOnce) {
  auto engine = NewEngine();
  const std::string json = Fixture("Phi-4-mini-instruct");
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(engine->ResolveConfig(FromJson(json)).ok());
  EXPECT_EQ(engine->hf_config_cache_stats().misses, 1);
  EXPECT_EQ(engine->hf_config_cache_stats().hits, 4);
  // Another layer type is another key; a refused config is cached too.
  ASSERT_TRUE(engine->ResolveConfig(FromJson(json, "sliding_attention")).ok());
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(engine->ResolveConfig(FromJson("{")).ok());
  EXPECT_EQ(engine->hf_config_cache_stats().misses, 3);
  EXPECT_EQ(engine->hf_config_cache_stats().entries, 3);
}

TEST(HfConfigCacheTest, StaysWithinItsBudget) {
  HfConfigCache cache(/*budget_bytes=*/300, /*max_entries=*/4);
  for (int i = 0; i < 20; ++i) {
    cache.Get(absl::StrCat(R"({"rope_theta": )", 10000 + i, R"(, "head_dim": 64})"), "");
  }
  EXPECT_LE(cache.stats().bytes, 300);
  EXPECT_LE(cache.stats().entries, 4);
  EXPECT_EQ(cache.stats().misses, 20);
  // Too large for the budget: parsed, never kept.
  cache.Get(std::string(400, ' ') + "{}", "");
  EXPECT_LE(cache.stats().bytes, 300);
}

}  // namespace
}  // namespace rope
