// DeviceTableCache: table blocks (table_block.h) resident in device memory,
// each uploaded once per TableBlockKey as float32 and kept in an LRU within a
// byte budget (the engine's KeyedLruCache policy; the same counters as the
// host cache). A call gets a DeviceTable: the device twin of its host
// RopeTable view, the blocks its positions touch.
//
// Kernels find rows through a small block table (TableRows, table_rows.h):
// per call, the device pointers of its blocks are copied to the device
// (UploadTableRows, cuda_ops.h), and a row is one pointer load away. A
// decode call uploads one block the first time and 16 bytes of pointers
// after that.
//
// Thread-safe. A block evicted while a call still holds its shared_ptr stays
// allocated until the call drops it, which every call does only after its
// lease has waited for its streams (cuda_backend.cc), so no kernel reads
// freed memory. Evicted blocks are freed outside the cache's lock, in stream
// order (cudaFreeAsync): an eviction never waits for the device.
#ifndef ROPE_BACKENDS_CUDA_DEVICE_TABLE_CACHE_H_
#define ROPE_BACKENDS_CUDA_DEVICE_TABLE_CACHE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/backends/cuda/device_memory.h"
#include "core/engine/keyed_lru_cache.h"
#include "core/engine/rope_table.h"
#include "core/engine/table_block.h"

namespace rope {

// One block on the device: [rows, half] float32 cos and sin rows.
struct DeviceBlock {
  DeviceBuffer cos;
  DeviceBuffer sin;
};

// The device blocks of one call, slot for slot as its host RopeTable view.
struct DeviceTable {
  std::vector<std::shared_ptr<const DeviceBlock>> blocks;  // slot i: block first_block + i
  std::vector<const float*> cos_blocks;  // device pointers; null where the view holds none
  std::vector<const float*> sin_blocks;
  int64_t first_block = 0;
  int block_shift = 0;
  int half = 0;
};

class DeviceTableCache {
 public:
  explicit DeviceTableCache(int64_t budget_bytes) : cache_(budget_bytes, "device table-cache") {}

  // The device blocks of `host`'s view, uploading missing ones (synchronously,
  // on the calling thread's current device). RESOURCE_EXHAUSTED when a block
  // (or the view's blocks together) is larger than the budget, or the device
  // is out of memory.
  absl::StatusOr<DeviceTable> Get(const RopeTable& host);

  TableCacheStats stats() const { return cache_.stats(); }

 private:
  KeyedLruCache<TableBlockKey, DeviceBlock> cache_;
};

}  // namespace rope

#endif  // ROPE_BACKENDS_CUDA_DEVICE_TABLE_CACHE_H_
