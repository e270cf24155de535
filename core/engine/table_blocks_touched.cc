#include "core/engine/table_blocks_touched.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace rope {

void BlocksTouched::Add(int64_t block) {
  if (block == last_) return;
  last_ = block;
  if (static_cast<int64_t>(blocks_.size()) > max_blocks_) return;  // already over: stop
  blocks_.insert(block);
}

void BlocksTouched::AddRange(int64_t first, int64_t count) {
  if (count <= 0) return;
  const int64_t last = (first + count - 1) >> shift_;
  for (int64_t b = first >> shift_; b <= last; ++b) {
    Add(b);
    if (static_cast<int64_t>(blocks_.size()) > max_blocks_) return;
  }
}

void BlocksTouched::AddPositions(const math::PositionSpec& spec) {
  if (spec.count == 0) {
    AddRange(spec.start_pos, spec.seq);
  } else {
    AddList(spec.explicit_positions, spec.count);
  }
}

void BlocksTouched::AddList(const int64_t* positions, int64_t count) {
  for (int64_t i = 0; i < count; ++i) Add(positions[i] >> shift_);
}

absl::StatusOr<std::vector<int64_t>> BlocksTouched::Sorted() const {
  if (static_cast<int64_t>(blocks_.size()) > max_blocks_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the positions touch more than ", max_blocks_, " blocks of ", int64_t{1} << shift_,
        " table rows: over the server's max_table_blocks_per_call limit of ", max_blocks_,
        " (send positions that are closer together, or split the call)"));
  }
  std::vector<int64_t> sorted(blocks_.begin(), blocks_.end());
  std::sort(sorted.begin(), sorted.end());
  return sorted;
}

}  // namespace rope
