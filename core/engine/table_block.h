// TableBlock: a fixed run of rows of one TableKey's cos/sin table, the unit
// the table caches build, hold and evict (docs/design.md, "The table cache").
// Paging the tables makes a call cost the rows its positions touch, not
// max_len: a decode call at position 10,000,000 builds one block.
//
// Precision contract: inv_freq and every angle m * inv_freq[i] are computed in
// double; cos/sin are rounded to float32 once at the end. Every stored value
// is within 1.2e-7 of the exact (long double) value at every position < 2^24.
// Llama's float32 precompute_freqs_cis is off by 5.8e-3 at 131072.
#ifndef ROPE_ENGINE_TABLE_BLOCK_H_
#define ROPE_ENGINE_TABLE_BLOCK_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/engine/rope_config.h"

namespace rope {

// inv_freq[i] = theta^(-2i/rotary_dim), i = 0 .. rotary_dim/2 - 1, in double,
// with the key's scaling rule applied (key.theta is already the effective
// base).
std::vector<double> ComputeInvFreq(const TableKey& key);

// Multiplier applied to every cos and sin value (YaRN / LongRoPE attention
// factor); 1 for the other variants.
double ComputeAttentionFactor(const TableKey& key);

// Fills rows [first_pos, first_pos + count) of a table: cos_out[r * half + i]
// = factor * cos(pos_r * inv_freq[i]) (likewise sin), half = inv_freq.size().
// Rows are independent, so callers may fill disjoint ranges in parallel.
void FillTableRows(const std::vector<double>& inv_freq, double factor,
                   int64_t first_pos, int64_t count, float* cos_out, float* sin_out);

// ---- Block geometry -----------------------------------------------------------
// A table of max_len rows is cut into blocks of 2^TableBlockShift rows: 4096
// rows (2 MiB of cos + sin at rotary_dim 128), or the whole table when it is
// shorter (rounded up to a power of two; the last block holds only the rows
// below max_len, so a short table costs exactly its rows, as before paging).
constexpr int kMaxTableBlockShift = 12;

int TableBlockShift(const TableKey& key);
// Blocks of the table: ceil(max_len / 2^shift).
int64_t TableBlockCount(const TableKey& key);
// Rows of block `block` (< TableBlockCount): 2^shift, or fewer for the last.
int64_t TableBlockRows(const TableKey& key, int64_t block);
// Bytes of cos + sin float32 values of block `block`.
int64_t TableBlockBytes(const TableKey& key, int64_t block);
// Bytes of every block of the table: max_len * rotary_dim/2 * 2 * 4.
int64_t TableBytes(const TableKey& key);

// What the caches key a block by.
struct TableBlockKey {
  TableKey table;
  int64_t block = 0;

  friend bool operator==(const TableBlockKey& a, const TableBlockKey& b) {
    return a.block == b.block && a.table == b.table;
  }
  template <typename H>
  friend H AbslHashValue(H h, const TableBlockKey& k) {
    return H::combine(std::move(h), k.table, k.block);
  }
  // For error messages: the table's short form and the block's rows.
  std::string DebugString() const;
};

// Immutable once built; shared between requests through shared_ptr.
// Thread-safe for concurrent readers.
class TableBlock {
 public:
  // (rows, fill(begin, end)): may run fill over [0, rows) on several threads.
  using ParallelFill =
      std::function<void(int64_t rows, const std::function<void(int64_t, int64_t)>& fill)>;

  // Builds block `block` of `key`'s table; on the calling thread, or through
  // `parallel_fill` when given. Throws std::bad_alloc when memory runs out.
  static std::shared_ptr<const TableBlock> Build(const TableKey& key, int64_t block,
                                                 const ParallelFill& parallel_fill = nullptr);

  // Uninitialised storage for `rows` rows of `half` values, whose first row
  // is table row `first_row`; the caller fills every value before sharing it
  // (M-RoPE's per-request rows). Throws std::bad_alloc.
  static std::shared_ptr<TableBlock> Allocate(int64_t first_row, int64_t rows, int half);

  int64_t first_row() const { return first_row_; }
  int64_t rows() const { return rows_; }
  int half() const { return half_; }
  const float* cos() const { return values_.get(); }
  const float* sin() const { return values_.get() + sin_offset_; }
  float* mutable_cos() { return values_.get(); }
  float* mutable_sin() { return values_.get() + sin_offset_; }

  // Bytes of its values (cos + sin), what the cache budgets count. The
  // memory a block occupies exceeds this by under one 4 KiB page and the
  // 60 bytes that may pad cos (AllocateStorage), so the budget bounds the
  // cache's resident memory.
  int64_t byte_size() const { return rows_ * half_ * 2 * static_cast<int64_t>(sizeof(float)); }

 private:
  TableBlock(int64_t first_row, int64_t rows, int half);
  // Frees what AllocateStorage made.
  struct StorageFree {
    size_t mapped_bytes;  // > 0: a private mapping of this length; 0: aligned_alloc
    void operator()(float* p) const;
  };
  using Storage = std::unique_ptr<float[], StorageFree>;
  // Uninitialised storage for `count` floats (table_block.cc says how).
  static Storage AllocateStorage(size_t count);

  int64_t first_row_;
  int64_t rows_;
  int half_;
  // cos [rows, half] then sin [rows, half], in one allocation: a 4096-row
  // block at rotary_dim 128 is then exactly one 2 MiB huge page, where two
  // 1 MiB arrays took 512 faults of 4 KiB pages to build (table_block.cc).
  size_t sin_offset_;  // floats from cos to sin: rows * half, rounded up to 64 bytes
  Storage values_;
};

}  // namespace rope

#endif  // ROPE_ENGINE_TABLE_BLOCK_H_
