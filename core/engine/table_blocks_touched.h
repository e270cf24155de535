// BlocksTouched: which blocks of a paged table (table_block.h) a call's
// positions fall in, so that the engine fetches only those.
#ifndef ROPE_ENGINE_TABLE_BLOCKS_TOUCHED_H_
#define ROPE_ENGINE_TABLE_BLOCKS_TOUCHED_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "core/engine/rope_math.h"

namespace rope {

// Collects the distinct blocks (of 2^block_shift rows) that positions touch,
// up to a cap. Positions must already be validated (>= 0, < max_len).
class BlocksTouched {
 public:
  // `max_blocks`: the most distinct blocks one call may touch (the engine's
  // max_table_blocks_per_call).
  BlocksTouched(int block_shift, int64_t max_blocks)
      : shift_(block_shift), max_blocks_(max_blocks) {}

  // Rows [first, first + count).
  void AddRange(int64_t first, int64_t count);
  // Every position of `spec` (start-based: one range; explicit: its list).
  void AddPositions(const math::PositionSpec& spec);
  // `count` explicit positions.
  void AddList(const int64_t* positions, int64_t count);

  // The blocks, ascending. RESOURCE_EXHAUSTED naming the limit when they are
  // more than max_blocks (collection stops at max_blocks + 1).
  absl::StatusOr<std::vector<int64_t>> Sorted() const;

 private:
  void Add(int64_t block);

  const int shift_;
  const int64_t max_blocks_;
  int64_t last_ = -1;  // the block added last: runs of one block cost no hash lookup
  absl::flat_hash_set<int64_t> blocks_;
};

}  // namespace rope

#endif  // ROPE_ENGINE_TABLE_BLOCKS_TOUCHED_H_
