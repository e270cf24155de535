// Axial RoPE and fractional positions through the Engine and the CPU
// backend, against the long double reference of reference_axial.h:
//   - the published models' splits (Flux, Wan 2.1, HunyuanVideo with its
//     rescale and interpolation factors, SAM 2, a partial rotary), both
//     layouts, float32 and bfloat16, S and B*S positions, start positions;
//   - exact to float32 rounding at integer positions up to 2^24 - 1 on every
//     axis (the rotated unit vector reveals the cos and sin used);
//   - one axis is plain RoPE bit for bit; equal axes share one cached table;
//   - fractional positions (plain with YaRN, M-RoPE, axial) computed
//     directly; AttentionScores with axial start positions and fractional
//     positions; every malformed config and list refused with its field.
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/engine/engine.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/cpu_test_engine.h"
#include "tests/unit/reference_axial.h"
#include "tests/unit/reference_scaling.h"
#include "tests/unit/test_util.h"

namespace rope {
namespace {

using test::StatusIs;

struct Model {
  const char* name;
  uint32_t head_dim;
  uint32_t rotary_dim;
  double theta;
  std::vector<AxialAxis> axes;
};

// The published splits (docs/models.md): Flux.1 (EmbedND(128, 10000,
// [16, 56, 56])), Wan 2.1 (head 128: c = 64 pairs, c - 2(c/3) = 22, 21, 21),
// HunyuanVideo (rope_dim_list [16, 56, 56], theta 256; here with a
// theta_rescale and an interpolation on two axes so both formulas are
// exercised), SAM 2 (compute_axial_cis(dim 64): x and y, dim/2 each), and a
// partial rotary (48 of 64 features).
std::vector<Model> Models() {
  return {
      {"flux", 128, 0, 10000, {{16, 0, 0, 0}, {56, 0, 0, 0}, {56, 0, 0, 0}}},
      {"wan", 128, 0, 10000, {{44, 0, 0, 0}, {42, 0, 0, 0}, {42, 0, 0, 0}}},
      {"hunyuan", 128, 0, 256, {{16, 0, 2.0, 0}, {56, 0, 0, 0.5}, {56, 1000, 0, 0}}},
      {"sam2", 64, 0, 10000, {{32, 0, 0, 0}, {32, 0, 0, 0}}},
      {"partial", 64, 48, 500, {{16, 0, 0, 0}, {32, 0, 0, 0}}},
  };
}

RopeConfig ConfigOf(const Model& m, Layout layout, uint32_t max_len) {
  RopeConfig c;
  c.theta = m.theta;
  c.head_dim = m.head_dim;
  c.rotary_dim = m.rotary_dim;
  c.max_len = max_len;
  c.layout = layout;
  c.axial.axes = m.axes;
  return c;
}

reference::AxialLadder LadderOf(const Model& m) {
  std::vector<reference::Axis> axes;
  for (const AxialAxis& a : m.axes) {
    reference::Axis r;
    r.dim = static_cast<int>(a.dim);
    r.theta = a.theta == 0 ? m.theta : a.theta;
    r.rescale = a.theta_rescale == 0 ? 1 : a.theta_rescale;
    r.interpolation = a.interpolation == 0 ? 1 : a.interpolation;
    axes.push_back(r);
  }
  return reference::AxialFrequencies(axes);
}

absl::StatusOr<std::vector<double>> RotateDecoded(Engine& engine, RotateParams params,
                                                  const test::HostTensor& q) {
  test::HostTensor copy = q;
  params.q = copy.view();
  absl::Status status = engine.Rotate(params);
  if (!status.ok()) return status;
  return test::Decode(copy);
}

class AxialTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string skip;
    engine_ = test::MakeCpuTestEngine(&skip);
    if (engine_ == nullptr) GTEST_SKIP() << skip;
  }
  // An engine with the server's default max_len cap (2^24).
  static std::unique_ptr<Engine> LongEngine() {
    auto backend = NewCpuBackend(2);
    EXPECT_TRUE(backend.ok()) << backend.status();
    if (!backend.ok()) return nullptr;
    EngineLimits limits;
    limits.table_cache_bytes = 64ll << 20;
    return std::make_unique<Engine>(std::move(backend).value(), limits);
  }
  std::unique_ptr<Engine> engine_;
};

TEST_F(AxialTest, ModelsMatchTheReference) {
  std::mt19937 rng(35);
  constexpr uint32_t kMaxLen = 9000;  // past one 4096-row block per axis
  constexpr int64_t kB = 2, kS = 5, kH = 3;
  for (const Model& model : Models()) {
    const reference::AxialLadder ladder = LadderOf(model);
    const int axes = static_cast<int>(model.axes.size());
    for (Layout layout : {Layout::kInterleaved, Layout::kHalf}) {
      for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
        for (bool per_row : {false, true}) {
          const int64_t rows = per_row ? kB * kS : kS;
          std::uniform_int_distribution<int64_t> pos(0, kMaxLen - 1);
          std::vector<int64_t> positions(axes * rows);
          for (int64_t& p : positions) p = pos(rng);
          const std::vector<double> values =
              test::RandomValues(dtype, kB * kS * kH * model.head_dim, &rng);
          const test::HostTensor q = test::Encode(dtype, {kB, kS, kH, model.head_dim}, values);
          RotateParams params;
          params.config = ConfigOf(model, layout, kMaxLen);
          params.positions = positions;
          const auto got = RotateDecoded(*engine_, params, q);
          ASSERT_TRUE(got.ok()) << model.name << ": " << got.status();
          std::vector<double> want = values;
          reference::RotateAxial(ladder, layout == Layout::kInterleaved, 1, kB, kS, kH,
                                 static_cast<int>(model.head_dim),
                                 std::vector<long double>(positions.begin(), positions.end()),
                                 &want);
          for (size_t i = 0; i < want.size(); ++i) {
            const double tolerance = dtype == DType::kFloat32
                                         ? 2e-6 * (1 + std::abs(want[i]))
                                         : test::StorageUlp(dtype, want[i]) + 1e-6;
            ASSERT_NEAR((*got)[i], want[i], tolerance)
                << model.name << " " << DTypeName(dtype) << " layout "
                << static_cast<int>(layout) << " per_row " << per_row << " element " << i;
          }
        }
      }
    }
  }
}

TEST_F(AxialTest, StartPositionsPutEveryAxisAtTheSamePosition) {
  std::mt19937 rng(5);
  const Model model = Models()[2];  // HunyuanVideo: every formula
  const RopeConfig config = ConfigOf(model, Layout::kInterleaved, 1 << 16);
  const std::vector<double> values = test::RandomValues(DType::kFloat32, 4 * 2 * 128, &rng);
  const test::HostTensor q = test::Encode(DType::kFloat32, {4, 2, 128}, values);
  RotateParams by_start;
  by_start.config = config;
  by_start.start_pos = 40000;
  const auto got = RotateDecoded(*engine_, by_start, q);
  ASSERT_TRUE(got.ok()) << got.status();
  RotateParams explicit_positions;
  explicit_positions.config = config;
  for (int a = 0; a < 3; ++a) {
    for (int64_t s = 0; s < 4; ++s) explicit_positions.positions.push_back(40000 + s);
  }
  const auto want = RotateDecoded(*engine_, explicit_positions, q);
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(*got, *want);
}

// q = (1, 0) in every pair, rotated, is (cos, sin) of each pair's angle as
// the engine stored it: every value must be the float32 rounding of the
// exact one, at positions up to 2^24 - 1 on every axis.
TEST_F(AxialTest, ExactToFloat32RoundingBelow2To24) {
  const Model model = Models()[0];  // Flux
  constexpr uint32_t kMaxLen = 1u << 24;
  const RopeConfig config = ConfigOf(model, Layout::kInterleaved, kMaxLen);
  const reference::AxialLadder ladder = LadderOf(model);
  const std::vector<std::vector<int64_t>> rows = {
      {kMaxLen - 1, 0, 1 << 20},       // axis t, h, w of token 0
      {1 << 14, kMaxLen - 1, 131071},  // token 1
      {4095, 4096, kMaxLen - 4097},    // block edges
      {10485759, 1 << 17, kMaxLen - 1}};
  const int64_t seq = static_cast<int64_t>(rows.size());
  std::vector<int64_t> positions(3 * seq);
  for (int64_t s = 0; s < seq; ++s) {
    for (int a = 0; a < 3; ++a) positions[a * seq + s] = rows[s][a];
  }
  std::vector<double> unit(seq * 128, 0.0);
  for (int64_t i = 0; i < seq * 64; ++i) unit[2 * i] = 1.0;
  RotateParams params;
  params.config = config;
  params.positions = positions;
  const std::unique_ptr<Engine> engine = LongEngine();
  ASSERT_NE(engine, nullptr);
  const auto got = RotateDecoded(*engine, params, test::Encode(DType::kFloat32, {seq, 1, 128}, unit));
  ASSERT_TRUE(got.ok()) << got.status();
  double worst = 0;
  for (int64_t s = 0; s < seq; ++s) {
    for (int i = 0; i < 64; ++i) {
      const long double angle = positions[ladder.axis_of_pair[i] * seq + s] * ladder.rate[i];
      const double c = (*got)[s * 128 + 2 * i], sn = (*got)[s * 128 + 2 * i + 1];
      worst = std::max({worst, static_cast<double>(std::fabs(c - std::cos(angle))),
                        static_cast<double>(std::fabs(sn - std::sin(angle)))});
    }
  }
  // float32 rounding of a value in [-1, 1] is within 2^-25 (3e-8); the
  // design's contract is 1.2e-7.
  EXPECT_LT(worst, 6e-8);
}

// Past Engine::kRequestRowsChunk tokens the CPU rotates a call in chunks
// of rows made one chunk at a time: shared rows (S, every batch row) and
// per-row ones (B*S), integer and fractional, must all land on their tokens.
TEST_F(AxialTest, LongCallsRotateInChunks) {
  std::mt19937 rng(29);
  const Model model = {"small", 8, 0, 100, {{4, 0, 0, 0}, {4, 0, 2, 0.5}}};
  const RopeConfig config = ConfigOf(model, Layout::kHalf, 60000);
  const reference::AxialLadder ladder = LadderOf(model);
  constexpr int64_t kB = 2, kS = Engine::kRequestRowsChunk + 905, kH = 2;
  const std::vector<double> values = test::RandomValues(DType::kFloat32, kB * kS * kH * 8, &rng);
  const test::HostTensor q = test::Encode(DType::kFloat32, {kB, kS, kH, 8}, values);
  std::uniform_int_distribution<int64_t> pos(0, 59999);
  for (int64_t rows : {kS, kB * kS}) {
    for (bool fractional : {false, true}) {
      RotateParams params;
      params.config = config;
      std::vector<long double> want_positions;
      for (int64_t i = 0; i < 2 * rows; ++i) {
        const int64_t p = pos(rng);
        if (fractional) {
          params.fractional_positions.push_back(p + 0.25);
          want_positions.push_back(p + 0.25L);
        } else {
          params.positions.push_back(p);
          want_positions.push_back(p);
        }
      }
      const auto got = RotateDecoded(*engine_, params, q);
      ASSERT_TRUE(got.ok()) << got.status();
      std::vector<double> want = values;
      reference::RotateAxial(ladder, false, 1, kB, kS, kH, 8, want_positions, &want);
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR((*got)[i], want[i], 2e-6 * (1 + std::abs(want[i])))
            << "rows " << rows << " fractional " << fractional << " element " << i;
      }
      // Out of place (into q_out): every chunk reads its own tokens of q
      // and writes them to q_out, leaving q as it was.
      test::HostTensor in_place = q, in = q, out = q;
      std::fill(out.bytes.begin(), out.bytes.end(), 0xee);
      params.q = in_place.view();
      ASSERT_TRUE(engine_->Rotate(params).ok());
      params.q = in.view();
      params.q_out = out.view();
      const absl::Status status = engine_->Rotate(params);
      ASSERT_TRUE(status.ok()) << status;
      EXPECT_EQ(out.bytes, in_place.bytes) << "rows " << rows << " fractional " << fractional;
      EXPECT_EQ(in.bytes, q.bytes) << "the input q was written";
    }
  }
}

TEST_F(AxialTest, OneAxisIsPlainRopeBitForBit) {
  std::mt19937 rng(9);
  RopeConfig plain;
  plain.theta = 500000;
  plain.head_dim = 64;
  plain.max_len = 8192;
  RopeConfig axial = plain;
  axial.axial.axes = {{64, 0, 0, 0}};
  const test::HostTensor q = test::Encode(DType::kBFloat16, {2, 3, 2, 64},
                                          test::RandomValues(DType::kBFloat16, 768, &rng));
  for (const std::vector<int64_t>& positions :
       {std::vector<int64_t>{}, std::vector<int64_t>{5, 4097, 8191},
        std::vector<int64_t>{1, 2, 3, 4, 5, 6}}) {
    RotateParams a;
    a.config = plain;
    a.positions = positions;
    if (positions.empty()) a.start_pos = 100;
    RotateParams b = a;
    b.config = axial;
    const auto want = RotateDecoded(*engine_, a, q);
    const auto got = RotateDecoded(*engine_, b, q);
    ASSERT_TRUE(want.ok() && got.ok());
    EXPECT_EQ(*got, *want);
  }
}

TEST_F(AxialTest, AxesThatAgreeShareOneTable) {
  const RopeConfig config = ConfigOf(Models()[0], Layout::kInterleaved, 1024);  // Flux
  const int64_t built_before = engine_->cache_stats().built;
  RotateParams params;
  params.config = config;
  params.positions = {1, 2, 3};  // one token, axes t, h, w
  std::vector<double> zeros(128, 0.5);
  ASSERT_TRUE(RotateDecoded(*engine_, params, test::Encode(DType::kFloat32, {1, 1, 128}, zeros))
                  .ok());
  // The 16-wide table and the 56-wide one (h and w): two blocks, not three.
  EXPECT_EQ(engine_->cache_stats().built - built_before, 2);
  const auto resolved = engine_->ResolveConfig(config);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  ASSERT_EQ(resolved->axis_keys.size(), 3u);
  EXPECT_EQ(resolved->axis_keys[1], resolved->axis_keys[2]);
  EXPECT_EQ(resolved->axis_keys[0].rotary_dim, 16u);
  const reference::AxialLadder ladder = LadderOf(Models()[0]);
  ASSERT_EQ(resolved->inv_freq.size(), ladder.rate.size());
  for (size_t i = 0; i < ladder.rate.size(); ++i) {
    EXPECT_NEAR(resolved->inv_freq[i], static_cast<double>(ladder.rate[i]),
                1e-15 * static_cast<double>(ladder.rate[i]));
  }
  EXPECT_EQ(resolved->config.axial.axes[0].theta, 10000);  // defaults spelled out
  EXPECT_EQ(resolved->config.axial.axes[2].interpolation, 1);
}

TEST_F(AxialTest, GetTablePutsEveryAxisAtTheRowsPosition) {
  const Model model = Models()[2];  // HunyuanVideo
  const RopeConfig config = ConfigOf(model, Layout::kInterleaved, 1 << 20);
  const std::unique_ptr<Engine> engine = LongEngine();
  ASSERT_NE(engine, nullptr);
  const auto slice = engine->GetTable(config, 500000, 9000);  // three blocks
  ASSERT_TRUE(slice.ok()) << slice.status();
  const reference::AxialLadder ladder = LadderOf(model);
  std::vector<float> cos(9000 * 64), sin(9000 * 64);
  slice->table->CopyRows(500000, 9000, cos.data(), sin.data());
  double worst = 0;
  for (int64_t r = 0; r < 9000; ++r) {
    for (int i = 0; i < 64; ++i) {
      const long double angle = (500000 + r) * ladder.rate[i];
      worst = std::max({worst, static_cast<double>(std::fabs(cos[r * 64 + i] - std::cos(angle))),
                        static_cast<double>(std::fabs(sin[r * 64 + i] - std::sin(angle)))});
    }
  }
  EXPECT_LT(worst, 6e-8);
  const std::vector<double> inv = slice->table->inv_freq();
  ASSERT_EQ(inv.size(), 64u);
  EXPECT_NEAR(inv[20], static_cast<double>(ladder.rate[20]), 1e-15);
}

TEST_F(AxialTest, FractionalPositionsAreComputedDirectly) {
  std::mt19937 rng(17);
  constexpr int64_t kB = 2, kS = 3, kH = 2;
  YarnScaling yarn;
  yarn.factor = 4;
  yarn.original_max_position_embeddings = 1024;
  struct Case {
    const char* name;
    RopeConfig config;
    reference::AxialLadder ladder;
    long double factor;
  };
  std::vector<Case> cases;
  {  // plain with YaRN: transformers' inv_freq, and cos and sin times its factor
    RopeConfig c;
    c.theta = 10000;
    c.head_dim = 32;
    c.max_len = 8192;
    c.scaling = yarn;
    reference::AxialLadder l;
    for (double f : reference::YarnInvFreq(10000, 32, 4, 1024, 32, 1)) {
      l.axis_of_pair.push_back(0);
      l.rate.push_back(f);
    }
    cases.push_back({"yarn", c, l, reference::YarnAttentionFactor(4, 0, 0, 0)});
  }
  {  // M-RoPE (chunked [4, 6, 6])
    RopeConfig c;
    c.theta = 1000000;
    c.head_dim = 32;
    c.max_len = 8192;
    c.mrope.section = {4, 6, 6};
    reference::AxialLadder l;
    const std::vector<double> inv = reference::DefaultInvFreq(1000000, 32);
    const std::vector<int> axes = reference::MropeAxes({4, 6, 6}, false, 16);
    for (int i = 0; i < 16; ++i) {
      l.axis_of_pair.push_back(axes[i]);
      l.rate.push_back(inv[i]);
    }
    cases.push_back({"mrope", c, l, 1});
  }
  {  // axial (HunyuanVideo's factors)
    const Model m = Models()[2];
    cases.push_back({"axial", ConfigOf(m, Layout::kInterleaved, 8192), LadderOf(m), 1});
  }
  for (const Case& c : cases) {
    const int axes = c.config.PositionAxes();
    const uint32_t head_dim = c.config.head_dim;
    std::uniform_real_distribution<double> pos(0, 8191);
    std::vector<double> positions(axes * kB * kS);
    for (double& p : positions) p = pos(rng);
    positions[0] = 0.5;
    positions[1] = 4095.25;  // 8192 / 2 - 0.75: YaRN's longer list is not a concern here
    const std::vector<double> values = test::RandomValues(DType::kFloat32, kB * kS * kH * head_dim, &rng);
    RotateParams params;
    params.config = c.config;
    params.fractional_positions = positions;
    const auto got =
        RotateDecoded(*engine_, params, test::Encode(DType::kFloat32, {kB, kS, kH, head_dim}, values));
    ASSERT_TRUE(got.ok()) << c.name << ": " << got.status();
    std::vector<double> want = values;
    reference::RotateAxial(c.ladder, true, c.factor, kB, kS, kH, static_cast<int>(head_dim),
                           std::vector<long double>(positions.begin(), positions.end()), &want);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR((*got)[i], want[i], 2e-6 * (1 + std::abs(want[i]))) << c.name << " " << i;
    }
  }
}

TEST_F(AxialTest, AttentionWithAxialAndFractionalPositions) {
  std::mt19937 rng(23);
  const Model model = Models()[3];  // SAM 2-like, head 64
  const RopeConfig config = ConfigOf(model, Layout::kInterleaved, 4096);
  const reference::AxialLadder ladder = LadderOf(model);
  constexpr int64_t kSq = 3, kSk = 4, kH = 2;
  const std::vector<double> qv = test::RandomValues(DType::kFloat32, kSq * kH * 64, &rng);
  const std::vector<double> kv = test::RandomValues(DType::kFloat32, kSk * kH * 64, &rng);
  const auto scores_of = [&](const std::vector<long double>& qpos,
                             const std::vector<long double>& kpos) {
    std::vector<double> qr = qv, kr = kv;
    reference::RotateAxial(ladder, true, 1, 1, kSq, kH, 64, qpos, &qr);
    reference::RotateAxial(ladder, true, 1, 1, kSk, kH, 64, kpos, &kr);
    std::vector<double> s(kH * kSq * kSk);
    for (int64_t h = 0; h < kH; ++h) {
      for (int64_t i = 0; i < kSq; ++i) {
        for (int64_t j = 0; j < kSk; ++j) {
          double dot = 0;
          for (int d = 0; d < 64; ++d) dot += qr[(i * kH + h) * 64 + d] * kr[(j * kH + h) * 64 + d];
          s[(h * kSq + i) * kSk + j] = dot / 8.0;
        }
      }
    }
    return s;
  };
  const test::HostTensor q = test::Encode(DType::kFloat32, {kSq, kH, 64}, qv);
  const test::HostTensor k = test::Encode(DType::kFloat32, {kSk, kH, 64}, kv);
  {  // start positions: every axis at q_start_pos + i / k_start_pos + j; causal
    AttentionParams p;
    p.config = config;
    p.q = q.const_view();
    p.k = k.const_view();
    p.q_start_pos = 4001;
    p.k_start_pos = 4000;
    p.causal = true;
    std::string scores;
    AttentionOutputs out;
    out.scores.bytes = &scores;
    ASSERT_TRUE(engine_->AttentionScores(p, &out).ok());
    std::vector<long double> qpos, kpos;
    for (int a = 0; a < 2; ++a) {
      for (int64_t i = 0; i < kSq; ++i) qpos.push_back(4001 + i);
      for (int64_t j = 0; j < kSk; ++j) kpos.push_back(4000 + j);
    }
    const std::vector<double> want = scores_of(qpos, kpos);
    const std::vector<double> got = test::DecodeBytes(DType::kFloat32, scores.data(), want.size());
    for (int64_t h = 0; h < kH; ++h) {
      for (int64_t i = 0; i < kSq; ++i) {
        for (int64_t j = 0; j < kSk; ++j) {
          const size_t at = (h * kSq + i) * kSk + j;
          if (4000 + j > 4001 + i) {
            EXPECT_TRUE(std::isinf(got[at]) && got[at] < 0) << at;
          } else {
            EXPECT_NEAR(got[at], want[at], 1e-4) << at;
          }
        }
      }
    }
  }
  {  // fractional positions per axis for q, start positions for k
    AttentionParams p;
    p.config = config;
    p.q = q.const_view();
    p.k = k.const_view();
    p.q_fractional_positions = {0.5, 10.25, 3000.75, 7, 8.5, 1.125};  // [axis][s]
    p.k_start_pos = 2;
    std::string scores;
    AttentionOutputs out;
    out.scores.bytes = &scores;
    ASSERT_TRUE(engine_->AttentionScores(p, &out).ok());
    std::vector<long double> kpos;
    for (int a = 0; a < 2; ++a) {
      for (int64_t j = 0; j < kSk; ++j) kpos.push_back(2 + j);
    }
    const std::vector<double> want = scores_of(
        std::vector<long double>(p.q_fractional_positions.begin(), p.q_fractional_positions.end()),
        kpos);
    const std::vector<double> got = test::DecodeBytes(DType::kFloat32, scores.data(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << i;
  }
  {  // causal with fractional positions: masked by sequence index (q_start_pos + i
     // against k_start_pos + j), rotated by the positions themselves
    const std::vector<double> qf = {0.5, 10.25, 3000.75, 7, 8.5, 1.125};  // [axis][s]
    std::vector<long double> kpos;
    for (int a = 0; a < 2; ++a) {
      for (int64_t j = 0; j < kSk; ++j) kpos.push_back(2 + j);
    }
    const std::vector<double> want =
        scores_of(std::vector<long double>(qf.begin(), qf.end()), kpos);
    // 5000: past max_len (4096), which bounds positions, not sequence indices.
    for (const int64_t q_index : {0, 3, 5000}) {
      AttentionParams p;
      p.config = config;
      p.q = q.const_view();
      p.k = k.const_view();
      p.q_fractional_positions = qf;
      p.q_start_pos = q_index;  // the queries' sequence indices start here
      p.k_start_pos = 2;        // the keys' positions and sequence indices
      p.causal = true;
      std::string scores;
      AttentionOutputs out;
      out.scores.bytes = &scores;
      const absl::Status status = engine_->AttentionScores(p, &out);
      ASSERT_TRUE(status.ok()) << status;
      const std::vector<double> got =
          test::DecodeBytes(DType::kFloat32, scores.data(), want.size());
      int64_t hidden = 0;
      for (int64_t h = 0; h < kH; ++h) {
        for (int64_t i = 0; i < kSq; ++i) {
          for (int64_t j = 0; j < kSk; ++j) {
            const size_t at = (h * kSq + i) * kSk + j;
            if (2 + j > q_index + i) {
              ++hidden;
              EXPECT_TRUE(std::isinf(got[at]) && got[at] < 0) << q_index << " " << at;
            } else {
              EXPECT_NEAR(got[at], want[at], 1e-4) << q_index << " " << at;
            }
          }
        }
      }
      EXPECT_EQ(hidden, q_index == 0 ? kH * (4 + 4 + 3) : q_index == 3 ? kH * (2 + 1 + 0) : 0);
    }
    // Without causal a start position beside fractional ones does nothing.
    AttentionParams p;
    p.config = config;
    p.q = q.const_view();
    p.k = k.const_view();
    p.q_fractional_positions = qf;
    p.q_start_pos = 3;
    std::string scores;
    AttentionOutputs out;
    out.scores.bytes = &scores;
    EXPECT_TRUE(StatusIs(engine_->AttentionScores(p, &out), absl::StatusCode::kInvalidArgument,
                         "q_fractional_positions and its start position (3) are both set "
                         "without causal"));
  }
}

TEST_F(AxialTest, CausalAttentionOverFractionalPositionsWithValues) {
  // bfloat16 q, k, v; both sides fractional (batch-shared); softmax and
  // output against a double reference: rotate the bfloat16 values by the
  // positions, mask by sequence index, softmax, times v.
  std::mt19937 rng(29);
  const Model model = Models()[3];
  const RopeConfig config = ConfigOf(model, Layout::kInterleaved, 4096);
  const reference::AxialLadder ladder = LadderOf(model);
  constexpr int64_t kB = 2, kS = 5, kH = 2, kD = 64, kDv = 8;
  const auto rounded = [&](int64_t n) { return test::RandomValues(DType::kBFloat16, n, &rng); };
  const std::vector<double> qv = rounded(kB * kS * kH * kD), kv = rounded(kB * kS * kH * kD),
                            vv = rounded(kB * kS * kH * kDv);
  std::uniform_real_distribution<double> pos(0, 4000);
  std::vector<double> qf(2 * kS), kf(2 * kS);
  for (double& x : qf) x = pos(rng);
  for (double& x : kf) x = pos(rng);
  AttentionParams p;
  p.config = config;
  const test::HostTensor q = test::Encode(DType::kBFloat16, {kB, kS, kH, kD}, qv);
  const test::HostTensor k = test::Encode(DType::kBFloat16, {kB, kS, kH, kD}, kv);
  const test::HostTensor v = test::Encode(DType::kBFloat16, {kB, kS, kH, kDv}, vv);
  p.q = q.const_view();
  p.k = k.const_view();
  p.v = v.const_view();
  p.q_fractional_positions = qf;
  p.k_fractional_positions = kf;
  p.causal = true;
  p.softmax = true;
  std::string scores, output;
  AttentionOutputs out;
  out.scores.bytes = &scores;
  out.output.bytes = &output;
  const absl::Status status = engine_->AttentionScores(p, &out);
  ASSERT_TRUE(status.ok()) << status;

  std::vector<double> qr = qv, kr = kv;
  reference::RotateAxial(ladder, true, 1, kB, kS, kH, kD,
                         std::vector<long double>(qf.begin(), qf.end()), &qr);
  reference::RotateAxial(ladder, true, 1, kB, kS, kH, kD,
                         std::vector<long double>(kf.begin(), kf.end()), &kr);
  const std::vector<double> got_p =
      test::DecodeBytes(DType::kFloat32, scores.data(), kB * kH * kS * kS);
  const std::vector<double> got_o =
      test::DecodeBytes(DType::kFloat32, output.data(), kB * kS * kH * kDv);
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t h = 0; h < kH; ++h) {
      for (int64_t i = 0; i < kS; ++i) {
        std::vector<double> prob(kS, 0.0);
        double top = -1e300, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < kD; ++d) {
            dot += qr[((b * kS + i) * kH + h) * kD + d] * kr[((b * kS + j) * kH + h) * kD + d];
          }
          prob[j] = dot / 8.0;
          top = std::max(top, prob[j]);
        }
        for (int64_t j = 0; j <= i; ++j) sum += (prob[j] = std::exp(prob[j] - top));
        for (int64_t j = 0; j < kS; ++j) {
          prob[j] = j <= i ? prob[j] / sum : 0.0;
          EXPECT_NEAR(got_p[((b * kH + h) * kS + i) * kS + j], prob[j], 2e-5) << b << h << i << j;
        }
        for (int64_t e = 0; e < kDv; ++e) {
          double o = 0;
          for (int64_t j = 0; j <= i; ++j) o += prob[j] * vv[((b * kS + j) * kH + h) * kDv + e];
          EXPECT_NEAR(got_o[((b * kS + i) * kH + h) * kDv + e], o, 2e-5) << b << h << i << e;
        }
      }
    }
  }
}

TEST_F(AxialTest, MalformedConfigsAndPositionsAreRefused) {
  const RopeConfig flux = ConfigOf(Models()[0], Layout::kInterleaved, 4096);
  const test::HostTensor q = test::Encode(DType::kFloat32, {2, 1, 128}, std::vector<double>(256, 1));
  const auto rotate = [&](const RopeConfig& config, std::vector<int64_t> positions,
                          std::vector<double> fractional = {}) {
    RotateParams p;
    p.config = config;
    p.positions = std::move(positions);
    p.fractional_positions = std::move(fractional);
    return RotateDecoded(*engine_, p, q).status();
  };
  RopeConfig c = flux;
  c.axial.axes[0].dim = 15;
  EXPECT_TRUE(StatusIs(rotate(c, {}), absl::StatusCode::kInvalidArgument,
                       "config.axial.axes[0].dim is 15: must be even and > 0"));
  c = flux;
  c.axial.axes[0].dim = 18;
  EXPECT_TRUE(StatusIs(rotate(c, {}), absl::StatusCode::kInvalidArgument,
                       "config.axial.axes dims [18,56,56] sum to 130: must sum to rotary_dim 128"));
  c = flux;
  c.axial.axes[1].theta = 0.5;
  EXPECT_TRUE(StatusIs(rotate(c, {}), absl::StatusCode::kInvalidArgument,
                       "config.axial.axes[1].theta is 0.5: must be finite and > 1"));
  c = flux;
  c.axial.axes[2].interpolation = -1;
  EXPECT_TRUE(StatusIs(rotate(c, {}), absl::StatusCode::kInvalidArgument,
                       "config.axial.axes[2].interpolation is -1"));
  c = flux;
  c.axial.axes[0].theta_rescale = std::nan("");
  EXPECT_TRUE(StatusIs(rotate(c, {}), absl::StatusCode::kInvalidArgument,
                       "config.axial.axes[0].theta_rescale is nan"));
  c = flux;
  c.mrope.section = {16, 24, 24};
  EXPECT_TRUE(StatusIs(rotate(c, {}), absl::StatusCode::kInvalidArgument,
                       "are both set: give one of them"));
  c = flux;
  c.scaling = LinearScaling{2};
  EXPECT_TRUE(StatusIs(rotate(c, {}), absl::StatusCode::kInvalidArgument,
                       "config.axial is set with scaling linear"));
  c = flux;
  c.hf_config_json = "{}";
  EXPECT_TRUE(StatusIs(rotate(c, {}), absl::StatusCode::kInvalidArgument,
                       "is set with config.hf_config_json"));
  // 3 axes * S = 6 or 3 * B * S = 6 (B = 1 here: rank 3).
  EXPECT_TRUE(StatusIs(rotate(flux, {1, 2, 3, 4}), absl::StatusCode::kInvalidArgument,
                       "positions has 4 values: with config.axial (3 axes) it must be 3*S (6)"));
  EXPECT_TRUE(StatusIs(rotate(flux, {1, 2, 3, 4, 4096, 0}), absl::StatusCode::kOutOfRange,
                       "positions[4] (axis 2, s 0) is 4096: must be < config.max_len 4096"));
  EXPECT_TRUE(StatusIs(rotate(flux, {}, {1, 2, 3, std::nan(""), 5, 6}),
                       absl::StatusCode::kInvalidArgument,
                       "fractional_positions[3] (axis 1, s 1) is nan: must be finite and >= 0"));
  EXPECT_TRUE(StatusIs(rotate(flux, {}, {1, 2, 3, -0.5, 5, 6}), absl::StatusCode::kInvalidArgument,
                       "fractional_positions[3] (axis 1, s 1) is -0.5"));
  EXPECT_TRUE(StatusIs(rotate(flux, {}, {1, 2, 3, 4096.5, 5, 6}), absl::StatusCode::kOutOfRange,
                       "fractional_positions[3] (axis 1, s 1) is 4096.5: must be < config.max_len"));
  EXPECT_TRUE(StatusIs(rotate(flux, {1, 2, 3, 4, 5, 6}, {1, 2, 3, 4, 5, 6}),
                       absl::StatusCode::kInvalidArgument,
                       "fractional_positions (6 values) and positions (6 values) are both set"));
}

}  // namespace
}  // namespace rope
