// TableCache: a byte-bounded LRU cache of RopeTables keyed by TableKey.
//
// Thread-safe. Concurrent lookups of the same missing key build the table
// once: the first caller builds (outside the lock), the others wait for it.
// A table that is evicted while requests still hold it stays alive until
// they drop their shared_ptr; only cached bytes count against the budget.
#ifndef ROPE_ENGINE_TABLE_CACHE_H_
#define ROPE_ENGINE_TABLE_CACHE_H_

#include <cstdint>
#include <functional>
#include <list>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/engine/rope_table.h"

namespace rope {

struct TableCacheStats {
  int64_t hits = 0;       // lookups answered from the cache (or a build in flight)
  int64_t misses = 0;     // lookups that built a table
  int64_t evictions = 0;  // tables dropped to stay within the budget
  int64_t entries = 0;    // tables cached now
  int64_t bytes = 0;      // bytes of cached tables now (<= budget_bytes)
  int64_t budget_bytes = 0;
};

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
  // when the table alone is larger than the whole budget.
  absl::StatusOr<std::shared_ptr<const RopeTable>> Get(const TableKey& key);

  TableCacheStats stats() const;

 private:
  struct Entry {
    std::shared_ptr<const RopeTable> table;  // null while being built
    std::list<TableKey>::iterator lru_pos;   // valid once built
  };

  void EvictUntilFits(int64_t incoming_bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t budget_bytes_;
  const Builder builder_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<TableKey, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<TableKey> lru_ ABSL_GUARDED_BY(mu_);  // front = most recent
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t evictions_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace rope

#endif  // ROPE_ENGINE_TABLE_CACHE_H_
