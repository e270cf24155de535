// RopeTable: the cos/sin ("freqs_cis") table of one TableKey, and the
// functions that compute it.
//
// Precision contract: inv_freq and every angle m * inv_freq[i] are computed in
// double; cos/sin are rounded to float32 once at the end. Every stored value
// is within 1.2e-7 of the exact (long double) value at every position < 2^24.
// Llama's float32 precompute_freqs_cis is off by 5.8e-3 at 131072.
#ifndef ROPE_ENGINE_ROPE_TABLE_H_
#define ROPE_ENGINE_ROPE_TABLE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "server/engine/rope_config.h"

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

// Immutable once built; shared between requests through shared_ptr.
// Thread-safe for concurrent readers.
class RopeTable {
 public:
  // Builds the whole table for `key` (max_len rows). `parallel_fill`, when
  // given, is called with (total_rows, fill(begin, end)) and may run the fill
  // on several threads; otherwise the table is built on the calling thread.
  using ParallelFill =
      std::function<void(int64_t rows, const std::function<void(int64_t, int64_t)>& fill)>;
  static std::shared_ptr<const RopeTable> Build(const TableKey& key,
                                                const ParallelFill& parallel_fill = nullptr);

  // A table of `rows` rows made for one request (M-RoPE): value i of row r
  // is value i of `source`'s row positions[axis_of_frequency[i]][r]. Every
  // position must be < source.max_len(); axis_of_frequency has source.half()
  // entries, each < 3. Its key is source's with max_len = rows, and
  // per_request() is true: it describes no configuration, so no cache may
  // keep it under that key. Throws std::bad_alloc when memory runs out.
  static std::shared_ptr<const RopeTable> Gather(const RopeTable& source, int64_t rows,
                                                 const std::array<const int64_t*, 3>& positions,
                                                 const std::vector<uint8_t>& axis_of_frequency);

  const TableKey& key() const { return key_; }
  bool per_request() const { return per_request_; }
  int64_t max_len() const { return key_.max_len; }
  int half() const { return static_cast<int>(key_.rotary_dim / 2); }
  const std::vector<double>& inv_freq() const { return inv_freq_; }
  double attention_factor() const { return attention_factor_; }

  // Row of half() values for a position in [0, max_len).
  const float* cos_row(int64_t pos) const { return cos_.get() + pos * half(); }
  const float* sin_row(int64_t pos) const { return sin_.get() + pos * half(); }
  const float* cos_data() const { return cos_.get(); }
  const float* sin_data() const { return sin_.get(); }

  // Bytes of table storage (cos + sin), what the cache budget counts. The
  // memory a table occupies is within one 4 KiB page per array of this
  // (AllocateStorage), so the budget bounds the cache's resident memory.
  int64_t byte_size() const { return ByteSizeFor(key_); }
  static int64_t ByteSizeFor(const TableKey& key) {
    return static_cast<int64_t>(key.max_len) * (key.rotary_dim / 2) * 2 *
           static_cast<int64_t>(sizeof(float));
  }

 private:
  explicit RopeTable(const TableKey& key) : key_(key) {}
  TableKey key_;
  bool per_request_ = false;
  std::vector<double> inv_freq_;
  double attention_factor_ = 1.0;
  // Frees one array made by AllocateStorage.
  struct StorageFree {
    size_t mapped_bytes;  // > 0: a private mapping of this length; 0: aligned_alloc
    void operator()(float* p) const;
  };
  using Storage = std::unique_ptr<float[], StorageFree>;
  // Uninitialised storage for `count` floats (rope_table.cc says how).
  static Storage AllocateStorage(size_t count);
  Storage cos_;  // [max_len, half]
  Storage sin_;  // [max_len, half]
};

}  // namespace rope

#endif  // ROPE_ENGINE_ROPE_TABLE_H_
