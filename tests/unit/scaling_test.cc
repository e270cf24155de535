// Scaling variants: the engine's inverse frequencies, attention factors and
// tables against tests/unit/reference_scaling.* (written from Hugging Face's
// and Meta's formulas) and against values computed by hand; validation of
// every parameter; and table-cache keys that never merge two configs that
// differ in one scaling parameter.
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/hash/hash.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/engine/engine.h"
#include "core/engine/rope_config.h"
#include "core/engine/rope_table.h"
#include "core/engine/scaling.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/reference_scaling.h"
#include "tests/unit/test_util.h"

namespace rope {
namespace {

using test::StatusIs;

constexpr uint32_t kCap = 1u << 20;

RopeConfig Config(double theta, uint32_t head_dim, uint32_t max_len, ScalingConfig scaling,
                  uint32_t rotary_dim = 0) {
  RopeConfig c;
  c.theta = theta;
  c.head_dim = head_dim;
  c.rotary_dim = rotary_dim;
  c.max_len = max_len;
  c.scaling = std::move(scaling);
  return c;
}

std::vector<double> EngineInvFreq(const RopeConfig& config, int64_t max_position = 0) {
  EXPECT_TRUE(ValidateConfig(config, kCap).ok()) << ValidateConfig(config, kCap);
  return ComputeInvFreq(MakeTableKey(config, max_position));
}

void ExpectNear(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-14 * std::abs(want[i])) << "inv_freq[" << i << "]";
  }
}

std::vector<double> LongList(size_t n, double base) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + 0.25 * i;
  return v;
}

// ---- Each variant against the reference --------------------------------------

TEST(ScalingTest, LinearDividesEveryFrequency) {
  ExpectNear(EngineInvFreq(Config(10000, 64, 4096, LinearScaling{4.0})),
             reference::LinearInvFreq(10000, 64, 4.0));
}

TEST(ScalingTest, DynamicNtkKeepsBaseUpToOriginalLength) {
  const DynamicNtkScaling s{2.0, 2048};
  ExpectNear(EngineInvFreq(Config(10000, 128, 8192, s), /*max_position=*/2047),
             reference::DefaultInvFreq(10000, 128));
}

TEST(ScalingTest, DynamicNtkGrowsBaseWithSequenceLength) {
  const DynamicNtkScaling s{2.0, 2048};
  for (int64_t max_position : {2048, 3000, 8191}) {
    const double base = reference::DynamicNtkBase(10000, 128, 2.0, 2048, max_position + 1.0);
    ExpectNear(EngineInvFreq(Config(10000, 128, 8192, s), max_position),
               reference::DefaultInvFreq(base, 128));
    EXPECT_DOUBLE_EQ(MakeTableKey(Config(10000, 128, 8192, s), max_position).theta, base);
  }
}

TEST(ScalingTest, DynamicNtkBaseByHand) {
  // rotary_dim 8, factor 2, original 16, sequence length 32:
  // 10000 * (2 * 32 / 16 - 1)^(8/6) = 10000 * 3^(4/3) = 43267.48710922...
  const TableKey key = MakeTableKey(Config(10000, 8, 64, DynamicNtkScaling{2.0, 16}), 31);
  EXPECT_NEAR(key.theta, 43267.487109222246, 1e-8);
}

TEST(ScalingTest, YarnMatchesReference) {
  YarnScaling s;
  s.factor = 4;
  s.original_max_position_embeddings = 4096;
  ExpectNear(EngineInvFreq(Config(10000, 128, 16384, s)),
             reference::YarnInvFreq(10000, 128, 4, 4096, 32, 1));
  s.beta_fast = 16;
  s.beta_slow = 2;
  ExpectNear(EngineInvFreq(Config(500000, 128, 16384, s, 64)),
             reference::YarnInvFreq(500000, 64, 4, 4096, 16, 2));
}

TEST(ScalingTest, YarnCorrectionRangeByHand) {
  // theta 10000, dim 128, original 4096: low = floor(128 ln(4096/(64 pi)) /
  // (2 ln 10000)) = floor(20.944) = 20, high = ceil(128 ln(4096/(2 pi)) /
  // (2 ln 10000)) = ceil(45.027) = 46.
  double low, high;
  reference::YarnCorrectionRange(10000, 128, 4096, 32, 1, &low, &high);
  EXPECT_EQ(low, 20);
  EXPECT_EQ(high, 46);
  YarnScaling s;
  s.factor = 8;
  s.original_max_position_embeddings = 4096;
  const std::vector<double> inv = EngineInvFreq(Config(10000, 128, 8192, s));
  const std::vector<double> plain = reference::DefaultInvFreq(10000, 128);
  for (int i = 0; i < 64; ++i) {
    const double ramp = std::min(1.0, std::max(0.0, (i - 20.0) / 26.0));
    const double want = plain[i] / 8 * ramp + plain[i] * (1 - ramp);
    EXPECT_NEAR(inv[i], want, 1e-15 * plain[i]) << i;
    if (i <= 20) {
      EXPECT_DOUBLE_EQ(inv[i], plain[i]) << "extrapolated dims stay unchanged: " << i;
    }
    if (i >= 46) {
      EXPECT_DOUBLE_EQ(inv[i], plain[i] / 8) << "interpolated dims: " << i;
    }
  }
}

TEST(ScalingTest, YarnAttentionFactorRules) {
  YarnScaling s;
  s.factor = 16;
  s.original_max_position_embeddings = 4096;
  // Default: 0.1 ln(16) + 1.
  EXPECT_NEAR(ScaledAttentionFactor(s, 65536), 0.1 * std::log(16.0) + 1, 1e-15);
  EXPECT_DOUBLE_EQ(ScaledAttentionFactor(s, 65536), reference::YarnAttentionFactor(16, 0, 0, 0));
  // mscale and mscale_all_dim (DeepSeek style): their ratio.
  s.mscale = 0.707;
  s.mscale_all_dim = 0.707;
  EXPECT_DOUBLE_EQ(ScaledAttentionFactor(s, 65536), 1.0);
  s.mscale_all_dim = 1.0;
  EXPECT_DOUBLE_EQ(ScaledAttentionFactor(s, 65536),
                   reference::YarnAttentionFactor(16, 0.707, 1.0, 0));
  // mscale alone is ignored, as in HF.
  s.mscale_all_dim = 0;
  EXPECT_DOUBLE_EQ(ScaledAttentionFactor(s, 65536), reference::YarnAttentionFactor(16, 0, 0, 0));
  // An explicit attention_factor wins.
  s.attention_factor = 1.25;
  EXPECT_DOUBLE_EQ(ScaledAttentionFactor(s, 65536), 1.25);
}

TEST(ScalingTest, Llama3MatchesReference) {
  ExpectNear(EngineInvFreq(Config(500000, 128, 131072, Llama3Scaling{})),
             reference::Llama3InvFreq(500000, 128, 8, 1, 4, 8192));
  ExpectNear(EngineInvFreq(Config(500000, 128, 131072, Llama3Scaling{32, 2, 8, 4096})),
             reference::Llama3InvFreq(500000, 128, 32, 2, 8, 4096));
}

TEST(ScalingTest, Llama3SplitsHeadDim128Into29Unchanged6Smoothed29Divided) {
  const std::vector<double> inv = EngineInvFreq(Config(500000, 128, 131072, Llama3Scaling{}));
  const std::vector<double> plain = reference::DefaultInvFreq(500000, 128);
  int unchanged = 0, smoothed = 0, divided = 0;
  for (size_t i = 0; i < inv.size(); ++i) {
    if (std::abs(inv[i] - plain[i]) <= 1e-15 * plain[i]) {
      ++unchanged;
    } else if (std::abs(inv[i] - plain[i] / 8) <= 1e-15 * plain[i]) {
      ++divided;
    } else {
      ASSERT_GT(inv[i], plain[i] / 8) << i;
      ASSERT_LT(inv[i], plain[i]) << i;
      ++smoothed;
    }
  }
  EXPECT_EQ(unchanged, 29);
  EXPECT_EQ(smoothed, 6);
  EXPECT_EQ(divided, 29);
}

TEST(ScalingTest, LongRopeUsesLongListPastOriginalLength) {
  LongRopeScaling s;
  s.short_factor = LongList(32, 1.0);
  s.long_factor = LongList(32, 2.0);
  s.original_max_position_embeddings = 4096;
  ExpectNear(EngineInvFreq(Config(10000, 64, 4096, s)),
             reference::LongRopeInvFreq(10000, 64, s.short_factor));
  ExpectNear(EngineInvFreq(Config(10000, 64, 131072, s)),
             reference::LongRopeInvFreq(10000, 64, s.long_factor));
}

TEST(ScalingTest, LongRopeAttentionFactor) {
  LongRopeScaling s;
  s.short_factor = LongList(32, 1.0);
  s.long_factor = LongList(32, 2.0);
  s.original_max_position_embeddings = 4096;
  EXPECT_DOUBLE_EQ(ScaledAttentionFactor(s, 4096), 1.0);
  // Phi-3-mini-128k: 131072 / 4096 = 32 -> sqrt(1 + ln 32 / ln 4096) = sqrt(1 + 5/12).
  EXPECT_NEAR(ScaledAttentionFactor(s, 131072), std::sqrt(1 + 5.0 / 12.0), 1e-15);
  EXPECT_DOUBLE_EQ(ScaledAttentionFactor(s, 131072),
                   reference::LongRopeAttentionFactor(131072, 4096, 0));
  s.attention_factor = 1.5;
  EXPECT_DOUBLE_EQ(ScaledAttentionFactor(s, 131072), 1.5);
}

// The stored table: cos/sin of pos * reference inv_freq, times the attention
// factor, to float32 rounding.
TEST(ScalingTest, TablesCarryTheAttentionFactor) {
  YarnScaling s;
  s.factor = 16;
  s.original_max_position_embeddings = 1024;
  const RopeConfig config = Config(10000, 64, 20000, s);
  const auto table = RopeTable::Build(MakeTableKey(config, 0));
  const std::vector<double> inv = reference::YarnInvFreq(10000, 64, 16, 1024, 32, 1);
  const double attn = reference::YarnAttentionFactor(16, 0, 0, 0);
  EXPECT_DOUBLE_EQ(table->attention_factor(), attn);
  for (int64_t pos : {0, 1, 1023, 1024, 5000, 19999}) {
    for (int i = 0; i < 32; ++i) {
      EXPECT_NEAR(table->cos_row(pos)[i], attn * std::cos(pos * inv[i]), 2.4e-7) << pos << " " << i;
      EXPECT_NEAR(table->sin_row(pos)[i], attn * std::sin(pos * inv[i]), 2.4e-7) << pos << " " << i;
    }
  }
}

// ---- Validation ---------------------------------------------------------------

TEST(ScalingValidationTest, RejectsNonPositiveOrNanFactors) {
  EXPECT_TRUE(StatusIs(ValidateConfig(Config(10000, 64, 64, LinearScaling{0}), kCap),
                       absl::StatusCode::kInvalidArgument, "config.linear.factor is 0"));
  EXPECT_TRUE(StatusIs(ValidateConfig(Config(10000, 64, 64, LinearScaling{-2}), kCap),
                       absl::StatusCode::kInvalidArgument, "config.linear.factor is -2"));
  EXPECT_TRUE(StatusIs(ValidateConfig(Config(10000, 64, 64, LinearScaling{std::nan("")}), kCap),
                       absl::StatusCode::kInvalidArgument, "config.linear.factor is nan"));
  EXPECT_TRUE(StatusIs(ValidateConfig(Config(10000, 64, 64, DynamicNtkScaling{0, 16}), kCap),
                       absl::StatusCode::kInvalidArgument, "config.dynamic_ntk.factor is 0"));
  EXPECT_TRUE(StatusIs(ValidateConfig(Config(10000, 64, 64, Llama3Scaling{-8, 0, 0, 0}), kCap),
                       absl::StatusCode::kInvalidArgument, "config.llama3.factor is -8"));
}

TEST(ScalingValidationTest, RejectsMissingOriginalLength) {
  EXPECT_TRUE(StatusIs(ValidateConfig(Config(10000, 64, 64, DynamicNtkScaling{2, 0}), kCap),
                       absl::StatusCode::kInvalidArgument,
                       "config.dynamic_ntk.original_max_position_embeddings is 0"));
  YarnScaling y;
  y.factor = 2;
  EXPECT_TRUE(StatusIs(ValidateConfig(Config(10000, 64, 64, y), kCap),
                       absl::StatusCode::kInvalidArgument,
                       "config.yarn.original_max_position_embeddings is 0"));
}

// transformers only warns about beta_fast < beta_slow; Kimi K2 ships both 1.
TEST(ScalingValidationTest, AcceptsYarnBetaFastNotAboveBetaSlowAsTransformersDoes) {
  YarnScaling y;
  y.factor = 32;
  y.original_max_position_embeddings = 4096;
  y.beta_fast = 1;
  y.beta_slow = 1;
  ASSERT_TRUE(ValidateConfig(Config(50000, 64, 64, y), kCap).ok());
  ExpectNear(EngineInvFreq(Config(50000, 64, 64, y)),
             reference::YarnInvFreq(50000, 64, 32, 4096, 1, 1));
  y.beta_fast = 0;  // default 32
  y.beta_slow = 40;
  ASSERT_TRUE(ValidateConfig(Config(10000, 64, 64, y), kCap).ok());
  ExpectNear(EngineInvFreq(Config(10000, 64, 64, y)),
             reference::YarnInvFreq(10000, 64, 32, 4096, 32, 40));
  y.beta_slow = -1;
  EXPECT_TRUE(StatusIs(ValidateConfig(Config(10000, 64, 64, y), kCap),
                       absl::StatusCode::kInvalidArgument, "config.yarn.beta_slow is -1"));
  y.beta_slow = 0;
  y.mscale = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(StatusIs(ValidateConfig(Config(10000, 64, 64, y), kCap),
                       absl::StatusCode::kInvalidArgument, "config.yarn.mscale is inf"));
}

// ---- The serving engines' variants ------------------------------------------------

TEST(ScalingTest, DynamicNtkAlphaIsAFixedBaseWhateverTheLength) {
  // HunYuan-7B: theta 10000, alpha 1000, head_dim 128.
  const RopeConfig c = Config(10000, 128, 65536, DynamicNtkAlphaScaling{1000});
  const std::vector<double> want = reference::DynamicNtkAlphaInvFreq(10000, 128, 1000);
  ExpectNear(EngineInvFreq(c, 0), want);
  ExpectNear(EngineInvFreq(c, 60000), want);  // no growth with the sequence
  // base = 10000 * 1000^(128/126) = 1.0110... e7; inv_freq[1] = base^(-2/128).
  const double base = 10000 * std::pow(1000.0, 128.0 / 126.0);
  EXPECT_NEAR(EngineInvFreq(c)[1], std::pow(base, -2.0 / 128), 1e-15);
  EXPECT_EQ(MakeTableKey(c, 0).theta, MakeTableKey(c, 60000).theta);
  EXPECT_DOUBLE_EQ(ComputeAttentionFactor(MakeTableKey(c, 0)), 1.0);
}

TEST(ScalingTest, NtkFixedAndMixedMatchVllm) {
  for (int dim : {64, 128}) {
    ExpectNear(EngineInvFreq(Config(10000, dim, 64, NtkScaling{4, false, 0})),
               reference::NtkInvFreq(10000, dim, 4, false, 0));
    for (double b : {0.0, 0.5, 1.25}) {
      ExpectNear(EngineInvFreq(Config(10000, dim, 64, NtkScaling{4, true, b})),
                 reference::NtkInvFreq(10000, dim, 4, true, b));
    }
  }
  // By hand, fixed: inv[0] = 1 / 4^(2/64); mixed b = 1: inv[0] = 1 / exp(ln 4 / 32).
  EXPECT_NEAR(EngineInvFreq(Config(10000, 64, 64, NtkScaling{4, false, 0}))[0],
              1 / std::pow(4.0, 2.0 / 64), 1e-15);
  EXPECT_NEAR(EngineInvFreq(Config(10000, 64, 64, NtkScaling{4, true, 1}))[0],
              1 / std::exp(std::log(4.0) / 32), 1e-15);
  NtkScaling bad{4, true, std::numeric_limits<double>::quiet_NaN()};
  EXPECT_TRUE(StatusIs(ValidateConfig(Config(10000, 64, 64, bad), kCap),
                       absl::StatusCode::kInvalidArgument, "config.ntk.mixed_b is nan"));
  EXPECT_TRUE(StatusIs(ValidateConfig(Config(10000, 64, 64, NtkScaling{0, false, 0}), kCap),
                       absl::StatusCode::kInvalidArgument, "config.ntk.factor is 0"));
}

TEST(ScalingTest, DeepseekYarnMatchesVllm) {
  // DeepSeek-V2-Lite's numbers, then every parameter moved.
  struct Case {
    double factor, beta_fast, beta_slow, mscale, mscale_all_dim, attn_factor, extrapolation;
  };
  for (const Case& c : std::vector<Case>{{40, 32, 1, 0.707, 0.707, 1, 1},
                                         {40, 32, 1, 1, 0, 1, 1},  // vLLM's defaults
                                         {16, 32, 1, 0, 0, 1, 1},  // DeepSeek-V4's compress group
                                         {32, 1, 1, 1, 1, 1, 1},   // Kimi K2's equal betas
                                         {8, 16, 2, 0.5, 0.25, 1.5, 0.75}}) {
    DeepseekYarnScaling s;
    s.factor = c.factor;
    s.original_max_position_embeddings = 4096;
    s.beta_fast = c.beta_fast;
    s.beta_slow = c.beta_slow;
    s.mscale = c.mscale;
    s.mscale_all_dim = c.mscale_all_dim;
    s.attn_factor = c.attn_factor;
    s.extrapolation_factor = c.extrapolation;
    const RopeConfig config = Config(10000, 64, 4096, s);
    ExpectNear(EngineInvFreq(config),
               reference::DeepseekYarnInvFreq(10000, 64, c.factor, 4096, c.beta_fast, c.beta_slow,
                                              c.extrapolation));
    EXPECT_NEAR(ComputeAttentionFactor(MakeTableKey(config, 0)),
                reference::DeepseekYarnMscale(c.factor, c.mscale, c.mscale_all_dim, c.attn_factor),
                1e-15);
  }
  // A lone mscale counts, unlike transformers' yarn: m(40, 0.707) / m(40, 0).
  DeepseekYarnScaling lone;
  lone.factor = 40;
  lone.original_max_position_embeddings = 4096;
  lone.mscale = 0.707;
  lone.mscale_all_dim = 0;
  EXPECT_NEAR(ComputeAttentionFactor(MakeTableKey(Config(10000, 64, 64, lone), 0)),
              0.1 * 0.707 * std::log(40.0) + 1, 1e-15);
  lone.mscale_all_dim = -1 / (0.1 * std::log(40.0));  // m(40, k) = 0
  EXPECT_TRUE(StatusIs(ValidateConfig(Config(10000, 64, 64, lone), kCap),
                       absl::StatusCode::kInvalidArgument,
                       "config.deepseek_yarn.mscale is 0.707 and mscale_all_dim"));
}

TEST(ScalingKeyTest, NewVariantsOneParameterApartNeverShareAKey) {
  DeepseekYarnScaling d;
  d.factor = 40;
  d.original_max_position_embeddings = 4096;
  std::vector<ScalingConfig> variants = {DynamicNtkAlphaScaling{1000}, DynamicNtkAlphaScaling{999},
                                         NtkScaling{4, false, 0},      NtkScaling{4, true, 0},
                                         NtkScaling{4, true, 0.5},     NtkScaling{5, false, 0},
                                         d};
  for (auto mutate : std::vector<void (*)(DeepseekYarnScaling*)>{
           [](DeepseekYarnScaling* s) { s->factor = 41; },
           [](DeepseekYarnScaling* s) { s->original_max_position_embeddings = 2048; },
           [](DeepseekYarnScaling* s) { s->beta_fast = 16; },
           [](DeepseekYarnScaling* s) { s->beta_slow = 2; },
           [](DeepseekYarnScaling* s) { s->attn_factor = 1.5; },
           [](DeepseekYarnScaling* s) { s->extrapolation_factor = 0.5; }}) {
    DeepseekYarnScaling m = d;
    mutate(&m);
    variants.push_back(m);
  }
  // The same frequencies as transformers' yarn, but another variant: never
  // one key.
  YarnScaling y;
  y.factor = 40;
  y.original_max_position_embeddings = 4096;
  variants.push_back(y);
  std::vector<TableKey> keys;
  for (const ScalingConfig& s : variants) keys.push_back(MakeTableKey(Config(10000, 64, 8192, s), 0));
  for (size_t a = 0; a < keys.size(); ++a) {
    for (size_t b = a + 1; b < keys.size(); ++b) {
      EXPECT_FALSE(keys[a] == keys[b]) << keys[a].ToString() << " vs " << keys[b].ToString();
    }
  }
  // Equal attention factors (mscales folded into attn_factor) share one.
  DeepseekYarnScaling folded = d;
  folded.mscale = 0;
  folded.mscale_all_dim = 0;
  folded.attn_factor = 0.1 * std::log(40.0) + 1;  // = m(40, 1) / m(40, 0)
  EXPECT_TRUE(MakeTableKey(Config(10000, 64, 8192, d), 0) ==
              MakeTableKey(Config(10000, 64, 8192, folded), 0));
}

TEST(ScalingValidationTest, RejectsLlama3LowAboveHigh) {
  EXPECT_TRUE(StatusIs(ValidateConfig(Config(500000, 64, 64, Llama3Scaling{8, 5, 4, 8192}), kCap),
                       absl::StatusCode::kInvalidArgument,
                       "config.llama3.low_freq_factor is 5: must be <= high_freq_factor 4"));
  // Equal factors (Llama 4 Scout) are accepted.
  EXPECT_TRUE(ValidateConfig(Config(500000, 64, 64, Llama3Scaling{16, 1, 1, 8192}), kCap).ok());
}

TEST(ScalingValidationTest, RejectsLongRopeListLengthsAndValues) {
  LongRopeScaling s;
  s.short_factor = LongList(31, 1.0);
  s.long_factor = LongList(32, 1.0);
  s.original_max_position_embeddings = 4096;
  EXPECT_TRUE(StatusIs(ValidateConfig(Config(10000, 64, 64, s), kCap),
                       absl::StatusCode::kInvalidArgument,
                       "config.longrope.short_factor has 31 values: must have rotary_dim/2 = 32"));
  s.short_factor = LongList(32, 1.0);
  s.long_factor[5] = std::nan("");
  EXPECT_TRUE(StatusIs(ValidateConfig(Config(10000, 64, 64, s), kCap),
                       absl::StatusCode::kInvalidArgument, "config.longrope.long_factor[5] is nan"));
  // Partial rotary: the lists follow rotary_dim, not head_dim.
  s.long_factor = LongList(16, 1.0);
  s.short_factor = LongList(16, 1.0);
  EXPECT_TRUE(ValidateConfig(Config(10000, 64, 64, s, 32), kCap).ok());
}

TEST(ScalingValidationTest, RejectsDynamicNtkWithRotaryDimTwo) {
  EXPECT_TRUE(StatusIs(ValidateConfig(Config(10000, 2, 64, DynamicNtkScaling{2, 16}), kCap),
                       absl::StatusCode::kInvalidArgument, "config.rotary_dim is 2"));
}

// ---- Cache keys -------------------------------------------------------------------

TEST(ScalingKeyTest, OneParameterApartNeverSharesAKey) {
  YarnScaling base;
  base.factor = 4;
  base.original_max_position_embeddings = 4096;
  std::vector<ScalingConfig> variants = {NoScaling{}, LinearScaling{4}, LinearScaling{4.5},
                                         DynamicNtkScaling{4, 4096}, DynamicNtkScaling{4, 2048},
                                         base};
  for (auto mutate : std::vector<void (*)(YarnScaling*)>{
           [](YarnScaling* y) { y->factor = 5; },
           [](YarnScaling* y) { y->original_max_position_embeddings = 2048; },
           [](YarnScaling* y) { y->beta_fast = 31; },
           [](YarnScaling* y) { y->beta_slow = 2; },
           [](YarnScaling* y) { y->attention_factor = 1.5; }}) {
    YarnScaling y = base;
    mutate(&y);
    variants.push_back(y);
  }
  variants.push_back(Llama3Scaling{8, 1, 4, 8192});
  variants.push_back(Llama3Scaling{8, 1, 4, 4096});
  variants.push_back(Llama3Scaling{8, 2, 4, 8192});
  variants.push_back(Llama3Scaling{8, 1, 5, 8192});
  variants.push_back(Llama3Scaling{16, 1, 4, 8192});
  LongRopeScaling l;
  l.short_factor = LongList(32, 1.0);
  l.long_factor = LongList(32, 2.0);
  l.original_max_position_embeddings = 4096;
  variants.push_back(l);
  l.long_factor[31] += 1e-9;
  variants.push_back(l);
  l.attention_factor = 1.1;
  variants.push_back(l);

  std::vector<TableKey> keys;
  for (const ScalingConfig& s : variants) keys.push_back(MakeTableKey(Config(10000, 64, 8192, s), 0));
  for (size_t a = 0; a < keys.size(); ++a) {
    for (size_t b = a + 1; b < keys.size(); ++b) {
      EXPECT_FALSE(keys[a] == keys[b]) << keys[a].DebugString() << " vs " << keys[b].DebugString();
      EXPECT_NE(absl::Hash<TableKey>()(keys[a]), absl::Hash<TableKey>()(keys[b]))
          << keys[a].DebugString() << " vs " << keys[b].DebugString();
    }
  }
}

TEST(ScalingKeyTest, DefaultsAndExplicitDefaultsShareAKey) {
  YarnScaling implicit;
  implicit.factor = 4;
  implicit.original_max_position_embeddings = 4096;
  YarnScaling explicit_defaults = implicit;
  explicit_defaults.beta_fast = 32;
  explicit_defaults.beta_slow = 1;
  explicit_defaults.attention_factor = 0.1 * std::log(4.0) + 1;
  EXPECT_TRUE(MakeTableKey(Config(10000, 64, 8192, implicit), 0) ==
              MakeTableKey(Config(10000, 64, 8192, explicit_defaults), 0));
  EXPECT_TRUE(MakeTableKey(Config(500000, 64, 8192, Llama3Scaling{}), 0) ==
              MakeTableKey(Config(500000, 64, 8192, Llama3Scaling{8, 1, 4, 8192}), 0));
}

TEST(ScalingKeyTest, DynamicNtkCachesOneTablePerEffectiveBase) {
  EngineLimits limits;
  auto engine = std::make_unique<Engine>(NewCpuBackend(1).value(), limits);
  const RopeConfig config = Config(10000, 8, 64, DynamicNtkScaling{2.0, 16});
  auto rotate_at = [&](int64_t start_pos) {
    test::HostTensor q = test::Encode(DType::kFloat32, {1, 1, 1, 8}, {1, 0, 1, 0, 1, 0, 1, 0});
    RotateParams p;
    p.config = config;
    p.q = q.view();
    p.start_pos = start_pos;
    return engine->Rotate(p);
  };
  ASSERT_TRUE(rotate_at(3).ok());
  ASSERT_TRUE(rotate_at(15).ok());  // still within the original length: same base
  EXPECT_EQ(engine->cache_stats().misses, 1);
  ASSERT_TRUE(rotate_at(16).ok());  // length 17 > 16: a new base
  ASSERT_TRUE(rotate_at(31).ok());
  EXPECT_EQ(engine->cache_stats().misses, 3);
  ASSERT_TRUE(rotate_at(31).ok());
  EXPECT_EQ(engine->cache_stats().misses, 3);
  EXPECT_EQ(engine->cache_stats().hits, 2);
}

// ---- Llama 4 Scout: llama3 with low_freq_factor == high_freq_factor -------------

TEST(ScalingTest, Llama3EqualFactorsDivideLongWavelengthsAndKeepTheRest) {
  // Llama 4 Scout: theta 500000, head_dim 128, factor 16, low = high = 1,
  // original 8192: wavelengths above 8192 are divided by 16, the others kept.
  const std::vector<double> inv =
      EngineInvFreq(Config(500000, 128, 131072, Llama3Scaling{16, 1, 1, 8192}));
  ExpectNear(inv, reference::Llama3InvFreqTransformers(500000, 128, 16, 1, 1, 8192));
  ExpectNear(inv, reference::Llama3InvFreq(500000, 128, 16, 1, 1, 8192));
  const std::vector<double> plain = reference::DefaultInvFreq(500000, 128);
  int unchanged = 0, divided = 0;
  for (size_t i = 0; i < inv.size(); ++i) {
    if (std::abs(inv[i] - plain[i]) <= 1e-15 * plain[i]) {
      ++unchanged;
    } else {
      EXPECT_NEAR(inv[i], plain[i] / 16, 1e-15 * plain[i]) << i;
      ++divided;
    }
  }
  EXPECT_EQ(unchanged, 35);
  EXPECT_EQ(divided, 29);
}

// ---- YaRN truncate ----------------------------------------------------------------

TEST(ScalingTest, YarnWithoutTruncateKeepsTheCorrectionRangeFractional) {
  // gpt-oss-20b: theta 150000, head_dim 64, factor 32, original 4096.
  double low, high;
  reference::YarnCorrectionRange(150000, 64, 4096, 32, 1, &low, &high, /*truncate=*/false);
  EXPECT_NEAR(low, 8.0928, 5e-5);
  EXPECT_NEAR(high, 17.398, 5e-4);
  YarnScaling s;
  s.factor = 32;
  s.original_max_position_embeddings = 4096;
  s.beta_fast = 32;
  s.beta_slow = 1;
  s.truncate = false;
  const std::vector<double> fractional = EngineInvFreq(Config(150000, 64, 8192, s));
  ExpectNear(fractional, reference::YarnInvFreq(150000, 64, 32, 4096, 32, 1, false));
  s.truncate = true;
  const std::vector<double> truncated = EngineInvFreq(Config(150000, 64, 8192, s));
  ExpectNear(truncated, reference::YarnInvFreq(150000, 64, 32, 4096, 32, 1, true));
  // Dimension 8 sits inside the fractional ramp (low 8.09) but on the
  // truncated range's start (floor 8): the two differ there.
  EXPECT_NE(fractional[9], truncated[9]);
  EXPECT_FALSE(MakeTableKey(Config(150000, 64, 8192, s), 0) ==
               MakeTableKey(Config(150000, 64, 8192, [&] {
                              YarnScaling f = s;
                              f.truncate = false;
                              return f;
                            }()), 0));
}

// ---- LongRoPE: transformers' per-request rule ----------------------------------------

LongRopeScaling Phi4MiniLike() {
  LongRopeScaling s;
  s.short_factor = LongList(48, 1.0);
  s.long_factor = LongList(48, 2.0);
  s.original_max_position_embeddings = 4096;
  s.max_position_embeddings = 131072;
  return s;
}

TEST(ScalingTest, LongRopeAttentionFactorFollowsMaxPositionEmbeddingsNotTableLength) {
  const LongRopeScaling s = Phi4MiniLike();
  // Phi-4-mini: sqrt(1 + ln 32 / ln 4096) = 1.190238, whatever max_len.
  for (uint32_t max_len : {4096u, 8192u, 131072u}) {
    EXPECT_NEAR(ScaledAttentionFactor(s, max_len), 1.190238, 5e-7) << max_len;
    EXPECT_DOUBLE_EQ(ScaledAttentionFactor(s, max_len),
                     reference::LongRopeAttentionFactorFromConfig(131072, 4096));
  }
  // Without it, today's rule: from max_len (8192 -> 1.0408).
  LongRopeScaling legacy = s;
  legacy.max_position_embeddings = 0;
  EXPECT_NEAR(ScaledAttentionFactor(legacy, 8192), 1.0408, 5e-5);
}

TEST(ScalingTest, LongRopeChoosesTheListPerRequestWithMaxPositionEmbeddings) {
  const LongRopeScaling s = Phi4MiniLike();
  const RopeConfig config = Config(10000, 128, 131072, s, 96);
  // Largest position 4095: length 4096, not above the original: short.
  ExpectNear(EngineInvFreq(config, 4095), reference::LongRopeInvFreq(10000, 96, s.short_factor));
  // Largest position 4096: length 4097: long.
  ExpectNear(EngineInvFreq(config, 4096), reference::LongRopeInvFreq(10000, 96, s.long_factor));
  EXPECT_FALSE(MakeTableKey(config, 4095).long_factor);
  EXPECT_TRUE(MakeTableKey(config, 4096).long_factor);
  // Without max_position_embeddings: the long list for every request of a
  // table longer than the original.
  LongRopeScaling legacy = s;
  legacy.max_position_embeddings = 0;
  EXPECT_TRUE(MakeTableKey(Config(10000, 128, 131072, legacy, 96), 0).long_factor);
}

TEST(ScalingKeyTest, LongRopeShortAndLongRequestsCacheOneTableEach) {
  auto engine = std::make_unique<Engine>(NewCpuBackend(1).value(), EngineLimits());
  const RopeConfig config = Config(10000, 8, 64, [] {
    LongRopeScaling s;
    s.short_factor = {1, 1};
    s.long_factor = {2, 4};
    s.original_max_position_embeddings = 16;
    s.max_position_embeddings = 64;
    return s;
  }(), 4);
  auto table_at = [&](int64_t start, int64_t count) {
    absl::StatusOr<TableSlice> slice = engine->GetTable(config, start, count);
    EXPECT_TRUE(slice.ok()) << slice.status();
    return slice.ok() ? slice->table : nullptr;
  };
  const auto short_table = table_at(0, 16);
  const auto long_table = table_at(0, 17);
  EXPECT_EQ(engine->cache_stats().misses, 2);
  EXPECT_FALSE(short_table->key().long_factor);
  EXPECT_TRUE(long_table->key().long_factor);
  // The same cached blocks (one block each: 64 rows).
  EXPECT_EQ(table_at(3, 5)->block(0), short_table->block(0));
  EXPECT_EQ(table_at(40, 10)->block(0), long_table->block(0));
  EXPECT_EQ(engine->cache_stats().misses, 2);
}

TEST(ScalingKeyTest, LongRopeExplicitAndDerivedAttentionFactorsShareATable) {
  LongRopeScaling derived = Phi4MiniLike();
  LongRopeScaling explicit_factor = derived;
  explicit_factor.attention_factor = reference::LongRopeAttentionFactorFromConfig(131072, 4096);
  EXPECT_TRUE(MakeTableKey(Config(10000, 128, 8192, derived, 96), 0) ==
              MakeTableKey(Config(10000, 128, 8192, explicit_factor, 96), 0));
}

TEST(ScalingTest, TableKeyStringsNameEveryParameter) {
  YarnScaling y;
  y.factor = 32;
  y.original_max_position_embeddings = 4096;
  y.truncate = false;
  EXPECT_EQ(MakeTableKey(Config(150000, 64, 8192, y), 0).ToString(),
            "theta=150000 rotary_dim=64 max_len=8192 scaling=yarn(factor=32 "
            "original_max_position_embeddings=4096 beta_fast=32 beta_slow=1 mscale=0 "
            "mscale_all_dim=0 attention_factor=1.3465735902799727 truncate=false)");
  EXPECT_EQ(MakeTableKey(Config(10000, 8, 64, [] {
                           LongRopeScaling s;
                           s.short_factor = {1, 1.5};
                           s.long_factor = {2, 4};
                           s.original_max_position_embeddings = 16;
                           s.max_position_embeddings = 64;
                           return s;
                         }(), 4), 20).ToString(),
            "theta=10000 rotary_dim=4 max_len=64 scaling=longrope(short_factor=[1,1.5] "
            "long_factor=[2,4] original_max_position_embeddings=16 "
            "attention_factor=1.224744871391589 max_position_embeddings=0) uses=long_factor");
}

// LongRoPE at the widest heads: the key names each factor list by its length
// and digest, so its size does not grow with the list (a ResolveConfig reply
// carries it), and different lists still give different keys.
TEST(TableKeyTest, LongListsAreNamedByDigestAtAFixedSize) {
  auto key = [](double last_short) {
    LongRopeScaling s;
    s.short_factor.assign(kMaxHeadDim / 2, 1.25);
    s.long_factor.assign(kMaxHeadDim / 2, 3.5);
    s.short_factor.back() = last_short;
    s.original_max_position_embeddings = 4096;
    return MakeTableKey(Config(10000, kMaxHeadDim, 8192, s), 0).ToString();
  };
  const std::string a = key(1.25);
  EXPECT_THAT(a, testing::HasSubstr("short_factor=[4096 values fnv1a64="));
  EXPECT_THAT(a, testing::HasSubstr("long_factor=[4096 values fnv1a64="));
  EXPECT_LT(a.size(), 400u) << a;
  EXPECT_NE(a, key(1.5));
  EXPECT_EQ(a, key(1.25));
}

// ---- M-RoPE axes ------------------------------------------------------------------------

TEST(MropeTest, FrequencyAxesMatchTransformersAndVllm) {
  struct Case {
    std::vector<uint32_t> section;
    bool interleaved;
  };
  for (const Case& c : std::vector<Case>{{{16, 24, 24}, false},   // Qwen2-VL
                                         {{24, 20, 20}, true},    // Qwen3-VL
                                         {{11, 11, 10}, true},    // Qwen3.5 (partial rotary)
                                         {{2, 0, 6}, false},
                                         {{1, 5, 2}, true}}) {
    MropeConfig m;
    m.section = c.section;
    m.interleaved = c.interleaved;
    int half = 0;
    for (uint32_t s : c.section) half += static_cast<int>(s);
    const std::vector<int> want = reference::MropeAxes(
        std::vector<int>(c.section.begin(), c.section.end()), c.interleaved, half);
    const std::vector<uint8_t> got = MropeFrequencyAxes(m, half);
    ASSERT_EQ(got.size(), want.size());
    for (int i = 0; i < half; ++i) EXPECT_EQ(got[i], want[i]) << DescribeMrope(m) << " i=" << i;
  }
}

TEST(MropeTest, ValidationNamesTheSection) {
  RopeConfig c = Config(1000000, 128, 4096, NoScaling{});
  c.mrope.section = {16, 24, 23};
  EXPECT_TRUE(StatusIs(ValidateConfig(c, kCap), absl::StatusCode::kInvalidArgument,
                       "config.mrope.section is [16,24,23] (sum 63): must sum to rotary_dim/2 = 64"));
  c.mrope.section = {32, 32};
  EXPECT_TRUE(StatusIs(ValidateConfig(c, kCap), absl::StatusCode::kInvalidArgument,
                       "config.mrope.section is [32,32] (2 values): must have 3"));
  c.mrope.section = {16, 24, 24};
  EXPECT_TRUE(ValidateConfig(c, kCap).ok());
  c.rotary_dim = 64;  // partial rotary: sections follow rotary_dim
  EXPECT_TRUE(StatusIs(ValidateConfig(c, kCap), absl::StatusCode::kInvalidArgument,
                       "must sum to rotary_dim/2 = 32"));
}

TEST(ScalingNamesTest, EveryVariantHasItsHuggingFaceName) {
  EXPECT_EQ(ScalingName(NoScaling{}), "none");
  EXPECT_EQ(ScalingName(LinearScaling{}), "linear");
  EXPECT_EQ(ScalingName(DynamicNtkScaling{}), "dynamic");
  EXPECT_EQ(ScalingName(YarnScaling{}), "yarn");
  EXPECT_EQ(ScalingName(Llama3Scaling{}), "llama3");
  EXPECT_EQ(ScalingName(LongRopeScaling{}), "longrope");
  EXPECT_EQ(ScalingName(ProportionalScaling{}), "proportional");
  EXPECT_EQ(ScalingName(DynamicNtkAlphaScaling{}), "dynamic_alpha");
  EXPECT_EQ(ScalingName(NtkScaling{}), "ntk");
  EXPECT_EQ(ScalingName(DeepseekYarnScaling{}), "deepseek_yarn");
  EXPECT_EQ(SupportedScalingNames().size(), 10u);
  EXPECT_EQ(ScalingFieldName(DynamicNtkAlphaScaling{}), "dynamic_ntk_alpha");
  EXPECT_EQ(ScalingFieldName(DynamicNtkScaling{}), "dynamic_ntk");
}

TEST(MropeTest, ErnieLayoutMatchesTransformers) {
  for (const auto& [h, w, t] : std::vector<std::tuple<int, int, int>>{{22, 22, 20}, {4, 4, 2}}) {
    MropeConfig m;
    m.section = {static_cast<uint32_t>(t), static_cast<uint32_t>(h), static_cast<uint32_t>(w)};
    m.ernie_3d = true;
    ASSERT_TRUE(ValidateMrope(m, 2 * (h + w + t)).ok());
    const std::vector<uint8_t> got = MropeFrequencyAxes(m, h + w + t);
    const std::vector<reference::ErniePair> want = reference::ErnieLayout(h, w, t);
    for (int i = 0; i < h + w + t; ++i) {
      EXPECT_EQ(want[i].frequency, i) << "Ernie keeps every frequency at its pair";
      EXPECT_EQ(got[i], want[i].axis) << DescribeMrope(m) << " i=" << i;
    }
  }
  MropeConfig unequal;
  unequal.section = {20, 24, 20};
  unequal.ernie_3d = true;
  EXPECT_TRUE(StatusIs(ValidateMrope(unequal, 128), absl::StatusCode::kInvalidArgument,
                       "the h and w sections must be equal"));
}

}  // namespace
}  // namespace rope
