// Engine::AttentionScores through the tiled pass (every call that sets a
// field beyond today's) on the CPU backend, against the float64 reference
// of reference_attention.h: a grid of sequence lengths (1, 7, 128, 1000,
// 4097 for queries and keys), GQA 32/8 and MQA 32/1, every mask alone and
// combined, soft-capping, sinks, ALiBi, explicit positions, and every
// result (OUTPUT, LSE, TOP_K with ties, KEY_MASS, SCORE_ROWS, SCORES);
// fully masked rows; OUTPUT and LSE against today's scores path where both
// fit; the key-split path of decode.
//
// Cost: one process, the reference only on sampled rows of the large cases
// (KEY_MASS, which sums every row, only on the smaller ones).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/engine/engine.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/cpu_test_engine.h"
#include "tests/unit/reference_attention.h"
#include "tests/unit/reference_axial.h"
#include "tests/unit/reference_rope.h"
#include "tests/unit/test_util.h"

namespace rope {
namespace {

using test::Encode;
using test::HostTensor;
using test::RandomValues;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr uint32_t kMaxLen = 1 << 16;

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  // memcpy's pointers must be valid even for 0 bytes (an empty vector's are null).
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

std::vector<int32_t> Ints(const std::string& bytes) {
  std::vector<int32_t> out(bytes.size() / sizeof(int32_t));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(int32_t));
  return out;
}

// How the positions of queries and keys are laid out.
enum class Positions {
  kQueriesLast,   // keys 0.., queries the last Sq positions of the keys (prefill / decode)
  kSame,          // both from position 0
  kQueriesFirst,  // queries 0.., keys after them (causal: fully masked rows)
  kPacked,        // explicit, B*S: sequences packed back to back, positions restarting
  kShuffled,      // explicit, S: distinct positions in random order
  kTree,          // explicit q (speculative decoding: repeated positions), keys 0..
};

struct Case {
  std::string name;
  int64_t batch = 1, sq = 1, sk = 1, hq = 4, hkv = 2, d = 16, dv = 8;
  DType dtype = DType::kFloat32;
  Positions positions = Positions::kQueriesLast;
  bool causal = false;
  std::optional<int64_t> window_left, window_right;
  int64_t chunk_size = 0;
  double scale = 0;
  double softcap = 0;
  bool sinks = false, alibi = false;
  bool softmax = false;
  std::vector<AttentionResult> results = {AttentionResult::kOutput, AttentionResult::kLse};
  int64_t top_k = 0;
  int64_t score_rows_start = 0, score_rows_count = 0;
  int64_t sampled_rows = 24;  // rows per (b, h) checked against the reference; 0: all
};

bool Has(const Case& c, AttentionResult r) {
  return std::find(c.results.begin(), c.results.end(), r) != c.results.end();
}

// The positions of the case, B*S values each (the engine gets them as
// explicit lists, or as start positions where the layout is start-based).
struct Layout2 {
  std::vector<int64_t> q, k;  // B*Sq, B*Sk
  int64_t q_start = -1, k_start = -1;  // >= 0: start-based
  std::vector<int64_t> q_list, k_list;  // explicit lists for the engine
};

Layout2 MakePositions(const Case& c, std::mt19937* rng) {
  Layout2 p;
  p.q.resize(c.batch * c.sq);
  p.k.resize(c.batch * c.sk);
  auto fill = [&](int64_t q_start, int64_t k_start) {
    p.q_start = q_start;
    p.k_start = k_start;
    for (int64_t b = 0; b < c.batch; ++b) {
      for (int64_t i = 0; i < c.sq; ++i) p.q[b * c.sq + i] = q_start + i;
      for (int64_t j = 0; j < c.sk; ++j) p.k[b * c.sk + j] = k_start + j;
    }
  };
  switch (c.positions) {
    case Positions::kQueriesLast:
      fill(std::max<int64_t>(0, c.sk - c.sq) + 5, 5);
      break;
    case Positions::kSame:
      fill(0, 0);
      break;
    case Positions::kQueriesFirst:
      fill(0, c.sq + 3);
      break;
    case Positions::kPacked: {
      // Batch row b packs sequences of lengths 3 + 7b, 50, ... back to back.
      for (int64_t b = 0; b < c.batch; ++b) {
        const int64_t first = 3 + 7 * b;
        for (int64_t i = 0; i < c.sq; ++i) p.q[b * c.sq + i] = i < first ? i : (i - first) % 50;
        for (int64_t j = 0; j < c.sk; ++j) p.k[b * c.sk + j] = j < first ? j : (j - first) % 50;
      }
      p.q_list = p.q;
      p.k_list = p.k;
      break;
    }
    case Positions::kShuffled: {
      std::vector<int64_t> q(c.sq), k(c.sk);
      for (int64_t i = 0; i < c.sq; ++i) q[i] = 2 * i + 100;
      for (int64_t j = 0; j < c.sk; ++j) k[j] = 3 * j + 1;
      std::shuffle(q.begin(), q.end(), *rng);
      std::shuffle(k.begin(), k.end(), *rng);
      for (int64_t b = 0; b < c.batch; ++b) {
        std::copy(q.begin(), q.end(), p.q.begin() + b * c.sq);
        std::copy(k.begin(), k.end(), p.k.begin() + b * c.sk);
      }
      p.q_list = q;
      p.k_list = k;
      break;
    }
    case Positions::kTree: {
      // Draft tokens of a speculative tree: depth d at position base + d.
      std::vector<int64_t> q(c.sq);
      for (int64_t i = 0; i < c.sq; ++i) q[i] = c.sk + (i == 0 ? 0 : 1 + (i - 1) / 3);
      for (int64_t b = 0; b < c.batch; ++b) {
        std::copy(q.begin(), q.end(), p.q.begin() + b * c.sq);
        for (int64_t j = 0; j < c.sk; ++j) p.k[b * c.sk + j] = j;
      }
      p.q_list = q;
      p.k_start = 0;
      break;
    }
  }
  return p;
}

std::vector<int64_t> SampledRows(const Case& c) {
  std::set<int64_t> rows;
  if (c.sampled_rows == 0 || c.sq <= c.sampled_rows) {
    for (int64_t i = 0; i < c.sq; ++i) rows.insert(i);
  } else {
    // Both ends, tile edges (256 rows, 64 / 128 tokens) and spread between.
    for (int64_t i : {int64_t{0}, int64_t{1}, c.sq - 2, c.sq - 1, int64_t{63}, int64_t{64},
                      int64_t{127}, int64_t{128}, int64_t{255}, int64_t{256}}) {
      if (i >= 0 && i < c.sq) rows.insert(i);
    }
    for (int64_t n = 0; static_cast<int64_t>(rows.size()) < c.sampled_rows; ++n) {
      rows.insert((n * 7919 + 13) % c.sq);
    }
  }
  if (Has(c, AttentionResult::kScoreRows)) {
    const int64_t count = c.score_rows_count == 0 ? c.sq - c.score_rows_start : c.score_rows_count;
    rows.insert(c.score_rows_start);
    rows.insert(c.score_rows_start + count - 1);
  }
  return {rows.begin(), rows.end()};
}

class LongAttentionTest : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() { engine_ = test::MakeCpuTestEngine(&skip_).release(); }
  static void TearDownTestSuite() {
    delete engine_;
    engine_ = nullptr;
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_NE(engine_, nullptr);
  }
  static Engine* engine_;
  static std::string skip_;
};

Engine* LongAttentionTest::engine_ = nullptr;
std::string LongAttentionTest::skip_;

TEST_P(LongAttentionTest, MatchesReference) {
  const Case& c = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>()(c.name)));
  const Layout2 pos = MakePositions(c, &rng);
  const std::vector<double> qv = RandomValues(c.dtype, c.batch * c.sq * c.hq * c.d, &rng, -1, 1);
  const std::vector<double> kv = RandomValues(c.dtype, c.batch * c.sk * c.hkv * c.d, &rng, -1, 1);
  const std::vector<double> vv = RandomValues(c.dtype, c.batch * c.sk * c.hkv * c.dv, &rng, -1, 1);
  std::vector<float> sinks, slopes;
  for (int64_t h = 0; h < c.hq; ++h) {
    sinks.push_back(static_cast<float>(-1.0 + 0.25 * (h % 16)));
    slopes.push_back(static_cast<float>(std::exp2(-8.0 * (h + 1) / c.hq)));
  }
  HostTensor q = Encode(c.dtype, {c.batch, c.sq, c.hq, c.d}, qv);
  HostTensor k = Encode(c.dtype, {c.batch, c.sk, c.hkv, c.d}, kv);
  HostTensor v = Encode(c.dtype, {c.batch, c.sk, c.hkv, c.dv}, vv);

  AttentionParams params;
  params.config.theta = 10000;
  params.config.head_dim = static_cast<uint32_t>(c.d);
  params.config.max_len = kMaxLen;
  params.q = q.const_view();
  params.k = k.const_view();
  params.v = v.const_view();
  if (pos.q_start >= 0) params.q_start_pos = pos.q_start;
  if (pos.k_start >= 0) params.k_start_pos = pos.k_start;
  params.q_positions = pos.q_list;
  params.k_positions = pos.k_list;
  params.causal = c.causal;
  params.softmax = c.softmax;
  params.scale = c.scale;
  params.results = c.results;
  params.window_left = c.window_left;
  params.window_right = c.window_right;
  params.chunk_size = c.chunk_size;
  params.softcap = c.softcap;
  if (c.sinks) params.sinks = sinks;
  if (c.alibi) params.alibi_slopes = slopes;
  params.top_k = c.top_k;
  params.score_rows_start = c.score_rows_start;
  params.score_rows_count = c.score_rows_count;

  std::string scores, output, lse, top_idx, top_prob, mass, rows;
  AttentionOutputs out;
  out.scores.bytes = &scores;
  out.output.bytes = &output;
  out.lse.bytes = &lse;
  out.top_k_indices.bytes = &top_idx;
  out.top_k_probs.bytes = &top_prob;
  out.key_mass.bytes = &mass;
  out.score_rows.bytes = &rows;
  const absl::Status status = engine_->AttentionScores(params, &out);
  ASSERT_TRUE(status.ok()) << status;

  reference::Rope rope;
  rope.theta = 10000;
  rope.head_dim = static_cast<int>(c.d);
  rope.rotary_dim = static_cast<int>(c.d);
  rope.interleaved = true;
  reference::MaskedAttention spec;
  spec.batch = c.batch;
  spec.q_seq = c.sq;
  spec.k_seq = c.sk;
  spec.q_heads = c.hq;
  spec.k_heads = c.hkv;
  spec.v_dim = c.dv;
  spec.q_pos = pos.q;
  spec.k_pos = pos.k;
  spec.causal = c.causal;
  spec.window_left = c.window_left.value_or(-1);
  spec.window_right = c.window_right.value_or(-1);
  spec.chunk_size = c.chunk_size;
  spec.scale = c.scale != 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.d));
  spec.softcap = c.softcap;
  if (c.sinks) spec.sinks.assign(sinks.begin(), sinks.end());
  if (c.alibi) spec.alibi_slopes.assign(slopes.begin(), slopes.end());
  const reference::AttentionReference ref(rope, spec, qv, kv, &vv);

  const std::vector<float> got_out = Floats(output), got_lse = Floats(lse);
  const std::vector<float> got_scores = Floats(scores), got_prob = Floats(top_prob);
  const std::vector<float> got_mass = Floats(mass), got_rows = Floats(rows);
  const std::vector<int32_t> got_idx = Ints(top_idx);
  const int64_t rows_count =
      c.score_rows_count == 0 ? c.sq - c.score_rows_start : c.score_rows_count;
  if (Has(c, AttentionResult::kOutput)) {
    ASSERT_EQ(out.output.shape, (std::vector<int64_t>{c.batch, c.sq, c.hq, c.dv}));
  }
  if (Has(c, AttentionResult::kLse)) {
    ASSERT_EQ(out.lse.shape, (std::vector<int64_t>{c.batch, c.hq, c.sq}));
  }
  if (Has(c, AttentionResult::kTopK)) {
    ASSERT_EQ(out.top_k_indices.shape, (std::vector<int64_t>{c.batch, c.hq, c.sq, c.top_k}));
  }
  if (Has(c, AttentionResult::kScoreRows)) {
    ASSERT_EQ(out.score_rows.shape, (std::vector<int64_t>{c.batch, c.hq, rows_count, c.sk}));
  }
  EXPECT_EQ(scores.empty(), !Has(c, AttentionResult::kScores));
  EXPECT_EQ(output.empty(), !Has(c, AttentionResult::kOutput));

  int failures = 0;
  auto fail = [&](const std::string& what) {
    if (++failures <= 8) ADD_FAILURE() << what;
  };
  // Float32 error of a logit: the rotations and the D products, a few ulp
  // of |q| |k| scale, and of the logit itself (soft-capping, ALiBi).
  auto close = [](double got, double want, double tol) {
    if (std::isinf(want) || std::isnan(want)) return got == want || (std::isnan(got) && std::isnan(want));
    return std::fabs(got - want) <= tol;
  };
  double max_tol = 0;
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.hq; ++h) {
      for (int64_t i : SampledRows(c)) {
        const reference::ReferenceRow want = ref.Row(b, h, i);
        double max_logit = 0;
        for (double s : want.logits) {
          if (!std::isinf(s)) max_logit = std::max(max_logit, std::fabs(s));
        }
        const double tol = 2e-5 + 6e-7 * max_logit;
        max_tol = std::max(max_tol, tol);
        const std::string where = absl::StrCat("[b ", b, ", h ", h, ", i ", i, "]");
        const int64_t bhi = (b * c.hq + h) * c.sq + i;
        if (Has(c, AttentionResult::kLse) &&
            !close(got_lse[bhi], want.lse, tol + 1e-6 * std::fabs(want.lse))) {
          fail(absl::StrCat("lse", where, " is ", got_lse[bhi], ", want ", want.lse));
        }
        if (Has(c, AttentionResult::kOutput)) {
          for (int64_t d = 0; d < c.dv; ++d) {
            const double g = got_out[((b * c.sq + i) * c.hq + h) * c.dv + d];
            if (!close(g, want.output[d], 3 * tol + 2e-5)) {
              fail(absl::StrCat("output", where, "[", d, "] is ", g, ", want ", want.output[d]));
            }
          }
        }
        auto check_row = [&](const float* got, const char* what) {
          for (int64_t j = 0; j < c.sk; ++j) {
            const double w = c.softmax ? want.probs[j] : want.logits[j];
            const double t = c.softmax ? 3 * tol * w + 1e-6 : tol;
            if (!close(got[j], w, t)) {
              fail(absl::StrCat(what, where, "[", j, "] is ", got[j], ", want ", w));
            }
          }
        };
        if (Has(c, AttentionResult::kScores)) check_row(got_scores.data() + bhi * c.sk, "scores");
        if (Has(c, AttentionResult::kScoreRows) && i >= c.score_rows_start &&
            i < c.score_rows_start + rows_count) {
          check_row(got_rows.data() + ((b * c.hq + h) * rows_count + i - c.score_rows_start) * c.sk,
                    "score_rows");
        }
        if (Has(c, AttentionResult::kTopK)) {
          const int32_t* idx = got_idx.data() + bhi * c.top_k;
          const float* pr = got_prob.data() + bhi * c.top_k;
          const int64_t expect = std::min(c.top_k, want.visible);
          const auto want_top = reference::AttentionReference::TopK(want, c.top_k);
          for (int64_t n = 0; n < c.top_k; ++n) {
            if (n >= expect) {
              if (idx[n] != -1 || pr[n] != 0.0f) {
                fail(absl::StrCat("top_k", where, "[", n, "] is (", idx[n], ", ", pr[n],
                                  "), want padding (-1, 0)"));
              }
              continue;
            }
            if (idx[n] < 0 || idx[n] >= c.sk || std::isinf(want.logits[idx[n]])) {
              fail(absl::StrCat("top_k", where, "[", n, "] is key ", idx[n], ": not visible"));
              continue;
            }
            const double w = want.probs[idx[n]];
            if (!close(pr[n], w, 3 * tol * w + 1e-6)) {
              fail(absl::StrCat("top_k prob", where, "[", n, "] is ", pr[n], ", want ", w));
            }
            if (n > 0 && (pr[n] > pr[n - 1] || (pr[n] == pr[n - 1] && idx[n] < idx[n - 1]))) {
              fail(absl::StrCat("top_k", where, " out of order at ", n));
            }
          }
          // The set: what the reference ranks k-th is no better (to the
          // tolerance) than the engine's last.
          if (expect > 0 && !want_top.empty()) {
            const double last = pr[expect - 1];
            const double kth = want_top.back().second;
            if (kth > last + 3 * tol * kth + 1e-6) {
              fail(absl::StrCat("top_k", where, ": last kept probability ", last,
                                " below the reference's k-th ", kth));
            }
          }
        }
      }
    }
  }
  if (Has(c, AttentionResult::kKeyMass)) {
    ASSERT_EQ(out.key_mass.shape, (std::vector<int64_t>{c.batch, c.hq, c.sk}));
    const std::vector<double> want = ref.KeyMass();
    for (size_t j = 0; j < want.size(); ++j) {
      if (!close(got_mass[j], want[j], (3 * max_tol + 1e-4) * want[j] + 1e-5)) {
        fail(absl::StrCat("key_mass[", j, "] is ", got_mass[j], ", want ", want[j]));
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

std::vector<Case> Grid() {
  std::vector<Case> cases;
  const int64_t lengths[] = {1, 7, 128, 1000, 4097};
  // Every (Sq, Sk) pair, causal with the queries last (prefill / decode),
  // and without a mask: GQA 32/8 and MQA 32/1 where the pair is small,
  // 4/2 and 4/1 heads above (the products grow as Sq x Sk).
  for (int64_t sq : lengths) {
    for (int64_t sk : lengths) {
      for (bool causal : {true, false}) {
        Case c;
        const bool small = sq * sk <= 128 * 1000;
        const bool mqa = (sq + sk + (causal ? 1 : 0)) % 2 == 0;
        c.hq = small ? 32 : 4;
        c.hkv = mqa ? 1 : (small ? 8 : 2);
        c.sq = sq;
        c.sk = sk;
        c.causal = causal;
        if (sq * sk >= 4097 * 1000) c.sampled_rows = 6;
        if (!causal && sq * sk >= 4097 * 4097) continue;  // one 4097 x 4097 case is plenty
        c.name = absl::StrCat("Sq", sq, "_Sk", sk, causal ? "_Causal" : "_NoMask", "_H", c.hq,
                              "_", c.hkv);
        cases.push_back(c);
      }
    }
  }

  // Every mask alone and combined, every transform, every result: Sq 128
  // against Sk 1000 (GQA 32/8 and MQA 32/1 alternately), positions shared
  // from 0 so that windows and chunks cut through the tiles.
  struct Mask {
    const char* name;
    bool causal;
    std::optional<int64_t> left, right;
    int64_t chunk;
  };
  const Mask masks[] = {
      {"None", false, std::nullopt, std::nullopt, 0},
      {"Causal", true, std::nullopt, std::nullopt, 0},
      {"WindowLeft", false, 100, std::nullopt, 0},
      {"WindowRight", false, std::nullopt, 37, 0},
      {"WindowBoth", false, 300, 20, 0},
      {"WindowZero", false, 0, 0, 0},
      {"Chunk", false, std::nullopt, std::nullopt, 96},
      {"CausalWindow", true, 128, std::nullopt, 0},
      {"CausalChunk", true, std::nullopt, std::nullopt, 50},
      {"CausalWindowChunk", true, 40, std::nullopt, 64},
      {"WindowChunk", false, 10, 300, 200},
  };
  struct Transform {
    const char* name;
    double softcap;
    bool sinks, alibi;
  };
  const Transform transforms[] = {
      {"Plain", 0, false, false},   {"Softcap", 2.5, false, false},
      {"Sinks", 0, true, false},    {"Alibi", 0, false, true},
      {"All", 2.5, true, true},
  };
  int n = 0;
  for (const Mask& m : masks) {
    for (const Transform& t : transforms) {
      Case c;
      c.sq = 128;
      c.sk = 1000;
      c.hq = 32;
      c.hkv = n++ % 2 == 0 ? 8 : 1;
      c.d = 16;
      c.positions = Positions::kSame;
      c.causal = m.causal;
      c.window_left = m.left;
      c.window_right = m.right;
      c.chunk_size = m.chunk;
      c.softcap = t.softcap;
      c.scale = t.softcap > 0 ? 1.0 : 0;  // logits up to ~16, then capped
      c.sinks = t.sinks;
      c.alibi = t.alibi;
      c.softmax = n % 3 == 0;
      c.results = {AttentionResult::kOutput, AttentionResult::kLse, AttentionResult::kTopK,
                   AttentionResult::kKeyMass, AttentionResult::kScoreRows};
      c.top_k = 5;
      c.score_rows_start = 60;
      c.score_rows_count = 9;
      c.sampled_rows = 16;
      c.name = absl::StrCat(m.name, "_", t.name, "_H32_", c.hkv);
      cases.push_back(c);
    }
  }

  // Explicit positions: packed sequences (B*S lists), shuffled (S lists),
  // a speculative tree (repeated query positions).
  {
    Case c;
    c.name = "PackedCausal_AllResults";
    c.batch = 2;
    c.sq = c.sk = 300;
    c.hq = 8;
    c.hkv = 2;
    c.positions = Positions::kPacked;
    c.causal = true;
    c.results = {AttentionResult::kOutput, AttentionResult::kLse, AttentionResult::kTopK,
                 AttentionResult::kKeyMass, AttentionResult::kScores};
    c.top_k = 3;
    c.sampled_rows = 0;
    cases.push_back(c);
    c.name = "PackedCausalChunkWindow_Alibi";
    c.chunk_size = 16;
    c.window_left = 9;
    c.alibi = true;
    c.softmax = true;
    cases.push_back(c);
  }
  {
    Case c;
    c.name = "ShuffledWindowCausal_Sinks";
    c.sq = 200;
    c.sk = 700;
    c.hq = 32;
    c.hkv = 8;
    c.positions = Positions::kShuffled;
    c.causal = true;
    c.window_left = 400;
    c.sinks = true;
    c.results = {AttentionResult::kOutput, AttentionResult::kLse, AttentionResult::kTopK,
                 AttentionResult::kKeyMass, AttentionResult::kScoreRows};
    c.top_k = 7;
    c.score_rows_start = 199;
    cases.push_back(c);
    c.name = "ShuffledChunk_Softcap";
    c.causal = false;
    c.window_left.reset();
    c.chunk_size = 128;
    c.sinks = false;
    c.softcap = 1.5;
    c.scale = 1.0;
    c.hkv = 1;
    cases.push_back(c);
  }
  {
    Case c;
    c.name = "SpeculativeTreeCausal";
    c.sq = 13;
    c.sk = 1000;
    c.hq = 32;
    c.hkv = 8;
    c.positions = Positions::kTree;
    c.causal = true;
    c.results = {AttentionResult::kOutput, AttentionResult::kLse, AttentionResult::kTopK};
    c.top_k = 4;
    cases.push_back(c);
  }

  // Fully masked rows: queries before every key under a causal mask, a
  // window that reaches no key, chunks apart; with and without sinks.
  for (bool sinks : {false, true}) {
    Case c;
    c.sq = 40;
    c.sk = 300;
    c.hq = 4;
    c.hkv = 1;
    c.positions = Positions::kQueriesFirst;
    c.causal = true;
    c.sinks = sinks;
    c.results = {AttentionResult::kOutput, AttentionResult::kLse, AttentionResult::kTopK,
                 AttentionResult::kKeyMass, AttentionResult::kScores};
    c.top_k = 3;
    c.softmax = sinks;
    c.sampled_rows = 0;
    c.name = sinks ? "FullyMaskedCausal_Sinks" : "FullyMaskedCausal";
    cases.push_back(c);
    // Without causal: keys start at 43, and window_right 4 lets only query
    // 39 reach key 43.
    c.causal = false;
    c.window_right = 4;
    c.name = sinks ? "FullyMaskedWindow_Sinks" : "FullyMaskedWindow";
    cases.push_back(c);
  }

  // Decode over long keys: few tasks, so pass 1 splits the keys (MQA:
  // one task) and merges.
  for (int64_t hkv : {int64_t{1}, int64_t{8}}) {
    Case c;
    c.sq = 1;
    c.sk = 4097;
    c.hq = 32;
    c.hkv = hkv;
    c.causal = true;
    c.sinks = hkv == 1;
    c.window_left = hkv == 1 ? std::optional<int64_t>(3000) : std::nullopt;
    c.results = {AttentionResult::kOutput, AttentionResult::kLse, AttentionResult::kTopK,
                 AttentionResult::kKeyMass};
    c.top_k = 16;
    c.name = absl::StrCat("DecodeSplitKeys_H32_", hkv);
    cases.push_back(c);
  }

  // Decode in bfloat16 with D = 128 (the skinny tiles' values widened in
  // registers, logits summed in registers), over a key count that is not a
  // multiple of the tile, with every logit transform and a chunked mask.
  for (bool batch2 : {false, true}) {
    Case c;
    c.dtype = DType::kBFloat16;
    c.batch = batch2 ? 2 : 1;
    c.sq = 1;
    c.sk = 2085;
    c.hq = 16;
    c.hkv = 4;
    c.d = 128;
    c.dv = 128;
    c.causal = true;
    c.softcap = 30;
    c.alibi = !batch2;
    c.sinks = batch2;
    c.chunk_size = batch2 ? 1000 : 0;
    c.results = {AttentionResult::kOutput, AttentionResult::kLse};
    c.name = batch2 ? "DecodeBf16_D128_Batch2_Chunks_Sinks" : "DecodeBf16_D128_Softcap_Alibi";
    cases.push_back(c);
  }

  // Storage types and head widths.
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    Case c;
    c.dtype = dtype;
    c.sq = 128;
    c.sk = 1000;
    c.hq = 32;
    c.hkv = 8;
    c.d = 64;
    c.dv = 64;
    c.causal = true;
    c.window_left = 500;
    c.name = dtype == DType::kFloat16 ? "Float16_D64" : "BFloat16_D64";
    cases.push_back(c);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Grid, LongAttentionTest, ::testing::ValuesIn(Grid()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// ---- Properties beyond the grid ------------------------------------------------

class TiledAttentionTest : public LongAttentionTest {};

HostTensor Values(DType dtype, std::vector<int64_t> shape, std::mt19937* rng) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return Encode(dtype, std::move(shape), RandomValues(dtype, n, rng, -1, 1));
}

// OUTPUT and LSE of the tiled pass against today's scores path (the whole
// rows of scores and their P v) where the scores fit.
TEST_F(TiledAttentionTest, OutputAndLseMatchTheScoresPath) {
  for (const bool causal : {false, true}) {
    std::mt19937 rng(causal ? 7 : 8);
    constexpr int64_t B = 2, Sq = 130, Sk = 1000, Hq = 32, Hkv = 8, D = 32, Dv = 16;
    HostTensor q = Values(DType::kFloat32, {B, Sq, Hq, D}, &rng);
    HostTensor k = Values(DType::kFloat32, {B, Sk, Hkv, D}, &rng);
    HostTensor v = Values(DType::kFloat32, {B, Sk, Hkv, Dv}, &rng);
    AttentionParams p;
    p.config.head_dim = D;
    p.config.max_len = kMaxLen;
    p.q = q.const_view();
    p.k = k.const_view();
    p.v = v.const_view();
    p.q_start_pos = Sk - Sq + 17;
    p.k_start_pos = 17;
    p.causal = causal;
    // Today's path: raw scores and P v.
    std::string scores, legacy_output;
    AttentionOutputs legacy;
    legacy.scores.bytes = &scores;
    legacy.output.bytes = &legacy_output;
    ASSERT_TRUE(engine_->AttentionScores(p, &legacy).ok());
    // The tiled pass.
    p.results = {AttentionResult::kOutput, AttentionResult::kLse};
    std::string output, lse;
    AttentionOutputs tiled;
    tiled.output.bytes = &output;
    tiled.lse.bytes = &lse;
    ASSERT_TRUE(engine_->AttentionScores(p, &tiled).ok());
    EXPECT_TRUE(scores.size() > 0 && tiled.scores.shape.empty());

    const std::vector<float> s = Floats(scores), y0 = Floats(legacy_output), y1 = Floats(output),
                             l = Floats(lse);
    int failures = 0;
    for (int64_t row = 0; row < B * Hq * Sq; ++row) {
      double max = -kInf;
      for (int64_t j = 0; j < Sk; ++j) max = std::max<double>(max, s[row * Sk + j]);
      double sum = 0;
      for (int64_t j = 0; j < Sk; ++j) {
        if (!std::isinf(s[row * Sk + j])) sum += std::exp(s[row * Sk + j] - max);
      }
      const double want = max + std::log(sum);
      if (!(std::fabs(l[row] - want) <= 2e-6 * (1 + std::fabs(want))) && ++failures < 5) {
        ADD_FAILURE() << "lse[" << row << "] is " << l[row] << ", from the scores " << want;
      }
    }
    for (size_t i = 0; i < y0.size(); ++i) {
      if (!(std::fabs(y0[i] - y1[i]) <= 2e-6) && ++failures < 10) {
        ADD_FAILURE() << "output[" << i << "] is " << y1[i] << ", the scores path gives " << y0[i];
      }
    }
    EXPECT_EQ(failures, 0) << (causal ? "causal" : "no mask");
  }
}

// OUTPUT and LSE of the tiled pass for `p` (results unset) against today's
// scores path of the same request; `label` names the case.
void ExpectTiledMatchesScoresPath(Engine& engine, AttentionParams p, const std::string& label) {
  std::string scores, legacy_output;
  AttentionOutputs legacy;
  legacy.scores.bytes = &scores;
  legacy.output.bytes = &legacy_output;
  const absl::Status legacy_status = engine.AttentionScores(p, &legacy);
  ASSERT_TRUE(legacy_status.ok()) << label << ": " << legacy_status;
  p.results = {AttentionResult::kOutput, AttentionResult::kLse};
  std::string output, lse;
  AttentionOutputs tiled;
  tiled.output.bytes = &output;
  tiled.lse.bytes = &lse;
  const absl::Status tiled_status = engine.AttentionScores(p, &tiled);
  ASSERT_TRUE(tiled_status.ok()) << label << ": " << tiled_status;
  const std::vector<float> s = Floats(scores), y0 = Floats(legacy_output), y1 = Floats(output),
                           l = Floats(lse);
  const int64_t rows = static_cast<int64_t>(l.size());
  ASSERT_GT(rows, 0) << label;
  const int64_t sk = static_cast<int64_t>(s.size()) / rows;
  ASSERT_EQ(y0.size(), y1.size()) << label;
  int failures = 0;
  for (int64_t row = 0; row < rows; ++row) {
    double max = -kInf;
    for (int64_t j = 0; j < sk; ++j) max = std::max<double>(max, s[row * sk + j]);
    double sum = 0;
    for (int64_t j = 0; j < sk; ++j) {
      if (!std::isinf(s[row * sk + j])) sum += std::exp(s[row * sk + j] - max);
    }
    const double want = std::isinf(max) ? -kInf : max + std::log(sum);
    const bool same = std::isinf(want) ? l[row] == want
                                       : std::fabs(l[row] - want) <= 2e-6 * (1 + std::fabs(want));
    if (!same && ++failures < 5) {
      ADD_FAILURE() << label << ": lse[" << row << "] is " << l[row] << ", from the scores "
                    << want;
    }
  }
  for (size_t i = 0; i < y0.size(); ++i) {
    if (!(std::fabs(y0[i] - y1[i]) <= 2e-6) && ++failures < 10) {
      ADD_FAILURE() << label << ": output[" << i << "] is " << y1[i]
                    << ", the scores path gives " << y0[i];
    }
  }
  EXPECT_EQ(failures, 0) << label;
}

// The config variants the engine resolves before the backend (a rotated
// slice past rotary_offset, NoPE layers with and without temperature
// tuning, axial tables, fractional positions) reach the tiled pass as they
// reach today's scores path.
TEST_F(TiledAttentionTest, ConfigVariantsMatchTheScoresPath) {
  std::mt19937 rng(21);
  constexpr int64_t B = 2, Sq = 40, Sk = 300, Hq = 4, Hkv = 2, D = 16, Dv = 8;
  HostTensor q = Values(DType::kFloat32, {B, Sq, Hq, D}, &rng);
  HostTensor k = Values(DType::kFloat32, {B, Sk, Hkv, D}, &rng);
  HostTensor v = Values(DType::kFloat32, {B, Sk, Hkv, Dv}, &rng);
  AttentionParams base;
  base.config.head_dim = D;
  base.config.max_len = 4096;
  base.q = q.const_view();
  base.k = k.const_view();
  base.v = v.const_view();
  base.q_start_pos = 900;
  base.k_start_pos = 640;
  base.causal = true;

  AttentionParams offset = base;  // features 10..15 rotate (an MLA head's rope part)
  offset.config.rotary_dim = 6;
  offset.config.rotary_offset = 10;
  ExpectTiledMatchesScoresPath(*engine_, offset, "rotary_offset");

  AttentionParams nope = base;
  nope.config.no_rope.enabled = true;
  ExpectTiledMatchesScoresPath(*engine_, nope, "no_rope");
  nope.config.no_rope.floor_scale = 64;
  nope.config.no_rope.attn_scale = 0.1;
  ExpectTiledMatchesScoresPath(*engine_, nope, "no_rope with temperature tuning");

  AttentionParams axial = base;
  axial.config.axial.axes = {AxialAxis{8}, AxialAxis{4}, AxialAxis{4}};
  ExpectTiledMatchesScoresPath(*engine_, axial, "axial");

  AttentionParams fractional = base;
  fractional.causal = false;
  fractional.q_start_pos = 0;
  for (int64_t i = 0; i < Sq; ++i) fractional.q_fractional_positions.push_back(700.25 + 1.5 * i);
  ExpectTiledMatchesScoresPath(*engine_, fractional, "q_fractional_positions");
}

// Fractional positions with masks and ALiBi against the float64 reference:
// those rules compare the tokens' sequence indices (q_start_pos + i,
// k_start_pos + j), never the per-request table's rows, whichever path
// computes the call.
TEST_F(TiledAttentionTest, FractionalPositionsMaskBySequenceIndex) {
  std::mt19937 rng(23);
  constexpr int64_t B = 2, Sq = 7, Sk = 60, Hq = 4, Hkv = 2, D = 16, Dv = 8;
  const std::vector<double> qv = RandomValues(DType::kFloat32, B * Sq * Hq * D, &rng, -1, 1);
  const std::vector<double> kv = RandomValues(DType::kFloat32, B * Sk * Hkv * D, &rng, -1, 1);
  const std::vector<double> vv = RandomValues(DType::kFloat32, B * Sk * Hkv * Dv, &rng, -1, 1);
  HostTensor q = Encode(DType::kFloat32, {B, Sq, Hq, D}, qv);
  HostTensor k = Encode(DType::kFloat32, {B, Sk, Hkv, D}, kv);
  HostTensor v = Encode(DType::kFloat32, {B, Sk, Hkv, Dv}, vv);
  // Positions shared by the batch rows; neither in order nor integers.
  std::vector<double> q_frac, k_frac;
  for (int64_t i = 0; i < Sq; ++i) q_frac.push_back(30.75 + 2.5 * ((i * 3) % Sq));
  for (int64_t j = 0; j < Sk; ++j) k_frac.push_back(0.5 * ((j * 7) % Sk) + 0.125);
  // The reference rotates by the fractional positions itself, then masks
  // by sequence index with no further rotation (rotary_dim 0).
  const reference::AxialLadder ladder = reference::AxialFrequencies({reference::Axis{16}});
  std::vector<double> rq = qv, rk = kv;
  reference::RotateAxial(ladder, /*interleaved=*/true, 1.0L, B, Sq, Hq, D,
                         std::vector<long double>(q_frac.begin(), q_frac.end()), &rq);
  reference::RotateAxial(ladder, /*interleaved=*/true, 1.0L, B, Sk, Hkv, D,
                         std::vector<long double>(k_frac.begin(), k_frac.end()), &rk);
  reference::Rope identity;
  identity.head_dim = D;
  identity.rotary_dim = 0;

  struct Rules {
    const char* name;
    bool causal;
    std::optional<int64_t> window_left, window_right;
    int64_t chunk_size;
    bool alibi;
  };
  const std::vector<float> slopes = {0.5f, 0.25f, 0.125f, 0.0625f};
  for (const Rules& rules : {Rules{"causal + window_left", true, 9, std::nullopt, 0, false},
                             Rules{"window_left + window_right", false, 6, 3, 0, false},
                             Rules{"chunk_size + alibi", false, std::nullopt, std::nullopt, 16,
                                   true},
                             Rules{"alibi alone", false, std::nullopt, std::nullopt, 0, true}}) {
    AttentionParams p;
    p.config.head_dim = D;
    p.config.max_len = 4096;
    p.q = q.const_view();
    p.k = k.const_view();
    p.v = v.const_view();
    p.q_fractional_positions = q_frac;
    p.k_fractional_positions = k_frac;
    p.q_start_pos = Sk - Sq;  // the last Sq tokens of the sequence
    p.k_start_pos = 0;
    p.causal = rules.causal;
    p.window_left = rules.window_left;
    p.window_right = rules.window_right;
    p.chunk_size = rules.chunk_size;
    if (rules.alibi) p.alibi_slopes = slopes;
    p.results = {AttentionResult::kOutput, AttentionResult::kLse};
    std::string output, lse;
    AttentionOutputs out;
    out.output.bytes = &output;
    out.lse.bytes = &lse;
    const absl::Status status = engine_->AttentionScores(p, &out);
    ASSERT_TRUE(status.ok()) << rules.name << ": " << status;

    reference::MaskedAttention spec;
    spec.batch = B;
    spec.q_seq = Sq;
    spec.k_seq = Sk;
    spec.q_heads = Hq;
    spec.k_heads = Hkv;
    spec.v_dim = Dv;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < Sq; ++i) spec.q_pos.push_back(Sk - Sq + i);
      for (int64_t j = 0; j < Sk; ++j) spec.k_pos.push_back(j);
    }
    spec.causal = rules.causal;
    spec.window_left = rules.window_left.value_or(-1);
    spec.window_right = rules.window_right.value_or(-1);
    spec.chunk_size = rules.chunk_size;
    spec.scale = 1.0 / std::sqrt(static_cast<double>(D));
    if (rules.alibi) spec.alibi_slopes.assign(slopes.begin(), slopes.end());
    const reference::AttentionReference ref(identity, spec, rq, rk, &vv);

    const std::vector<float> got_out = Floats(output), got_lse = Floats(lse);
    int failures = 0;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < Hq; ++h) {
        for (int64_t i = 0; i < Sq; ++i) {
          const reference::ReferenceRow want = ref.Row(b, h, i);
          const float l = got_lse[(b * Hq + h) * Sq + i];
          if (!(std::fabs(l - want.lse) <= 1e-4 * (1 + std::fabs(want.lse))) && ++failures < 5) {
            ADD_FAILURE() << rules.name << ": lse (b " << b << ", h " << h << ", i " << i
                          << ") is " << l << ", the reference " << want.lse;
          }
          for (int64_t d = 0; d < Dv; ++d) {
            const float y = got_out[((b * Sq + i) * Hq + h) * Dv + d];
            if (!(std::fabs(y - want.output[d]) <= 1e-4) && ++failures < 5) {
              ADD_FAILURE() << rules.name << ": output (b " << b << ", i " << i << ", h " << h
                            << ", d " << d << ") is " << y << ", the reference "
                            << want.output[d];
            }
          }
        }
      }
    }
    EXPECT_EQ(failures, 0) << rules.name;
  }
}

// What fractional positions cannot mean is refused: an explicit list beside
// them (of either tensor), and a start position with no rule that reads it;
// an axial config takes no one-position-per-token list.
TEST_F(TiledAttentionTest, FractionalAndAxialPositionsRefuseWhatTheyCannotMean) {
  std::mt19937 rng(22);
  HostTensor q = Values(DType::kFloat32, {1, 3, 2, 8}, &rng);
  HostTensor k = Values(DType::kFloat32, {1, 5, 2, 8}, &rng);
  AttentionParams p;
  p.config.head_dim = 8;
  p.config.max_len = 64;
  p.q = q.const_view();
  p.k = k.const_view();
  p.results = {AttentionResult::kLse};
  p.q_fractional_positions = {0.5, 1.5, 2.5};
  std::string lse;
  AttentionOutputs out;
  out.lse.bytes = &lse;
  {
    AttentionParams c = p;
    c.q_positions = {1, 2, 3};
    EXPECT_TRUE(test::StatusIs(engine_->AttentionScores(c, &out),
                               absl::StatusCode::kInvalidArgument,
                               "q_fractional_positions and q_positions (3 values) are both set"));
  }
  {
    AttentionParams c = p;
    c.k_positions = {0, 1, 2, 3, 4};
    EXPECT_TRUE(test::StatusIs(engine_->AttentionScores(c, &out),
                               absl::StatusCode::kInvalidArgument,
                               "k_positions (5 values) is set with q_fractional_positions"));
  }
  {
    AttentionParams c = p;
    c.q_start_pos = 2;
    c.softcap = 30;  // reads no position
    EXPECT_TRUE(test::StatusIs(engine_->AttentionScores(c, &out),
                               absl::StatusCode::kInvalidArgument,
                               "q_fractional_positions and its start position (2) are both set "
                               "without causal (nor a window, chunk_size or alibi_slopes)"));
    c.window_right = 1;  // a rule that compares sequence indices
    const absl::Status status = engine_->AttentionScores(c, &out);
    EXPECT_TRUE(status.ok()) << status;
  }
  {
    AttentionParams c = p;
    c.q_fractional_positions.clear();
    c.config.axial.axes = {AxialAxis{4}, AxialAxis{4}};
    c.k_positions = {0, 1, 2, 3, 4};
    EXPECT_TRUE(test::StatusIs(engine_->AttentionScores(c, &out),
                               absl::StatusCode::kInvalidArgument,
                               "k_positions is set with config.axial"));
  }
  const absl::Status status = engine_->AttentionScores(p, &out);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(lse.size(), 1u * 2 * 3 * sizeof(float));
}

// Keys whose logits are exactly equal: q and k live only past rotary_dim
// (untouched by RoPE) and hold small dyadic values, so every product is
// exact; keys repeat with period 3, so ties come in threes.
TEST_F(TiledAttentionTest, TopKBreaksTiesBySmallerIndex) {
  constexpr int64_t Sq = 5, Sk = 700, H = 2, D = 8;
  std::vector<double> qv(Sq * H * D, 0.0), kv(Sk * H * D, 0.0);
  for (int64_t i = 0; i < Sq * H; ++i) qv[i * D + 6] = 1.0, qv[i * D + 7] = 0.5;
  for (int64_t j = 0; j < Sk; ++j) {
    for (int64_t h = 0; h < H; ++h) {
      kv[(j * H + h) * D + 6] = static_cast<double>((j / 3) % 5) * 0.25;
      kv[(j * H + h) * D + 7] = 0.5;
    }
  }
  HostTensor q = Encode(DType::kFloat32, {1, Sq, H, D}, qv);
  HostTensor k = Encode(DType::kFloat32, {1, Sk, H, D}, kv);
  AttentionParams p;
  p.config.head_dim = D;
  p.config.rotary_dim = 4;
  p.config.max_len = kMaxLen;
  p.q = q.const_view();
  p.k = k.const_view();
  p.scale = 1.0;
  p.results = {AttentionResult::kTopK};
  p.top_k = 10;
  std::string idx, prob;
  AttentionOutputs out;
  out.top_k_indices.bytes = &idx;
  out.top_k_probs.bytes = &prob;
  ASSERT_TRUE(engine_->AttentionScores(p, &out).ok());
  const std::vector<int32_t> got = Ints(idx);
  const std::vector<float> pr = Floats(prob);
  // The best keys have (j / 3) % 5 == 4: j = 12, 13, 14, 27, 28, 29, 42, ...
  const std::vector<int32_t> want = {12, 13, 14, 27, 28, 29, 42, 43, 44, 57};
  for (int64_t row = 0; row < Sq * H; ++row) {
    for (int64_t n = 0; n < 10; ++n) {
      EXPECT_EQ(got[row * 10 + n], want[n]) << "row " << row << ", place " << n;
      EXPECT_EQ(pr[row * 10 + n], pr[row * 10]) << "row " << row << ", place " << n;
    }
  }
}

TEST_F(TiledAttentionTest, TopKPadsRowsThatSeeFewerKeys) {
  constexpr int64_t Sq = 6, Sk = 6, D = 8;
  std::mt19937 rng(3);
  HostTensor q = Values(DType::kFloat32, {Sq, 1, D}, &rng);
  HostTensor k = Values(DType::kFloat32, {Sk, 1, D}, &rng);
  AttentionParams p;
  p.config.head_dim = D;
  p.config.max_len = 64;
  p.q = q.const_view();
  p.k = k.const_view();
  p.causal = true;
  p.results = {AttentionResult::kTopK};
  p.top_k = 4;
  std::string idx, prob;
  AttentionOutputs out;
  out.top_k_indices.bytes = &idx;
  out.top_k_probs.bytes = &prob;
  ASSERT_TRUE(engine_->AttentionScores(p, &out).ok());
  const std::vector<int32_t> got = Ints(idx);
  const std::vector<float> pr = Floats(prob);
  for (int64_t i = 0; i < Sq; ++i) {
    float total = 0;
    for (int64_t n = 0; n < 4; ++n) {
      if (n <= i) {
        EXPECT_GE(got[i * 4 + n], 0);
        EXPECT_LE(got[i * 4 + n], i);
        total += pr[i * 4 + n];
      } else {
        EXPECT_EQ(got[i * 4 + n], -1) << i;
        EXPECT_EQ(pr[i * 4 + n], 0.0f) << i;
      }
    }
    if (i < 4) {
      EXPECT_NEAR(total, 1.0, 1e-6) << i;  // every key it sees
    }
  }
}

// Sinks take probability from the keys: P over real keys sums to 1 -
// exp(sink - LSE), and LSE = log(exp(LSE without sink) + exp(sink)).
TEST_F(TiledAttentionTest, SinksJoinTheDenominator) {
  constexpr int64_t Sq = 3, Sk = 50, H = 2, D = 8;
  std::mt19937 rng(5);
  HostTensor q = Values(DType::kFloat32, {Sq, H, D}, &rng);
  HostTensor k = Values(DType::kFloat32, {Sk, H, D}, &rng);
  AttentionParams p;
  p.config.head_dim = D;
  p.config.max_len = 64;
  p.q = q.const_view();
  p.k = k.const_view();
  p.results = {AttentionResult::kLse, AttentionResult::kScores};
  p.softmax = true;
  std::string lse0, lse1, probs;
  AttentionOutputs out;
  out.scores.bytes = &probs;
  out.lse.bytes = &lse0;
  ASSERT_TRUE(engine_->AttentionScores(p, &out).ok());
  p.sinks = {0.5f, 3.0f};
  out.lse.bytes = &lse1;
  ASSERT_TRUE(engine_->AttentionScores(p, &out).ok());
  const std::vector<float> a = Floats(lse0), b = Floats(lse1), pr = Floats(probs);
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t i = 0; i < Sq; ++i) {
      const double sink = p.sinks[h];
      const double want = std::log(std::exp(a[h * Sq + i]) + std::exp(sink));
      EXPECT_NEAR(b[h * Sq + i], want, 2e-6);
      double total = 0;
      for (int64_t j = 0; j < Sk; ++j) total += pr[(h * Sq + i) * Sk + j];
      EXPECT_NEAR(total, 1.0 - std::exp(sink - b[h * Sq + i]), 2e-6);
      EXPECT_LT(total, 1.0);
    }
  }
}

// SCORES under the new fields: raw logits include soft-capping and ALiBi
// and are -inf where masked; the legacy reply without new fields keeps
// today's bits.
TEST_F(TiledAttentionTest, RawScoresIncludeTransformsAndMask) {
  constexpr int64_t S = 20, D = 8;
  std::mt19937 rng(9);
  HostTensor q = Values(DType::kFloat32, {S, 1, D}, &rng);
  HostTensor k = Values(DType::kFloat32, {S, 1, D}, &rng);
  AttentionParams p;
  p.config.head_dim = D;
  p.config.max_len = 64;
  p.q = q.const_view();
  p.k = k.const_view();
  p.scale = 4.0;
  std::string plain, capped;
  AttentionOutputs out;
  out.scores.bytes = &plain;
  ASSERT_TRUE(engine_->AttentionScores(p, &out).ok());
  p.softcap = 1.0;
  p.alibi_slopes = {0.5f};
  p.window_left = 3;
  out.scores.bytes = &capped;
  ASSERT_TRUE(engine_->AttentionScores(p, &out).ok());
  const std::vector<float> s0 = Floats(plain), s1 = Floats(capped);
  for (int64_t i = 0; i < S; ++i) {
    for (int64_t j = 0; j < S; ++j) {
      const float got = s1[i * S + j];
      if (i - j > 3) {
        EXPECT_EQ(got, -std::numeric_limits<float>::infinity()) << i << "," << j;
        continue;
      }
      const double want = std::tanh(s0[i * S + j] / 1.0) - 0.5 * std::abs(i - j);
      EXPECT_NEAR(got, want, 2e-6) << i << "," << j;
    }
  }
}

TEST_F(TiledAttentionTest, CancelledCallStopsWithCancelled) {
  std::mt19937 rng(4);
  HostTensor q = Values(DType::kFloat32, {1, 300, 4, 16}, &rng);
  HostTensor k = Values(DType::kFloat32, {1, 900, 2, 16}, &rng);
  AttentionParams p;
  p.config.head_dim = 16;
  p.config.max_len = 1024;
  p.q = q.const_view();
  p.k = k.const_view();
  p.results = {AttentionResult::kLse, AttentionResult::kKeyMass};
  std::atomic<int> polls{0};
  const Interrupt cancelled([&polls] { return polls.fetch_add(1) >= 0; }, absl::InfiniteFuture());
  p.interrupt = &cancelled;
  std::string lse, mass;
  AttentionOutputs out;
  out.lse.bytes = &lse;
  out.key_mass.bytes = &mass;
  EXPECT_TRUE(test::StatusIs(engine_->AttentionScores(p, &out), absl::StatusCode::kCancelled,
                             "AttentionScores stopped: the caller cancelled"));
  EXPECT_GT(polls.load(), 0);
}

}  // namespace
}  // namespace rope
