#include "core/engine/request_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

namespace rope {
namespace {

// Rows one task of a parallel fill takes at least: below this, waking a
// thread costs more than copying.
constexpr int64_t kMinParallelRows = 1024;

// The smallest shift whose block holds `rows` rows: a per-request table of
// exactly its rows is one block, indexed from row 0.
int ShiftFor(int64_t rows) {
  int shift = 0;
  while ((int64_t{1} << shift) < rows) ++shift;
  return shift;
}

void RunFill(int64_t rows, const RopeTable::ParallelFill& parallel_fill,
             const std::function<void(int64_t, int64_t)>& fill) {
  if (parallel_fill != nullptr && rows >= 2 * kMinParallelRows) {
    parallel_fill(rows, fill);
  } else {
    fill(0, rows);
  }
}

// Copies row `pos` of each axis table into `cos_out` / `sin_out`, axis after
// axis.
void JoinRow(const std::vector<const RopeTable*>& axis_tables, const int64_t* pos_of_axis,
             float* cos_out, float* sin_out) {
  for (size_t a = 0; a < axis_tables.size(); ++a) {
    const RopeTable& table = *axis_tables[a];
    const size_t bytes = static_cast<size_t>(table.half()) * sizeof(float);
    std::memcpy(cos_out, table.cos_row(pos_of_axis[a]), bytes);
    std::memcpy(sin_out, table.sin_row(pos_of_axis[a]), bytes);
    cos_out += table.half();
    sin_out += table.half();
  }
}

}  // namespace

void FillGatheredRows(const std::vector<const RopeTable*>& axis_tables,
                      const std::vector<const int64_t*>& positions, int64_t first, int64_t count,
                      float* cos_out, float* sin_out) {
  int half = 0;
  for (const RopeTable* table : axis_tables) half += table->half();
  std::vector<int64_t> pos_of_axis(axis_tables.size());
  for (int64_t r = 0; r < count; ++r) {
    for (size_t a = 0; a < axis_tables.size(); ++a) pos_of_axis[a] = positions[a][first + r];
    JoinRow(axis_tables, pos_of_axis.data(), cos_out + r * half, sin_out + r * half);
  }
}

void FillExactRows(const RequestTableInfo& info, const std::vector<uint8_t>& axis_of_pair,
                   const std::vector<const double*>& positions, int64_t first, int64_t count,
                   float* cos_out, float* sin_out) {
  const int half = static_cast<int>(info.inv_freq.size());
  for (int64_t r = 0; r < count; ++r) {
    float* cos_row = cos_out + r * half;
    float* sin_row = sin_out + r * half;
    for (int i = 0; i < half; ++i) {
      // Exact per value: fractional positions share no recurrence.
      const double angle = positions[axis_of_pair[i]][first + r] * info.inv_freq[i];
      cos_row[i] = static_cast<float>(info.attention_factor * std::cos(angle));
      sin_row[i] = static_cast<float>(info.attention_factor * std::sin(angle));
    }
  }
}

EmptyRows MakeEmptyRows(const RequestTableInfo& info, int64_t rows) {
  const int half = static_cast<int>(info.key.rotary_dim / 2);
  std::shared_ptr<TableBlock> block = TableBlock::Allocate(0, rows, half);
  EmptyRows out;
  out.cos = block->mutable_cos();
  out.sin = block->mutable_sin();
  TableKey key = info.key;
  key.max_len = static_cast<uint32_t>(rows);
  out.table = RopeTable::ForRequest(key, ShiftFor(rows), 0, {std::move(block)}, info.inv_freq,
                                    info.attention_factor);
  return out;
}

std::shared_ptr<const RopeTable> ConcatAxes(
    const RequestTableInfo& info, const std::vector<const RopeTable*>& axis_tables,
    const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  const int half = static_cast<int>(info.key.rotary_dim / 2);
  const int shift = axis_tables.front()->block_shift();
  const int64_t block_rows = int64_t{1} << shift;
  // Per block touched: one past the last row used (the block's storage ends
  // there; rows before the first used one are allocated, never touched).
  std::map<int64_t, int64_t> end_of_block;
  for (const auto& [first, count] : ranges) {
    if (count <= 0) continue;
    for (int64_t b = first >> shift; b <= (first + count - 1) >> shift; ++b) {
      const int64_t end = std::min(first + count, (b + 1) * block_rows) - b * block_rows;
      int64_t& known = end_of_block[b];
      known = std::max(known, end);
    }
  }
  const int64_t first_block = end_of_block.empty() ? 0 : end_of_block.begin()->first;
  const int64_t slots = end_of_block.empty() ? 0 : end_of_block.rbegin()->first - first_block + 1;
  std::vector<std::shared_ptr<TableBlock>> blocks(slots);
  for (const auto& [b, end] : end_of_block) {
    blocks[b - first_block] = TableBlock::Allocate(b * block_rows, end, half);
  }
  std::vector<int64_t> pos_of_axis(axis_tables.size());
  for (const auto& [first, count] : ranges) {
    for (int64_t pos = first; pos < first + count; ++pos) {
      TableBlock& block = *blocks[(pos >> shift) - first_block];
      const int64_t row = pos & (block_rows - 1);
      std::fill(pos_of_axis.begin(), pos_of_axis.end(), pos);
      JoinRow(axis_tables, pos_of_axis.data(), block.mutable_cos() + row * half,
              block.mutable_sin() + row * half);
    }
  }
  std::vector<std::shared_ptr<const TableBlock>> held(blocks.begin(), blocks.end());
  return RopeTable::ForRequest(info.key, shift, first_block, std::move(held), info.inv_freq,
                               info.attention_factor);
}

std::shared_ptr<const RopeTable> ExactRows(const RequestTableInfo& info,
                                           const std::vector<uint8_t>& axis_of_pair, int64_t rows,
                                           const std::vector<const double*>& positions,
                                           const RopeTable::ParallelFill& parallel_fill) {
  const EmptyRows empty = MakeEmptyRows(info, rows);
  const int half = empty.table->half();
  float* cos = empty.cos;
  float* sin = empty.sin;
  RunFill(rows, parallel_fill, [&](int64_t begin, int64_t end) {
    FillExactRows(info, axis_of_pair, positions, begin, end - begin, cos + begin * half,
                  sin + begin * half);
  });
  return empty.table;
}

}  // namespace rope
