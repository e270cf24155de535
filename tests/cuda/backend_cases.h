// Cases shared by the host kernel-body tests and the GPU tests: random
// tensors, tables, and the CPU backend's answers they are compared with.
// The CPU backend is the oracle here (it is itself tested against an
// independent reference in tests/unit).
#ifndef ROPE_TESTS_CUDA_BACKEND_CASES_H_
#define ROPE_TESTS_CUDA_BACKEND_CASES_H_

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "core/engine/backend.h"
#include "core/engine/rope_table.h"

namespace rope {
namespace test {

// How a case gives positions (math::PositionSpec's three modes).
enum class PositionMode { kStart, kPerSeq, kPerToken };

struct RotateCase {
  DType dtype = DType::kFloat32;
  Layout layout = Layout::kInterleaved;
  int64_t batch = 1, seq = 1, q_heads = 1, k_heads = 1;  // k_heads 0: no k
  int64_t head_dim = 8, rotary_dim = 8, rotary_offset = 0;
  PositionMode positions = PositionMode::kStart;
  bool inverse = false;
  uint32_t max_len = 4096;

  std::string Name() const;
};

// A rotate request's data: random q/k bytes of the dtype and positions.
struct RotateData {
  std::vector<uint8_t> q, k;
  std::vector<int64_t> explicit_positions;
  math::PositionSpec spec;  // points into explicit_positions
  // Arguments over q/k (mutable: rotated in place).
  RotateArgs Args(const RotateCase& c);
};

RotateData MakeRotateData(const RotateCase& c, uint32_t seed);

// The table of plain RoPE (theta 10000) for rotary_dim and max_len.
std::shared_ptr<const RopeTable> PlainTable(int64_t rotary_dim, uint32_t max_len);

// The CPU backend (2 threads), created once.
Backend& CpuBackend();

// A grid of rotate cases: every dtype x layout x rotary fraction (and
// offset) x head grouping (any head counts) x position mode x direction, on
// small shapes.
std::vector<RotateCase> RotateGrid();

struct AttentionCase {
  DType dtype = DType::kFloat32;
  Layout layout = Layout::kInterleaved;
  int64_t batch = 1, q_seq = 1, k_seq = 1, q_heads = 1, k_heads = 1;
  int64_t head_dim = 8, rotary_dim = 8, v_dim = 0;  // v_dim 0: no v
  int64_t rotary_offset = 0;
  int64_t q_start = 0, k_start = 0;
  bool causal = false, softmax = false;

  std::string Name() const;
};

struct AttentionData {
  std::vector<uint8_t> q, k, v;
  std::vector<float> scores, output;  // sized for the case, NaN-filled
  AttentionArgs Args(const AttentionCase& c);
};

AttentionData MakeAttentionData(const AttentionCase& c, uint32_t seed);

// A grid of attention cases: mask x softmax x v x GQA x dtype x layout,
// fully masked rows included.
std::vector<AttentionCase> AttentionGrid();
// The table length AttentionGrid's cases are run with: four 4096-row table
// blocks, so that the case straddling row 4096 reads two of them.
constexpr uint32_t kAttentionGridMaxLen = 3 * 4096 + 100;

// A call of the tiled attention path (AttentionArgs::legacy false): masks,
// transforms, explicit positions and every result.
struct TiledAttentionCase {
  AttentionCase base;  // shapes, dtype, layout, start positions, causal, softmax
  int64_t window_left = -1, window_right = -1, chunk_size = 0;
  float softcap = 0;
  bool sinks = false, alibi = false;
  bool explicit_positions = false;  // per-token lists (shuffled keys)
  bool scores = false, output = true, lse = true, key_mass = false;
  int64_t top_k = 0;  // 0: no TOP_K
  int64_t score_rows_start = 0, score_rows_count = 0;  // count 0: no SCORE_ROWS

  std::string Name() const;
};

struct TiledAttentionData {
  AttentionData base;
  std::vector<int64_t> q_positions, k_positions;
  std::vector<float> sinks, slopes;
  std::vector<float> lse, top_k_probs, key_mass, score_rows;  // NaN-filled
  std::vector<int32_t> top_k_indices;                          // -7-filled
  AttentionArgs Args(const TiledAttentionCase& c);
};

TiledAttentionData MakeTiledAttentionData(const TiledAttentionCase& c, uint32_t seed);

// Tiled cases: each mask and transform, explicit positions, every result,
// fully masked rows, GQA and MQA, on small shapes (table kAttentionGridMaxLen).
std::vector<TiledAttentionCase> TiledAttentionGrid();

// Attention results against the CPU backend's: -inf and 0 must match
// exactly (masking, fully masked rows), other values within
// tolerance * (1 + |want|) (float32 sums in another order).
::testing::AssertionResult CloseToCpu(const std::vector<float>& got, const std::vector<float>& want,
                                      double tolerance);

}  // namespace test
}  // namespace rope

#endif  // ROPE_TESTS_CUDA_BACKEND_CASES_H_
