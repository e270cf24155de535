// TableCache: a byte-bounded LRU cache of host table blocks (table_block.h),
// keyed by TableBlockKey, that hands each call a RopeTable view of the blocks
// its positions touch (the KeyedLruCache policy; TableBlock::Build is the
// default builder).
//
// Thread-safe. Concurrent lookups of the same missing block build it once:
// the first caller builds (outside the lock), the others wait for it. A
// block a call's view holds (the call "pins" it) is never evicted, so the
// budget bounds every table block in memory, pinned or not: a call whose
// blocks do not fit beside those pinned by calls in flight is refused
// (RESOURCE_EXHAUSTED) before anything is built.
#ifndef ROPE_ENGINE_TABLE_CACHE_H_
#define ROPE_ENGINE_TABLE_CACHE_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/engine/keyed_lru_cache.h"
#include "core/engine/rope_table.h"
#include "core/engine/table_block.h"

namespace rope {

class TableCache {
 public:
  // Makes block `block` of `key`'s table (TableBlock::Build by default).
  using Builder =
      std::function<std::shared_ptr<const TableBlock>(const TableKey& key, int64_t block)>;

  // `budget_bytes` bounds the bytes of cached blocks.
  explicit TableCache(int64_t budget_bytes, Builder builder = nullptr);
  TableCache(const TableCache&) = delete;
  TableCache& operator=(const TableCache&) = delete;

  // A view of `key`'s table holding `blocks` (sorted, distinct, each <
  // TableBlockCount(key)), building the missing ones and evicting least
  // recently used blocks to make room. RESOURCE_EXHAUSTED, naming the sizes,
  // when the blocks together are larger than the whole budget or memory runs
  // out while building one.
  absl::StatusOr<std::shared_ptr<const RopeTable>> Get(const TableKey& key,
                                                       absl::Span<const int64_t> blocks);
  // Every block of the table.
  absl::StatusOr<std::shared_ptr<const RopeTable>> Get(const TableKey& key);

  // Counters in blocks: a miss is a block built, an entry a block resident.
  TableCacheStats stats() const { return cache_.stats(); }

 private:
  const Builder builder_;
  const int64_t budget_bytes_;
  KeyedLruCache<TableBlockKey, TableBlock> cache_;
};

}  // namespace rope

#endif  // ROPE_ENGINE_TABLE_CACHE_H_
