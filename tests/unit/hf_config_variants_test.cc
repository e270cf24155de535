// config.json -> RoPE for the variants the serving engines ship
// (core/engine/hf_config.*): the published configs of HunYuan, DeepSeek-V2
// and V3's MLA heads, Kimi K2, Llama 4 Scout's NoPE layers, Ernie 4.5-VL,
// DeepSeek-V4's rope groups and Pythia, against tests/unit/reference_scaling.*
// (vLLM's and transformers' formulas in double); the layer a hf_layer_index
// picks; the layout a model_type pairs in; and the keys refused rather than
// ignored, with transformers' strictness.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/engine/engine.h"
#include "core/engine/hf_config.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/reference_scaling.h"
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

std::unique_ptr<Engine> NewEngine() {
  return std::make_unique<Engine>(NewCpuBackend(1).value(), EngineLimits());
}

RopeConfig FromJson(const std::string& json, const std::string& layer_type = "",
                    std::optional<uint32_t> layer_index = std::nullopt, uint32_t head_dim = 0) {
  RopeConfig c;
  c.hf_config_json = json;
  c.hf_layer_type = layer_type;
  c.hf_layer_index = layer_index;
  c.head_dim = head_dim;
  c.max_len = 16384;
  c.layout = Layout::kInterleaved;
  return c;
}

absl::StatusOr<ResolvedConfig> Resolve(const RopeConfig& config) {
  return NewEngine()->ResolveConfig(config);
}

void ExpectInvFreq(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-14 * std::abs(want[i])) << "inv_freq[" << i << "]";
  }
}

// Rotates q (bfloat16 [1, 3, 2, width]) with `config` at positions 5, 900,
// 16000 and returns its bytes.
std::vector<uint8_t> RotateBytes(Engine& engine, const RopeConfig& config, const test::HostTensor& q) {
  test::HostTensor copy = q;
  RotateParams p;
  p.config = config;
  p.q = copy.view();
  p.positions = {5, 900, 16000};
  const absl::Status status = engine.Rotate(p);
  EXPECT_TRUE(status.ok()) << status;
  return copy.bytes;
}

test::HostTensor RandomQ(int64_t width, std::mt19937* rng) {
  return test::Encode(DType::kBFloat16, {1, 3, 2, width},
                      test::RandomValues(DType::kBFloat16, 6 * width, rng));
}

// ---- HunYuan: dynamic with alpha ----------------------------------------------------------

TEST(HfVariantsTest, HunyuanDynamicAlphaIsAFixedBaseNotDynamicNtk) {
  auto r = Resolve(FromJson(Fixture("Hunyuan-7B-Instruct")));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->config.scaling == ScalingConfig(DynamicNtkAlphaScaling{1000}));
  ExpectInvFreq(r->inv_freq, reference::DynamicNtkAlphaInvFreq(10000, 128, 1000));
  EXPECT_EQ(r->attention_factor, 1.0);
  EXPECT_EQ(r->hf_layout, Layout::kHalf);
  EXPECT_EQ(r->max_position_embeddings, 32768u);
  // Not dynamic NTK with factor 1: that would be the plain base.
  EXPECT_GT(std::abs(r->inv_freq[1] - reference::DefaultInvFreq(10000, 128)[1]), 1e-3);
}

// ---- DeepSeek MLA: the rope part, or the whole head -------------------------------------------

TEST(HfVariantsTest, DeepSeekV2LiteMlaHeadsRotateTheirLastFeatures) {
  const std::string json = Fixture("DeepSeek-V2-Lite-Chat");
  auto part = Resolve(FromJson(json));
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_EQ(part->config.head_dim, 64u);  // qk_rope_head_dim: the rope part, as before
  EXPECT_EQ(part->config.rotary_offset, 0u);
  EXPECT_EQ(part->whole_head_dim, 192u);  // qk_nope_head_dim 128 + 64
  EXPECT_EQ(part->hf_layout, Layout::kInterleaved);
  ExpectInvFreq(part->inv_freq, reference::YarnInvFreq(10000, 64, 40, 4096, 32, 1));
  // mscale == mscale_all_dim (0.707): transformers' ratio is 1.
  EXPECT_DOUBLE_EQ(part->attention_factor, reference::YarnAttentionFactor(40, 0.707, 0.707, 0));

  auto whole = Resolve(FromJson(json, "", std::nullopt, 192));
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->config.head_dim, 192u);
  EXPECT_EQ(whole->config.rotary_dim, 64u);
  EXPECT_EQ(whole->config.rotary_offset, 128u);
  EXPECT_EQ(whole->whole_head_dim, 0u);
  EXPECT_EQ(whole->key, part->key);  // one table

  // A whole-head tensor rotates its last 64 features as the rope part alone
  // does, with the first 128 untouched; head_dim 0 takes the width from it.
  auto engine = NewEngine();
  std::mt19937 rng(3);
  const test::HostTensor q = RandomQ(192, &rng);
  const std::vector<uint8_t> rotated = RotateBytes(*engine, FromJson(json), q);
  test::HostTensor rope_part = RandomQ(64, &rng);
  for (int h = 0; h < 6; ++h) {
    std::copy(q.bytes.begin() + (h * 192 + 128) * 2, q.bytes.begin() + (h * 192 + 192) * 2,
              rope_part.bytes.begin() + h * 64 * 2);
  }
  const std::vector<uint8_t> part_rotated = RotateBytes(*engine, FromJson(json), rope_part);
  for (int h = 0; h < 6; ++h) {
    EXPECT_TRUE(std::equal(q.bytes.begin() + h * 192 * 2, q.bytes.begin() + (h * 192 + 128) * 2,
                           rotated.begin() + h * 192 * 2))
        << "head " << h << ": the nope features changed";
    EXPECT_TRUE(std::equal(part_rotated.begin() + h * 64 * 2, part_rotated.begin() + (h + 1) * 64 * 2,
                           rotated.begin() + (h * 192 + 128) * 2))
        << "head " << h << ": the rope features differ from the rope part's";
  }
  // The explicit whole-head form gives the same bits.
  EXPECT_EQ(RotateBytes(*engine, whole->config, q), rotated);
  EXPECT_TRUE(StatusIs(Resolve(FromJson(json, "", std::nullopt, 128)).status(),
                       absl::StatusCode::kInvalidArgument,
                       "config.head_dim is 128 but hf_config_json gives head_dim 64 (the rotated "
                       "part of the head) or 192 (the whole head"));
}

TEST(HfVariantsTest, KimiK2EqualBetasAreAccepted) {
  auto r = Resolve(FromJson(Fixture("Kimi-K2-Instruct")));
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& yarn = std::get<YarnScaling>(r->config.scaling);
  EXPECT_EQ(yarn.beta_fast, 1);
  EXPECT_EQ(yarn.beta_slow, 1);
  ExpectInvFreq(r->inv_freq, reference::YarnInvFreq(50000, 64, 32, 4096, 1, 1));
  EXPECT_DOUBLE_EQ(r->attention_factor, reference::YarnAttentionFactor(32, 1, 1, 0));
  EXPECT_EQ(r->whole_head_dim, 192u);
  EXPECT_EQ(r->hf_layout, Layout::kInterleaved);  // DeepSeek-V3's remote code
}

// M-RoPE with YaRN (Qwen3-VL's long-context setting): transformers' yarn
// over the whole rotary width with its own correction range from
// original_max_position_embeddings, not the 4x longer range vLLM's enlarged
// M-RoPE cache gives.
TEST(HfVariantsTest, MropeWithYarnUsesTransformersCorrectionRange) {
  auto r = Resolve(FromJson(R"({"model_type": "qwen3_vl", "text_config": {"head_dim": 128,
      "rope_theta": 5000000, "max_position_embeddings": 262144,
      "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                       "original_max_position_embeddings": 65536,
                       "mrope_section": [24, 20, 20], "mrope_interleaved": true}}})"));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(std::holds_alternative<YarnScaling>(r->config.scaling));
  EXPECT_EQ(r->config.mrope.section, (std::vector<uint32_t>{24, 20, 20}));
  EXPECT_TRUE(r->config.mrope.interleaved);
  ExpectInvFreq(r->inv_freq, reference::YarnInvFreq(5000000, 128, 4, 65536, 32, 1));
  const std::vector<double> vllm_range = reference::YarnInvFreq(5000000, 128, 4, 4 * 65536, 32, 1);
  EXPECT_NE(r->inv_freq, vllm_range);
  EXPECT_DOUBLE_EQ(r->attention_factor, reference::YarnAttentionFactor(4, 0, 0, 0));
}

TEST(HfVariantsTest, DeepSeekV3PairsNeighboursUnlessRopeInterleaveIsFalse) {
  auto r = Resolve(FromJson(Fixture("DeepSeek-V3")));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->hf_layout, Layout::kInterleaved);
  EXPECT_EQ(r->whole_head_dim, 192u);
  std::string json = Fixture("DeepSeek-V3");
  json.insert(json.find("\"rope_theta\""), "\"rope_interleave\": false, ");
  auto half = Resolve(FromJson(json));
  ASSERT_TRUE(half.ok()) << half.status();
  EXPECT_EQ(half->hf_layout, Layout::kHalf);
}

// ---- Llama 4's NoPE layers ----------------------------------------------------------------

TEST(HfVariantsTest, Llama4LayerIndexSelectsNoPeLayersWithTemperatureTuning) {
  const std::string json = Fixture("Llama-4-Scout-17B-16E-Instruct");
  // no_rope_layers[3] == 0: NoPE; attn_temperature_tuning 4 (true),
  // floor_scale 8192, attn_scale 0.1.
  auto nope = Resolve(FromJson(json, "", 3));
  ASSERT_TRUE(nope.ok()) << nope.status();
  EXPECT_TRUE(nope->config.no_rope.enabled);
  EXPECT_EQ(nope->config.no_rope.floor_scale, 8192);
  EXPECT_EQ(nope->config.no_rope.attn_scale, 0.1);
  EXPECT_FALSE(nope->has_table);
  EXPECT_TRUE(nope->inv_freq.empty());
  EXPECT_EQ(nope->layer_type, "full_attention");  // transformers' name for them
  EXPECT_EQ(nope->hf_layout, Layout::kInterleaved);
  EXPECT_EQ(nope->config.no_rope.Temperature(10000),
            reference::Llama4Temperature(10000, 8192, 0.1));

  auto rope = Resolve(FromJson(json, "", 0));
  ASSERT_TRUE(rope.ok()) << rope.status();
  EXPECT_FALSE(rope->config.no_rope.enabled);
  EXPECT_EQ(rope->layer_type, "chunked_attention");
  EXPECT_TRUE(rope->config.scaling == ScalingConfig(Llama3Scaling{16, 1, 1, 8192}));

  // A NoPE layer's Rotate is the identity; GetTable has no table.
  auto engine = NewEngine();
  std::mt19937 rng(9);
  const test::HostTensor q = RandomQ(128, &rng);
  EXPECT_EQ(RotateBytes(*engine, FromJson(json, "", 47), q), q.bytes);
  EXPECT_NE(RotateBytes(*engine, FromJson(json, "", 46), q), q.bytes);
  EXPECT_TRUE(StatusIs(engine->GetTable(FromJson(json, "", 3), 0, 4).status(),
                       absl::StatusCode::kInvalidArgument, "config.no_rope is set"));
  // The explicit form of the NoPE layer behaves alike.
  EXPECT_EQ(RotateBytes(*engine, nope->config, q), q.bytes);

  EXPECT_TRUE(StatusIs(Resolve(FromJson(json, "", 48)).status(), absl::StatusCode::kInvalidArgument,
                       "hf_layer_index is 48: hf_config_json has 48 decoder layers "
                       "(num_hidden_layers)"));
  EXPECT_TRUE(StatusIs(Resolve(FromJson(json, "chunked_attention", 3)).status(),
                       absl::StatusCode::kInvalidArgument,
                       "hf_layer_type is 'chunked_attention' but hf_layer_index 3 is a "
                       "'full_attention' layer"));
  // The layer type alone keeps today's meaning: the rope layers' rope.
  auto chunked = Resolve(FromJson(json, "chunked_attention"));
  ASSERT_TRUE(chunked.ok()) << chunked.status();
  EXPECT_FALSE(chunked->config.no_rope.enabled);
  RopeConfig no_json;
  no_json.head_dim = 64;
  no_json.max_len = 64;
  no_json.hf_layer_index = 3;
  EXPECT_TRUE(StatusIs(Resolve(no_json).status(), absl::StatusCode::kInvalidArgument,
                       "config.hf_layer_index is 3 but config.hf_config_json is empty"));
  RopeConfig both = FromJson(json, "", 3);
  both.no_rope.enabled = true;
  EXPECT_TRUE(StatusIs(Resolve(both).status(), absl::StatusCode::kInvalidArgument,
                       "config.no_rope is set: must be unset"));
}

TEST(HfVariantsTest, NoRopeLayersDefaultFromTheIntervalWithoutTheList) {
  // SmolLM3: no_rope_layer_interval 4, no temperature tuning.
  auto r = Resolve(FromJson(R"({"model_type": "smollm3", "rope_theta": 5000000, "head_dim": 128,
                               "num_hidden_layers": 36, "no_rope_layer_interval": 4})",
                            "", 7));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->config.no_rope.enabled);
  EXPECT_FALSE(r->config.no_rope.tuned());
  auto rope = Resolve(FromJson(R"({"model_type": "smollm3", "rope_theta": 5000000,
                                  "head_dim": 128, "num_hidden_layers": 36})",
                               "", 6));
  ASSERT_TRUE(rope.ok()) << rope.status();
  EXPECT_FALSE(rope->config.no_rope.enabled);
  EXPECT_TRUE(StatusIs(Resolve(FromJson(R"({"rope_theta": 10000, "head_dim": 64,
                                            "no_rope_layers": [1, 2]})",
                                        "", 0))
                           .status(),
                       absl::StatusCode::kInvalidArgument,
                       "hf_config_json: no_rope_layers[1] is 2: must be 1 (the layer rotates) or 0"));
}

// ---- Ernie 4.5-VL ---------------------------------------------------------------------------

// A derived layer pattern is a rule, not a list: a config claiming 2^32 - 1
// layers costs nothing, and its last layers are still chosen by index.
TEST(HfVariantsTest, DerivedLayerPatternsOfHugeLayerCountsAreRules) {
  auto last = Resolve(FromJson(R"({"model_type": "llama4_text", "head_dim": 64,
      "rope_theta": 500000, "num_hidden_layers": 4294967295, "no_rope_layer_interval": 4})",
                               "", 4294967294u));
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_FALSE(last->config.no_rope.enabled);  // (4294967294 + 1) % 4 != 0
  EXPECT_EQ(last->layer_type, "chunked_attention");
  auto nope = Resolve(FromJson(R"({"model_type": "llama4_text", "head_dim": 64,
      "rope_theta": 500000, "num_hidden_layers": 4294967295, "no_rope_layer_interval": 4})",
                               "", 4294967291u));
  ASSERT_TRUE(nope.ok()) << nope.status();
  EXPECT_TRUE(nope->config.no_rope.enabled);
  EXPECT_EQ(nope->layer_type, "full_attention");
  auto gemma = Resolve(FromJson(R"({"model_type": "gemma3_text", "head_dim": 64,
      "num_hidden_layers": 4294967295, "sliding_window_pattern": 6})",
                                "", 4294967291u));
  ASSERT_TRUE(gemma.ok()) << gemma.status();
  EXPECT_EQ(gemma->layer_type, "full_attention");  // (4294967291 + 1) % 6 == 0
  EXPECT_EQ(gemma->config.theta, 1000000);
}

TEST(HfVariantsTest, ErnieFreqAllocationIsTheTAxisOfItsThreeDLayout) {
  auto r = Resolve(FromJson(Fixture("ERNIE-4.5-VL-28B-A3B-PT")));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->config.head_dim, 128u);  // 2560 / 20
  EXPECT_EQ(r->config.theta, 500000);
  EXPECT_TRUE(r->config.mrope.ernie_3d);
  EXPECT_EQ(r->config.mrope.section, (std::vector<uint32_t>{20, 22, 22}));  // t, h, w
  EXPECT_EQ(r->hf_layout, Layout::kInterleaved);
  ExpectInvFreq(r->inv_freq, reference::DefaultInvFreq(500000, 128));
  // transformers' converted config: mrope_section [h, w, t] in rope_parameters.
  auto converted = Resolve(FromJson(R"({"model_type": "ernie4_5_vl_moe", "text_config": {
      "model_type": "ernie4_5_vl_moe_text", "hidden_size": 2560, "num_attention_heads": 20,
      "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0,
                          "mrope_section": [22, 22, 20]}}})"));
  ASSERT_TRUE(converted.ok()) << converted.status();
  EXPECT_TRUE(converted->config.mrope == r->config.mrope);
  std::string odd = Fixture("ERNIE-4.5-VL-28B-A3B-PT");
  odd.replace(odd.find("\"freq_allocation\": 20"), 21, "\"freq_allocation\": 21");
  EXPECT_TRUE(StatusIs(Resolve(FromJson(odd)).status(), absl::StatusCode::kInvalidArgument,
                       "hf_config_json: freq_allocation is 21"));
  EXPECT_TRUE(StatusIs(Resolve(FromJson(R"({"rope_theta": 10000, "head_dim": 64,
                                            "freq_allocation": 8})"))
                           .status(),
                       absl::StatusCode::kInvalidArgument,
                       "hf_config_json: freq_allocation is 8: Ernie's 3-D RoPE key"));
  // The same key inside the rope dict of a config that is not Ernie's is
  // refused naming where it stands (the fuzzer found the refusal reading it
  // from the top level, where it is absent).
  EXPECT_TRUE(StatusIs(Resolve(FromJson(R"({"rope_theta": 10000, "head_dim": 64,
                                            "rope_scaling": {"rope_type": "default",
                                                             "freq_allocation": 4}})"))
                           .status(),
                       absl::StatusCode::kInvalidArgument,
                       "hf_config_json: rope_scaling.freq_allocation is 4: Ernie's 3-D RoPE key"));
}

// ---- DeepSeek-V4's rope groups --------------------------------------------------------------

TEST(HfVariantsTest, DeepSeekV4TwoRopeGroupsByLayerTypeOrIndex) {
  const std::string json = Fixture("DeepSeek-V4-Flash");
  EXPECT_TRUE(StatusIs(Resolve(FromJson(json)).status(), absl::StatusCode::kInvalidArgument,
                       "DeepSeek-V4 has two rope groups, main"));
  auto main = Resolve(FromJson(json, "main"));
  ASSERT_TRUE(main.ok()) << main.status();
  EXPECT_EQ(main->config.theta, 10000);
  EXPECT_TRUE(std::holds_alternative<NoScaling>(main->config.scaling));
  EXPECT_EQ(main->config.head_dim, 64u);
  EXPECT_EQ(main->whole_head_dim, 512u);
  EXPECT_EQ(main->hf_layout, Layout::kInterleaved);
  ExpectInvFreq(main->inv_freq, reference::DefaultInvFreq(10000, 64));

  auto compress = Resolve(FromJson(json, "compress"));
  ASSERT_TRUE(compress.ok()) << compress.status();
  EXPECT_EQ(compress->config.theta, 160000);
  const auto& yarn = std::get<YarnScaling>(compress->config.scaling);
  EXPECT_EQ(yarn.factor, 16);
  EXPECT_EQ(yarn.original_max_position_embeddings, 65536u);
  ExpectInvFreq(compress->inv_freq, reference::YarnInvFreq(160000, 64, 16, 65536, 32, 1));
  EXPECT_EQ(compress->attention_factor, 1.0);  // DeepseekV4Config sets it

  // Layers: compress_ratios [0, 0, 4, 128, ...]: 0 and 1 main, 2 and 3 compress.
  for (const auto& [index, group] : std::vector<std::pair<uint32_t, const ResolvedConfig*>>{
           {0, &*main}, {1, &*main}, {2, &*compress}, {3, &*compress}}) {
    auto by_index = Resolve(FromJson(json, "", index));
    ASSERT_TRUE(by_index.ok()) << index << ": " << by_index.status();
    EXPECT_EQ(by_index->key, group->key) << "layer " << index;
  }
  auto named = Resolve(FromJson(json, "heavily_compressed_attention"));
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->key, compress->key);
  EXPECT_TRUE(Resolve(FromJson(json, "compress", 3)).ok());  // a group that agrees
  EXPECT_TRUE(StatusIs(Resolve(FromJson(json, "main", 3)).status(),
                       absl::StatusCode::kInvalidArgument, "hf_layer_index 3 is a "
                                                           "'heavily_compressed_attention' layer"));
  EXPECT_TRUE(StatusIs(Resolve(FromJson(json, "", 43)).status(),
                       absl::StatusCode::kInvalidArgument, "hf_config_json has 43 decoder layers"));
  // Whole 512-wide heads rotate their last 64 features.
  auto whole = Resolve(FromJson(json, "compress", std::nullopt, 512));
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->config.rotary_offset, 448u);
  EXPECT_EQ(whole->config.rotary_dim, 64u);

  // transformers' saved form: rope_parameters keyed by group.
  auto saved = Resolve(FromJson(R"({"model_type": "deepseek_v4", "head_dim": 512,
      "num_hidden_layers": 2, "layer_types": ["sliding_attention", "compressed_sparse_attention"],
      "rope_parameters": {
        "main": {"rope_type": "default", "rope_theta": 10000, "partial_rotary_factor": 0.125},
        "compress": {"rope_type": "yarn", "rope_theta": 160000, "factor": 16,
                     "original_max_position_embeddings": 65536, "beta_fast": 32, "beta_slow": 1,
                     "attention_factor": 1.0, "partial_rotary_factor": 0.125}}})",
                                "", 1));
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->key, compress->key);
}

// ---- GPT-NeoX, GPT-J: other spellings of the same keys ------------------------------------

TEST(HfVariantsTest, PythiaRotaryPctAndRotaryEmbBaseAreRead) {
  auto r = Resolve(FromJson(Fixture("pythia-2.8b")));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->config.head_dim, 80u);  // 2560 / 32
  EXPECT_EQ(r->config.rotary_dim, 20u);  // int(80 * 0.25)
  EXPECT_EQ(r->config.theta, 10000);
  EXPECT_EQ(r->hf_layout, Layout::kHalf);
  EXPECT_EQ(r->max_position_embeddings, 2048u);
  auto other_base = Resolve(FromJson(R"({"hidden_size": 2560, "num_attention_heads": 32,
                                        "rotary_pct": 0.25, "rotary_emb_base": 25000})"));
  ASSERT_TRUE(other_base.ok()) << other_base.status();
  EXPECT_EQ(other_base->config.theta, 25000);
  EXPECT_TRUE(StatusIs(Resolve(FromJson(R"({"hidden_size": 2560, "num_attention_heads": 32,
                                            "rope_theta": 10000, "rotary_emb_base": 25000})"))
                           .status(),
                       absl::StatusCode::kInvalidArgument,
                       "rope_theta is 10000 but rotary_emb_base is 25000"));
}

TEST(HfVariantsTest, GptJRotaryDimAndItsSpellingsAreRead) {
  auto r = Resolve(FromJson(R"({"model_type": "gptj", "n_embd": 4096, "n_head": 16,
                               "rotary_dim": 64, "n_positions": 2048})"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->config.head_dim, 256u);
  EXPECT_EQ(r->config.rotary_dim, 64u);
  EXPECT_EQ(r->config.theta, 10000);  // GPT-J's modeling code
  EXPECT_EQ(r->hf_layout, Layout::kInterleaved);
  EXPECT_EQ(r->max_position_embeddings, 2048u);
}

TEST(HfVariantsTest, EachModelTypePairsAsItsTransformersCodeDoes) {
  for (const auto& [model_type, layout] : std::vector<std::pair<std::string, Layout>>{
           {"llama", Layout::kHalf},          {"qwen3", Layout::kHalf},
           {"gpt_neox", Layout::kHalf},       {"glm4_moe", Layout::kHalf},
           {"gptj", Layout::kInterleaved},    {"glm", Layout::kInterleaved},
           {"glm4", Layout::kInterleaved},    {"cohere", Layout::kInterleaved},
           {"helium", Layout::kInterleaved},
           {"deepseek_v2", Layout::kInterleaved}, {"deepseek_v3", Layout::kInterleaved},
           {"llama4_text", Layout::kInterleaved}, {"ernie4_5", Layout::kInterleaved}}) {
    auto r = Resolve(FromJson(absl::StrCat(R"({"model_type": ")", model_type,
                                           R"(", "rope_theta": 10000, "head_dim": 64})")));
    ASSERT_TRUE(r.ok()) << model_type << ": " << r.status();
    EXPECT_EQ(r->hf_layout, layout) << model_type;
  }
  RopeConfig fields;
  fields.head_dim = 64;
  fields.max_len = 64;
  auto none = Resolve(fields);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->hf_layout.has_value());
}

// ---- Variants by rope_type ----------------------------------------------------------------

TEST(HfVariantsTest, VllmRopeTypesNtkAndDeepseekYarn) {
  auto ntk = Resolve(FromJson(R"({"rope_theta": 10000, "head_dim": 64,
      "rope_scaling": {"rope_type": "ntk", "factor": 4.0, "mixed_b": 0.5}})"));
  ASSERT_TRUE(ntk.ok()) << ntk.status();
  ExpectInvFreq(ntk->inv_freq, reference::NtkInvFreq(10000, 64, 4, true, 0.5));
  auto fixed = Resolve(FromJson(R"({"rope_theta": 10000, "head_dim": 64,
      "rope_scaling": {"rope_type": "ntk", "factor": 4.0}})"));
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  ExpectInvFreq(fixed->inv_freq, reference::NtkInvFreq(10000, 64, 4, false, 0));

  // vLLM's defaults: mscale 1, mscale_all_dim 0 (a lone mscale counts).
  auto deepseek = Resolve(FromJson(R"({"rope_theta": 10000, "qk_rope_head_dim": 64,
      "rope_scaling": {"rope_type": "deepseek_yarn", "factor": 40,
                       "original_max_position_embeddings": 4096, "mscale": 0.707}})"));
  ASSERT_TRUE(deepseek.ok()) << deepseek.status();
  ExpectInvFreq(deepseek->inv_freq,
                reference::DeepseekYarnInvFreq(10000, 64, 40, 4096, 32, 1, 1));
  EXPECT_NEAR(deepseek->attention_factor, reference::DeepseekYarnMscale(40, 0.707, 0, 1), 1e-15);
  // vLLM's other name for it.
  auto llama_named = Resolve(FromJson(R"({"rope_theta": 10000, "qk_rope_head_dim": 64,
      "rope_scaling": {"rope_type": "deepseek_llama_scaling", "factor": 40,
                       "original_max_position_embeddings": 4096, "mscale": 0.707}})"));
  ASSERT_TRUE(llama_named.ok()) << llama_named.status();
  EXPECT_EQ(llama_named->inv_freq, deepseek->inv_freq);
  EXPECT_EQ(llama_named->attention_factor, deepseek->attention_factor);
  EXPECT_TRUE(StatusIs(Resolve(FromJson(R"({"rope_theta": 10000, "head_dim": 64,
      "rope_scaling": {"rope_type": "deepseek_yarn", "factor": 40}})"))
                           .status(),
                       absl::StatusCode::kInvalidArgument,
                       "rope_scaling.original_max_position_embeddings is missing: rope_type "
                       "deepseek_yarn needs it"));
}

// ---- Strictness as transformers ------------------------------------------------------------

TEST(HfVariantsErrorsTest, EveryLayerTypesEntryIsChecked) {
  const std::string json = R"({"head_dim": 128, "max_position_embeddings": 32768,
    "layer_types": ["sliding_attention", "full_attention"],
    "rope_parameters": {
      "full_attention": {"rope_type": "yarn", "rope_theta": 1000000,
                         "original_max_position_embeddings": 4096},
      "sliding_attention": {"rope_type": "default", "rope_theta": 10000}}})";
  EXPECT_TRUE(StatusIs(Resolve(FromJson(json, "sliding_attention")).status(),
                       absl::StatusCode::kInvalidArgument,
                       "hf_config_json: rope_parameters.full_attention.factor is missing: "
                       "rope_type yarn needs it"));
  const std::string lists = R"({"head_dim": 8, "max_position_embeddings": 32768,
    "layer_types": ["sliding_attention", "full_attention"],
    "rope_parameters": {
      "full_attention": {"rope_type": "longrope", "rope_theta": 10000,
                         "original_max_position_embeddings": 4096,
                         "short_factor": [1, 1, 1], "long_factor": [1, 2, 3, 4]},
      "sliding_attention": {"rope_type": "default", "rope_theta": 10000}}})";
  EXPECT_TRUE(StatusIs(Resolve(FromJson(lists, "sliding_attention")).status(),
                       absl::StatusCode::kInvalidArgument,
                       "hf_config_json: rope_parameters.full_attention gives an unusable config: "
                       "config.longrope.short_factor has 3 values"));
}

TEST(HfVariantsErrorsTest, KeysThatChangeRopeAreReadOrRefused) {
  struct Case {
    std::string keys;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {R"("rope_ratio": 500)", "hf_config_json: rope_ratio is 500: changes RoPE (ChatGLM"},
           {R"("use_dynamic_ntk": true)", "hf_config_json: use_dynamic_ntk is true"},
           {R"("use_logn_attn": true)", "hf_config_json: use_logn_attn is true"},
           {R"("alibi": true)", "hf_config_json: alibi is true"},
           {R"("rotary_emb_scale_base": 512)", "hf_config_json: rotary_emb_scale_base is 512"},
           {R"("dual_chunk_attention_config": {"chunk_size": 262144, "local_size": 8192})",
            "hf_config_json: dual_chunk_attention_config is {\"chunk_size\":262144"},
           {R"("rope_scaling": {"rope_type": "xdrope", "alpha": 1000})",
            "hf_config_json: rope_scaling.rope_type is \"xdrope\": not supported"},
           {R"("position_embedding_type": "absolute")",
            "hf_config_json: position_embedding_type is \"absolute\": the model's positions are "
            "not rotary"},
           {R"("rotary_dim": 32, "partial_rotary_factor": 0.5)",
            "two settings of the rotated width"},
           {R"("attn_temperature_tuning": "yes")",
            "hf_config_json: attn_temperature_tuning is \"yes\""}}) {
    const std::string json =
        absl::StrCat(R"({"rope_theta": 10000, "head_dim": 64, )", c.keys, "}");
    EXPECT_TRUE(StatusIs(Resolve(FromJson(json)).status(), absl::StatusCode::kInvalidArgument,
                         c.message))
        << c.keys;
  }
  // Set false, the switches change nothing and are accepted.
  EXPECT_TRUE(Resolve(FromJson(R"({"rope_theta": 10000, "head_dim": 64, "alibi": false,
                                  "use_dynamic_ntk": false, "position_embedding_type": "rope"})"))
                  .ok());
}

// ---- The explicit form -------------------------------------------------------------------

TEST(HfVariantsTest, ExplicitFormRotatesBitIdentically) {
  auto engine = NewEngine();
  std::mt19937 rng(5);
  struct Case {
    const char* fixture;
    std::string layer_type;
    std::optional<uint32_t> index;
    uint32_t head_dim;
  };
  for (const Case& c : std::vector<Case>{{"Hunyuan-7B-Instruct", "", std::nullopt, 0},
                                         {"DeepSeek-V2-Lite-Chat", "", std::nullopt, 0},
                                         {"DeepSeek-V2-Lite-Chat", "", std::nullopt, 192},
                                         {"Kimi-K2-Instruct", "", 5, 192},
                                         {"Llama-4-Scout-17B-16E-Instruct", "", 0, 0},
                                         {"DeepSeek-V4-Flash", "main", std::nullopt, 512},
                                         {"DeepSeek-V4-Flash", "", 2, 64},
                                         {"pythia-2.8b", "", std::nullopt, 0}}) {
    const RopeConfig json_config = FromJson(Fixture(c.fixture), c.layer_type, c.index, c.head_dim);
    absl::StatusOr<ResolvedConfig> resolved = engine->ResolveConfig(json_config);
    ASSERT_TRUE(resolved.ok()) << c.fixture << ": " << resolved.status();
    const test::HostTensor q = RandomQ(resolved->config.head_dim, &rng);
    EXPECT_EQ(RotateBytes(*engine, json_config, q), RotateBytes(*engine, resolved->config, q))
        << c.fixture << " " << c.layer_type;
  }
}

}  // namespace
}  // namespace rope
