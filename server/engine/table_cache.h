// TableCache: a byte-bounded LRU cache of host RopeTables keyed by TableKey
// (the KeyedLruCache policy, with RopeTable::Build as the default builder).
//
// Thread-safe. Concurrent lookups of the same missing key build the table
// once: the first caller builds (outside the lock), the others wait for it.
// A table that is evicted while requests still hold it stays alive until
// they drop their shared_ptr; only cached bytes count against the budget.
#ifndef ROPE_ENGINE_TABLE_CACHE_H_
#define ROPE_ENGINE_TABLE_CACHE_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "server/engine/keyed_lru_cache.h"
#include "server/engine/rope_table.h"

namespace rope {

class TableCache {
 public:
  using Builder = std::function<std::shared_ptr<const RopeTable>(const TableKey&)>;

  // `budget_bytes` bounds the bytes of cached tables. `builder` makes a table
  // for a key (RopeTable::Build by default).
  explicit TableCache(int64_t budget_bytes, Builder builder = nullptr);
  TableCache(const TableCache&) = delete;
  TableCache& operator=(const TableCache&) = delete;

  // Returns the table for `key`, building it on a miss and evicting least
  // recently used tables to make room. RESOURCE_EXHAUSTED, naming the sizes,
  // when the table alone is larger than the whole budget or memory runs out
  // while building it.
  absl::StatusOr<std::shared_ptr<const RopeTable>> Get(const TableKey& key);

  TableCacheStats stats() const { return cache_.stats(); }

 private:
  const Builder builder_;
  KeyedLruCache<RopeTable> cache_;
};

}  // namespace rope

#endif  // ROPE_ENGINE_TABLE_CACHE_H_
