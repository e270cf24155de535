// TableRows: where the cos/sin rows of a paged table are, as the kernels
// (CPU and CUDA) read them. A table is cut into blocks of 2^block_shift rows
// (docs/design.md, "The table cache"); a call sees the blocks its positions
// touch, blocks first_block .. first_block + n - 1, through two arrays of
// block pointers. Row `pos` of the table is
//   cos_blocks[(pos >> block_shift) - first_block] + (pos & mask) * half.
// A slot the call's positions do not touch may be null: the engine checks
// every position before a backend runs, so no kernel reads such a slot.
//
// Framework-free and ROPE_HOST_DEVICE, so the CPU tests exercise exactly the
// lookup the GPU runs; on the GPU the pointer arrays live in device memory.
#ifndef ROPE_ENGINE_TABLE_ROWS_H_
#define ROPE_ENGINE_TABLE_ROWS_H_

#include <cstdint>

#include "common/half_float.h"  // ROPE_HOST_DEVICE

namespace rope {

struct TableRows {
  const float* const* cos_blocks = nullptr;
  const float* const* sin_blocks = nullptr;
  int64_t first_block = 0;
  int block_shift = 0;
  int half = 0;  // values per row: rotary_dim / 2

  ROPE_HOST_DEVICE const float* Cos(int64_t pos) const {
    return cos_blocks[(pos >> block_shift) - first_block] + RowOffset(pos);
  }
  ROPE_HOST_DEVICE const float* Sin(int64_t pos) const {
    return sin_blocks[(pos >> block_shift) - first_block] + RowOffset(pos);
  }

 private:
  ROPE_HOST_DEVICE int64_t RowOffset(int64_t pos) const {
    return (pos & ((int64_t{1} << block_shift) - 1)) * half;
  }
};

}  // namespace rope

#endif  // ROPE_ENGINE_TABLE_ROWS_H_
