// RopeTable: the cos/sin ("freqs_cis") rows of one TableKey that a call
// uses: the table's blocks its positions touch (table_block.h), held for the
// call's lifetime, and the lookup of a row by position (TableRows).
//
// A view is cheap to make (a few pointers per block) and immutable; the
// blocks it holds stay alive while it does, even when a cache evicts them.
#ifndef ROPE_ENGINE_ROPE_TABLE_H_
#define ROPE_ENGINE_ROPE_TABLE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/engine/rope_config.h"
#include "core/engine/table_block.h"
#include "core/engine/table_rows.h"

namespace rope {

class RopeTable {
 public:
  using ParallelFill = TableBlock::ParallelFill;

  // A view of `key`'s table holding blocks first_block ..
  // first_block + blocks.size() - 1; blocks[i] is block first_block + i, or
  // null when the call touches no row of it. Every non-null block must be
  // that block of `key`'s table.
  RopeTable(const TableKey& key, int64_t first_block,
            std::vector<std::shared_ptr<const TableBlock>> blocks);
  // rows() points into the view's own arrays.
  RopeTable(const RopeTable&) = delete;
  RopeTable& operator=(const RopeTable&) = delete;

  // Every block of `key`'s table, built now (tests, benchmarks, tools).
  // `parallel_fill`, when given, fills each block on several threads.
  static std::shared_ptr<const RopeTable> Build(const TableKey& key,
                                                const ParallelFill& parallel_fill = nullptr);

  // A table of `rows` rows made for one request (M-RoPE): value i of row r
  // is value i of `source`'s row positions[axis_of_frequency[i]][r]. Every
  // position must be a row `source` holds; axis_of_frequency has
  // source.half() entries, each < 3. Its key is source's with max_len = rows,
  // and per_request() is true: it describes no configuration, so no cache may
  // keep it under that key. Throws std::bad_alloc when memory runs out.
  static std::shared_ptr<const RopeTable> Gather(const RopeTable& source, int64_t rows,
                                                 const std::array<const int64_t*, 3>& positions,
                                                 const std::vector<uint8_t>& axis_of_frequency);

  // A per-request view (request_rows.h): blocks of 2^block_shift rows,
  // slot i block first_block + i (null: not held), filled by the caller;
  // inv_freq() and attention_factor() report the values given here. No
  // cache may keep it under `key`.
  static std::shared_ptr<const RopeTable> ForRequest(
      const TableKey& key, int block_shift, int64_t first_block,
      std::vector<std::shared_ptr<const TableBlock>> blocks, std::vector<double> inv_freq,
      double attention_factor);

  const TableKey& key() const { return key_; }
  bool per_request() const { return per_request_; }
  int64_t max_len() const { return key_.max_len; }
  int half() const { return static_cast<int>(key_.rotary_dim / 2); }
  // Computed from the key on each call (not on any hot path), or those a
  // per-request view was made with.
  std::vector<double> inv_freq() const {
    return reported_.has_value() ? reported_->inv_freq : ComputeInvFreq(key_);
  }
  double attention_factor() const {
    return reported_.has_value() ? reported_->attention_factor : ComputeAttentionFactor(key_);
  }

  // Row of half() values for a position in a block the view holds.
  const float* cos_row(int64_t pos) const { return rows_.Cos(pos); }
  const float* sin_row(int64_t pos) const { return rows_.Sin(pos); }
  // Copies rows [first, first + count) (every one held) to cos_out and
  // sin_out, count * half() values each, across blocks.
  void CopyRows(int64_t first, int64_t count, float* cos_out, float* sin_out) const;
  // The row lookup the kernels take (host pointers).
  const TableRows& rows() const { return rows_; }

  // The blocks: slot i is block first_block() + i (null: not held).
  int block_shift() const { return rows_.block_shift; }
  int64_t first_block() const { return rows_.first_block; }
  int64_t block_slots() const { return static_cast<int64_t>(blocks_.size()); }
  const std::shared_ptr<const TableBlock>& block(int64_t slot) const { return blocks_[slot]; }
  // True when every row in [first, first + count) is in a block held.
  bool HoldsRows(int64_t first, int64_t count) const;

  // Bytes of the blocks the view holds.
  int64_t byte_size() const;

 private:
  struct Reported {
    std::vector<double> inv_freq;
    double attention_factor = 1;
  };

  TableKey key_;
  bool per_request_ = false;
  std::optional<Reported> reported_;
  std::vector<std::shared_ptr<const TableBlock>> blocks_;
  std::vector<const float*> cos_blocks_;
  std::vector<const float*> sin_blocks_;
  TableRows rows_;
};

}  // namespace rope

#endif  // ROPE_ENGINE_ROPE_TABLE_H_
