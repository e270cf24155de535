#include "tests/cuda/backend_cases.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/engine/rope_math.h"

namespace rope {
namespace test {
namespace {

const char* DTypeTag(DType d) {
  switch (d) {
    case DType::kFloat32:
      return "F32";
    case DType::kFloat16:
      return "F16";
    case DType::kBFloat16:
      return "BF16";
    case DType::kFloat8E4M3:
      return "F8E4M3";
    case DType::kFloat8E5M2:
      return "F8E5M2";
  }
  return "?";
}

const char* ModeTag(PositionMode m) {
  switch (m) {
    case PositionMode::kStart:
      return "StartPos";
    case PositionMode::kPerSeq:
      return "PerSeq";
    case PositionMode::kPerToken:
      return "PerToken";
  }
  return "?";
}

// Random values in [-2, 2) stored as `dtype`.
std::vector<uint8_t> RandomBytes(DType dtype, int64_t count, std::mt19937* rng) {
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<uint8_t> bytes(count * DTypeSize(dtype));
  for (int64_t i = 0; i < count; ++i) {
    const float v = dist(*rng);
    if (dtype == DType::kFloat32) {
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    } else {
      const uint16_t h = dtype == DType::kFloat16 ? math::FloatToHalf(v) : math::FloatToBFloat16(v);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
  return bytes;
}

}  // namespace

std::string RotateCase::Name() const {
  return absl::StrCat(DTypeTag(dtype), layout == Layout::kInterleaved ? "Interleaved" : "Half",
                      "_B", batch, "S", seq, "Hq", q_heads, "Hkv", k_heads, "D", head_dim, "R",
                      rotary_dim, rotary_offset != 0 ? absl::StrCat("O", rotary_offset) : "", "_",
                      ModeTag(positions), inverse ? "_Inverse" : "");
}

RotateArgs RotateData::Args(const RotateCase& c) {
  RotateArgs a;
  a.dtype = c.dtype;
  a.layout = c.layout;
  a.inverse = c.inverse;
  a.batch = c.batch;
  a.seq = c.seq;
  a.head_dim = c.head_dim;
  a.rotary_dim = c.rotary_dim;
  a.rotary_offset = c.rotary_offset;
  a.q = q.data();
  a.q_heads = c.q_heads;
  a.k = c.k_heads > 0 ? k.data() : nullptr;
  a.k_heads = c.k_heads;
  a.positions = spec;
  a.positions.explicit_positions = explicit_positions.empty() ? nullptr : explicit_positions.data();
  return a;
}

RotateData MakeRotateData(const RotateCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  RotateData d;
  d.q = RandomBytes(c.dtype, c.batch * c.seq * c.q_heads * c.head_dim, &rng);
  if (c.k_heads > 0) d.k = RandomBytes(c.dtype, c.batch * c.seq * c.k_heads * c.head_dim, &rng);
  std::uniform_int_distribution<int64_t> pos(0, c.max_len - 1);
  d.spec.seq = c.seq;
  switch (c.positions) {
    case PositionMode::kStart:
      d.spec.start_pos = c.max_len - c.seq - 3;  // near the end of the table
      break;
    case PositionMode::kPerSeq:
      d.explicit_positions.resize(c.seq);
      break;
    case PositionMode::kPerToken:
      d.explicit_positions.resize(c.batch * c.seq);
      break;
  }
  for (int64_t& p : d.explicit_positions) p = pos(rng);
  d.spec.count = static_cast<int64_t>(d.explicit_positions.size());
  return d;
}

std::shared_ptr<const RopeTable> PlainTable(int64_t rotary_dim, uint32_t max_len) {
  TableKey key;
  key.theta = 10000.0;
  key.rotary_dim = static_cast<uint32_t>(rotary_dim);
  key.max_len = max_len;
  return RopeTable::Build(key);
}

Backend& CpuBackend() {
  static Backend* const backend = NewCpuBackend(2).value().release();
  return *backend;
}

std::vector<RotateCase> RotateGrid() {
  struct Dims {
    int64_t head_dim, rotary_dim, rotary_offset;
  };
  // 16-byte paths for every dtype/layout; partial rotary on a vector path;
  // shapes that force the one-pair path (12 is not a multiple of 8 elements,
  // a quarter of 6 is not whole); MLA-like heads whose last features rotate
  // (an offset of whole vectors, and one that forces the one-pair path).
  const Dims dims[] = {{64, 64, 0}, {64, 32, 0}, {12, 8, 0}, {6, 2, 0}, {96, 32, 64}, {20, 8, 6}};
  struct Heads {
    int64_t q, k;
  };
  // Any head counts rotate (3 and 2: only attention pairs heads).
  const Heads heads[] = {{4, 4}, {8, 2}, {4, 1}, {3, 0}, {3, 2}};
  std::vector<RotateCase> grid;
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (Layout layout : {Layout::kInterleaved, Layout::kHalf}) {
      for (const Dims& d : dims) {
        for (const Heads& h : heads) {
          RotateCase c;
          c.dtype = dtype;
          c.layout = layout;
          c.batch = 2;
          c.seq = 5;
          c.q_heads = h.q;
          c.k_heads = h.k;
          c.head_dim = d.head_dim;
          c.rotary_dim = d.rotary_dim;
          c.rotary_offset = d.rotary_offset;
          grid.push_back(c);
        }
      }
    }
  }
  return grid;
}

std::string AttentionCase::Name() const {
  return absl::StrCat(DTypeTag(dtype), layout == Layout::kInterleaved ? "Interleaved" : "Half",
                      "_B", batch, "Sq", q_seq, "Sk", k_seq, "Hq", q_heads, "Hkv", k_heads, "D",
                      head_dim, "R", rotary_dim, rotary_offset != 0 ? absl::StrCat("O", rotary_offset) : "",
                      "Dv", v_dim, "_Q", q_start, "K", k_start,
                      causal ? "_Causal" : "", softmax ? "_Softmax" : "");
}

AttentionArgs AttentionData::Args(const AttentionCase& c) {
  AttentionArgs a;
  a.dtype = c.dtype;
  a.layout = c.layout;
  a.batch = c.batch;
  a.q_seq = c.q_seq;
  a.k_seq = c.k_seq;
  a.q_heads = c.q_heads;
  a.k_heads = c.k_heads;
  a.head_dim = c.head_dim;
  a.rotary_dim = c.rotary_dim;
  a.rotary_offset = c.rotary_offset;
  a.v_dim = c.v_dim;
  a.q = q.data();
  a.k = k.data();
  a.v = c.v_dim > 0 ? v.data() : nullptr;
  a.q_positions.start_pos = c.q_start;
  a.q_positions.seq = c.q_seq;
  a.k_positions.start_pos = c.k_start;
  a.k_positions.seq = c.k_seq;
  a.causal = c.causal;
  a.softmax = c.softmax;
  a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  a.scores = scores.data();
  a.output = c.v_dim > 0 ? output.data() : nullptr;
  return a;
}

AttentionData MakeAttentionData(const AttentionCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  AttentionData d;
  d.q = RandomBytes(c.dtype, c.batch * c.q_seq * c.q_heads * c.head_dim, &rng);
  d.k = RandomBytes(c.dtype, c.batch * c.k_seq * c.k_heads * c.head_dim, &rng);
  if (c.v_dim > 0) d.v = RandomBytes(c.dtype, c.batch * c.k_seq * c.k_heads * c.v_dim, &rng);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  d.scores.assign(c.batch * c.q_heads * c.q_seq * c.k_seq, nan);
  if (c.v_dim > 0) d.output.assign(c.batch * c.q_seq * c.q_heads * c.v_dim, nan);
  return d;
}

std::vector<AttentionCase> AttentionGrid() {
  std::vector<AttentionCase> grid;
  struct Shape {
    int64_t batch, q_seq, k_seq, q_heads, k_heads, head_dim, rotary_dim, q_start, k_start;
    int64_t rotary_offset = 0;
  };
  // Prefill (q and k aligned), decode (one query at the end), a query block
  // that starts before the keys (its first rows are fully masked), MQA and
  // GQA, partial rotary, a batch that takes the by-batch GEMM plan, and
  // positions across a table-block edge (kAttentionGridMaxLen).
  const Shape shapes[] = {
      {1, 7, 7, 4, 4, 16, 16, 0, 0},    {2, 1, 9, 4, 2, 16, 16, 8, 0}, {1, 5, 6, 2, 1, 8, 4, 3, 5},
      {1, 4, 40, 6, 3, 12, 8, 100, 70}, {3, 3, 5, 2, 2, 8, 8, 2, 0},
      {1, 6, 8, 2, 1, 16, 16, 4093, 4090},  // across the first table-block edge
      {1, 3, 4, 2, 2, 24, 8, 9, 0, 16},      // MLA-like: the last 8 features rotate
  };
  for (const Shape& s : shapes) {
    for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
      for (Layout layout : {Layout::kInterleaved, Layout::kHalf}) {
        for (int flags = 0; flags < 8; ++flags) {
          AttentionCase c;
          c.dtype = dtype;
          c.layout = layout;
          c.batch = s.batch;
          c.q_seq = s.q_seq;
          c.k_seq = s.k_seq;
          c.q_heads = s.q_heads;
          c.k_heads = s.k_heads;
          c.head_dim = s.head_dim;
          c.rotary_dim = s.rotary_dim;
          c.q_start = s.q_start;
          c.k_start = s.k_start;
          c.rotary_offset = s.rotary_offset;
          c.causal = (flags & 1) != 0;
          c.softmax = (flags & 2) != 0;
          c.v_dim = (flags & 4) != 0 ? 6 : 0;
          grid.push_back(c);
        }
      }
    }
  }
  return grid;
}

std::string TiledAttentionCase::Name() const {
  std::string name = base.Name();
  if (window_left >= 0) absl::StrAppend(&name, "_WL", window_left);
  if (window_right >= 0) absl::StrAppend(&name, "_WR", window_right);
  if (chunk_size > 0) absl::StrAppend(&name, "_Chunk", chunk_size);
  if (softcap > 0) absl::StrAppend(&name, "_Softcap");
  if (sinks) absl::StrAppend(&name, "_Sinks");
  if (alibi) absl::StrAppend(&name, "_Alibi");
  if (explicit_positions) absl::StrAppend(&name, "_Explicit");
  if (scores) absl::StrAppend(&name, "_Scores");
  if (top_k > 0) absl::StrAppend(&name, "_Top", top_k);
  if (key_mass) absl::StrAppend(&name, "_Mass");
  if (score_rows_count > 0) absl::StrAppend(&name, "_Rows", score_rows_start, "x", score_rows_count);
  return name;
}

AttentionArgs TiledAttentionData::Args(const TiledAttentionCase& c) {
  AttentionArgs a = base.Args(c.base);
  a.legacy = false;
  a.mask.causal = c.base.causal;
  a.mask.window_left = c.window_left;
  a.mask.window_right = c.window_right;
  a.mask.chunk_size = c.chunk_size;
  a.softcap = c.softcap;
  a.sinks = c.sinks ? sinks.data() : nullptr;
  a.alibi_slopes = c.alibi ? slopes.data() : nullptr;
  if (c.explicit_positions) {
    a.q_positions.explicit_positions = q_positions.data();
    a.q_positions.count = static_cast<int64_t>(q_positions.size());
    a.k_positions.explicit_positions = k_positions.data();
    a.k_positions.count = static_cast<int64_t>(k_positions.size());
  }
  a.scores = c.scores ? base.scores.data() : nullptr;
  a.output = c.output && c.base.v_dim > 0 ? base.output.data() : nullptr;
  a.lse = c.lse ? lse.data() : nullptr;
  a.top_k = c.top_k;
  a.top_k_indices = c.top_k > 0 ? top_k_indices.data() : nullptr;
  a.top_k_probs = c.top_k > 0 ? top_k_probs.data() : nullptr;
  a.key_mass = c.key_mass ? key_mass.data() : nullptr;
  a.score_rows = c.score_rows_count > 0 ? score_rows.data() : nullptr;
  a.score_rows_start = c.score_rows_start;
  a.score_rows_count = c.score_rows_count;
  return a;
}

TiledAttentionData MakeTiledAttentionData(const TiledAttentionCase& c, uint32_t seed) {
  const AttentionCase& b = c.base;
  TiledAttentionData d;
  d.base = MakeAttentionData(b, seed);
  std::mt19937 rng(seed + 1);
  if (c.explicit_positions) {
    // Per token: queries near the end, keys shuffled below them.
    for (int64_t t = 0; t < b.batch * b.q_seq; ++t) d.q_positions.push_back(b.q_start + t % b.q_seq);
    std::vector<int64_t> keys(b.k_seq);
    for (int64_t j = 0; j < b.k_seq; ++j) keys[j] = b.k_start + 2 * j;
    for (int64_t r = 0; r < b.batch; ++r) {
      std::shuffle(keys.begin(), keys.end(), rng);
      d.k_positions.insert(d.k_positions.end(), keys.begin(), keys.end());
    }
  }
  for (int64_t h = 0; h < b.q_heads; ++h) {
    d.sinks.push_back(-0.5f + 0.75f * static_cast<float>(h % 4));
    d.slopes.push_back(std::exp2(-8.0f * static_cast<float>(h + 1) / static_cast<float>(b.q_heads)));
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t rows = b.batch * b.q_heads * b.q_seq;
  d.lse.assign(rows, nan);
  d.top_k_probs.assign(rows * c.top_k, nan);
  d.top_k_indices.assign(rows * c.top_k, -7);
  d.key_mass.assign(b.batch * b.q_heads * b.k_seq, nan);
  d.score_rows.assign(b.batch * b.q_heads * c.score_rows_count * b.k_seq, nan);
  return d;
}

std::vector<TiledAttentionCase> TiledAttentionGrid() {
  std::vector<TiledAttentionCase> grid;
  struct Shape {
    int64_t batch, q_seq, k_seq, q_heads, k_heads, head_dim, rotary_dim, q_start, k_start;
  };
  // Prefill over more keys than one tile (128 threads), decode, queries
  // before the keys (fully masked under causal), MQA and GQA.
  const Shape shapes[] = {{1, 9, 300, 4, 2, 16, 16, 291, 0},
                          {2, 1, 200, 4, 1, 8, 8, 400, 0},
                          {1, 6, 40, 2, 2, 16, 8, 0, 10}};
  struct Variant {
    bool causal;
    int64_t window_left, window_right, chunk;
    float softcap;
    bool sinks, alibi, explicit_positions, softmax;
  };
  const Variant variants[] = {
      {true, -1, -1, 0, 0, false, false, false, false},
      {false, 50, 3, 0, 0, false, false, false, true},
      {true, 100, -1, 64, 2.5f, true, true, false, false},
      {false, -1, -1, 96, 0, true, false, true, true},
      {true, 30, -1, 0, 0, false, true, true, false},
  };
  for (const Shape& s : shapes) {
    for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
      int n = 0;
      for (const Variant& v : variants) {
        TiledAttentionCase c;
        AttentionCase& b = c.base;
        b.dtype = dtype;
        b.layout = n % 2 == 0 ? Layout::kInterleaved : Layout::kHalf;
        b.batch = s.batch;
        b.q_seq = s.q_seq;
        b.k_seq = s.k_seq;
        b.q_heads = s.q_heads;
        b.k_heads = s.k_heads;
        b.head_dim = s.head_dim;
        b.rotary_dim = s.rotary_dim;
        b.q_start = s.q_start;
        b.k_start = s.k_start;
        b.causal = v.causal;
        b.softmax = v.softmax;
        b.v_dim = 6;
        c.window_left = v.window_left;
        c.window_right = v.window_right;
        c.chunk_size = v.chunk;
        c.softcap = v.softcap;
        c.sinks = v.sinks;
        c.alibi = v.alibi;
        c.explicit_positions = v.explicit_positions;
        c.scores = n % 2 == 1;
        c.key_mass = n % 3 != 1;
        c.top_k = n % 2 == 0 ? 5 : 0;
        c.score_rows_start = s.q_seq > 2 ? 1 : 0;
        c.score_rows_count = n % 3 == 2 ? 1 : 0;
        ++n;
        grid.push_back(c);
      }
    }
  }
  return grid;
}

::testing::AssertionResult CloseToCpu(const std::vector<float>& got, const std::vector<float>& want,
                                      double tolerance) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < got.size(); ++i) {
    const float g = got[i], w = want[i];
    const bool exact = std::isinf(w) || w == 0.0f;
    if (exact ? !(g == w) : !(std::fabs(g - w) <= tolerance * (1.0 + std::fabs(w)))) {
      return ::testing::AssertionFailure() << "element " << i << ": " << g << " vs " << w;
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace test
}  // namespace rope
