// DeviceTableCache: the cos/sin tables resident in device memory, uploaded
// once per TableKey as float32 and kept in an LRU within a byte budget (the
// engine's KeyedLruCache policy; the same counters as the host cache).
//
// Thread-safe. A table evicted while a call still holds its shared_ptr stays
// allocated until the call drops it, which every call does only after its
// lease has waited for its streams (cuda_backend.cc), so no kernel reads
// freed memory. Evicted tables are freed outside the cache's lock, in stream
// order (cudaFreeAsync): an eviction never waits for the device.
#ifndef ROPE_BACKENDS_CUDA_DEVICE_TABLE_CACHE_H_
#define ROPE_BACKENDS_CUDA_DEVICE_TABLE_CACHE_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "server/backends/cuda/device_memory.h"
#include "server/engine/keyed_lru_cache.h"
#include "server/engine/rope_table.h"

namespace rope {

// One table on the device: [max_len, half] float32 cos and sin rows.
struct DeviceTable {
  DeviceBuffer cos;
  DeviceBuffer sin;
  const float* cos_data() const { return static_cast<const float*>(cos.data()); }
  const float* sin_data() const { return static_cast<const float*>(sin.data()); }
};

class DeviceTableCache {
 public:
  explicit DeviceTableCache(int64_t budget_bytes) : cache_(budget_bytes, "device table-cache") {}

  // The device copy of `host`, uploading it on a miss (synchronously, on the
  // calling thread's current device). RESOURCE_EXHAUSTED when the table is
  // larger than the budget or the device is out of memory.
  absl::StatusOr<std::shared_ptr<const DeviceTable>> Get(const RopeTable& host);

  TableCacheStats stats() const { return cache_.stats(); }

 private:
  KeyedLruCache<DeviceTable> cache_;
};

}  // namespace rope

#endif  // ROPE_BACKENDS_CUDA_DEVICE_TABLE_CACHE_H_
