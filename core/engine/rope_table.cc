#include "core/engine/rope_table.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace rope {

RopeTable::RopeTable(const TableKey& key, int64_t first_block,
                     std::vector<std::shared_ptr<const TableBlock>> blocks)
    : key_(key), blocks_(std::move(blocks)) {
  cos_blocks_.resize(blocks_.size(), nullptr);
  sin_blocks_.resize(blocks_.size(), nullptr);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    if (blocks_[i] == nullptr) continue;
    cos_blocks_[i] = blocks_[i]->cos();
    sin_blocks_[i] = blocks_[i]->sin();
  }
  rows_.cos_blocks = cos_blocks_.data();
  rows_.sin_blocks = sin_blocks_.data();
  rows_.first_block = first_block;
  rows_.block_shift = TableBlockShift(key);
  rows_.half = half();
}

std::shared_ptr<const RopeTable> RopeTable::Build(const TableKey& key,
                                                  const ParallelFill& parallel_fill) {
  std::vector<std::shared_ptr<const TableBlock>> blocks(TableBlockCount(key));
  for (int64_t b = 0; b < static_cast<int64_t>(blocks.size()); ++b) {
    blocks[b] = TableBlock::Build(key, b, parallel_fill);
  }
  return std::make_shared<const RopeTable>(key, 0, std::move(blocks));
}

std::shared_ptr<const RopeTable> RopeTable::Gather(const RopeTable& source, int64_t rows,
                                                   const std::array<const int64_t*, 3>& positions,
                                                   const std::vector<uint8_t>& axis_of_frequency) {
  TableKey key = source.key();
  key.max_len = static_cast<uint32_t>(rows);
  const int half = source.half();
  // One block of all `rows` rows (its shift is not TableBlockShift(key),
  // which caps blocks at 4096 rows: the rows are the request's, not a
  // table's, and live exactly as long as the request).
  std::shared_ptr<TableBlock> block = TableBlock::Allocate(0, rows, half);
  for (int64_t r = 0; r < rows; ++r) {
    float* cos_out = block->mutable_cos() + r * half;
    float* sin_out = block->mutable_sin() + r * half;
    for (int i = 0; i < half; ++i) {
      const int64_t pos = positions[axis_of_frequency[i]][r];
      cos_out[i] = source.cos_row(pos)[i];
      sin_out[i] = source.sin_row(pos)[i];
    }
  }
  std::vector<std::shared_ptr<const TableBlock>> blocks = {std::move(block)};
  auto table = std::make_shared<RopeTable>(key, 0, std::move(blocks));
  table->per_request_ = true;
  int shift = 0;
  while ((int64_t{1} << shift) < rows) ++shift;
  table->rows_.block_shift = shift;
  return table;
}

std::shared_ptr<const RopeTable> RopeTable::ForRequest(
    const TableKey& key, int block_shift, int64_t first_block,
    std::vector<std::shared_ptr<const TableBlock>> blocks, std::vector<double> inv_freq,
    double attention_factor) {
  auto table = std::make_shared<RopeTable>(key, first_block, std::move(blocks));
  table->per_request_ = true;
  table->rows_.block_shift = block_shift;
  table->reported_ = Reported{std::move(inv_freq), attention_factor};
  return table;
}

void RopeTable::CopyRows(int64_t first, int64_t count, float* cos_out, float* sin_out) const {
  const int64_t block_rows = int64_t{1} << block_shift();
  const int64_t row_values = half();
  while (count > 0) {
    // The run of rows from `first` to the end of its block (or of the range).
    const int64_t run = std::min(count, block_rows - (first & (block_rows - 1)));
    std::memcpy(cos_out, cos_row(first), run * row_values * sizeof(float));
    std::memcpy(sin_out, sin_row(first), run * row_values * sizeof(float));
    cos_out += run * row_values;
    sin_out += run * row_values;
    first += run;
    count -= run;
  }
}

bool RopeTable::HoldsRows(int64_t first, int64_t count) const {
  if (count <= 0) return true;
  const int64_t last = first + count - 1;
  if (first < 0 || last >= max_len()) return false;
  for (int64_t b = first >> block_shift(); b <= last >> block_shift(); ++b) {
    const int64_t slot = b - first_block();
    if (slot < 0 || slot >= block_slots() || blocks_[slot] == nullptr) return false;
  }
  return true;
}

int64_t RopeTable::byte_size() const {
  int64_t bytes = 0;
  for (const auto& block : blocks_) {
    if (block != nullptr) bytes += block->byte_size();
  }
  return bytes;
}

}  // namespace rope
