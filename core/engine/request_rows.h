// Tables made for one call (per-request RopeTables): the rows a call's
// tokens rotate by when no cached table holds them as they are, so that the
// backends rotate token r by row r, or position p by row p, exactly as they
// do with a cached table (docs/design.md, "Paged tables"):
//   - FillGatheredRows: axial RoPE with a position per axis; row r joins,
//     axis after axis, the rows of each axis' own table at the token's
//     position on that axis (the engine makes them a chunk at a time).
//   - ConcatAxes: axial RoPE with every axis at the same position (start
//     positions, AttentionScores, GetTable); rows are indexed by position
//     like a table's, so masks and row ranges keep their meaning.
//   - ExactRows: fractional positions; every value computed directly in
//     double and rounded to float32 once (the precision of a table row).
// Every table made here is per_request() and reports the inverse
// frequencies and attention factor it was made with. What allocates throws
// std::bad_alloc when memory runs out.
#ifndef ROPE_ENGINE_REQUEST_ROWS_H_
#define ROPE_ENGINE_REQUEST_ROWS_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/engine/rope_table.h"

namespace rope {

// What a per-request table is made for: `key` names it in messages (its
// rotary_dim sets the row width), `inv_freq` (rotary_dim / 2 values) and
// `attention_factor` are what inv_freq() and attention_factor() report.
struct RequestTableInfo {
  TableKey key;
  std::vector<double> inv_freq;
  double attention_factor = 1;
};

// Per-axis positions: rows [first, first + count) of a table whose row r
// joins, axis after axis, axis_tables[a]'s row positions[a][r] (each held
// by its table), into cos_out and sin_out (count * half values each, half
// the sum of the axes' halves).
void FillGatheredRows(const std::vector<const RopeTable*>& axis_tables,
                      const std::vector<const int64_t*>& positions, int64_t first, int64_t count,
                      float* cos_out, float* sin_out);

// Rows [first, first + count) of ExactRows' table likewise (positions[a]
// holds axis a's fractional positions).
void FillExactRows(const RequestTableInfo& info, const std::vector<uint8_t>& axis_of_pair,
                   const std::vector<const double*>& positions, int64_t first, int64_t count,
                   float* cos_out, float* sin_out);

// Rows [first, first + count) of each range, indexed by position: row p
// joins axis_tables[a]'s rows p, axis after axis. Every axis table must hold
// those rows and share one block size; the view's blocks are the blocks the
// ranges touch (only their rows are written).
std::shared_ptr<const RopeTable> ConcatAxes(
    const RequestTableInfo& info, const std::vector<const RopeTable*>& axis_tables,
    const std::vector<std::pair<int64_t, int64_t>>& ranges);

// A per-request table of `rows` rows whose values the caller fills through
// cos and sin (rows * half values each) before the table is used.
struct EmptyRows {
  std::shared_ptr<const RopeTable> table;
  float* cos = nullptr;
  float* sin = nullptr;
};
EmptyRows MakeEmptyRows(const RequestTableInfo& info, int64_t rows);

// `rows` rows computed in double: value i of row r is
//   attention_factor * cos(positions[axis_of_pair[i]][r] * inv_freq[i])
// (and sin), rounded to float32 once. axis_of_pair has rotary_dim / 2
// entries, each indexing `positions`. `parallel_fill`, when given, fills
// rows on several threads.
std::shared_ptr<const RopeTable> ExactRows(const RequestTableInfo& info,
                                           const std::vector<uint8_t>& axis_of_pair, int64_t rows,
                                           const std::vector<const double*>& positions,
                                           const RopeTable::ParallelFill& parallel_fill = nullptr);

}  // namespace rope

#endif  // ROPE_ENGINE_REQUEST_ROWS_H_
