#include "server/engine/table_cache.h"

#include <new>

#include "absl/strings/str_cat.h"

namespace rope {

TableCache::TableCache(int64_t budget_bytes, Builder builder)
    : builder_(builder ? std::move(builder)
                       : Builder([](const TableKey& key) { return RopeTable::Build(key); })),
      cache_(budget_bytes, "table-cache") {}

absl::StatusOr<std::shared_ptr<const RopeTable>> TableCache::Get(const TableKey& key) {
  const int64_t size = RopeTable::ByteSizeFor(key);
  return cache_.Get(key, size, [&]() -> absl::StatusOr<std::shared_ptr<const RopeTable>> {
    try {
      return builder_(key);
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(absl::StrCat("out of memory building the table for ",
                                                       key.DebugString(), " (", size, " bytes)"));
    }
  });
}

}  // namespace rope
