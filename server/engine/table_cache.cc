#include "server/engine/table_cache.h"

#include <new>

#include "absl/strings/str_cat.h"

namespace rope {

TableCache::TableCache(int64_t budget_bytes, Builder builder)
    : budget_bytes_(budget_bytes),
      builder_(builder ? std::move(builder)
                       : Builder([](const TableKey& key) { return RopeTable::Build(key); })) {}

absl::StatusOr<std::shared_ptr<const RopeTable>> TableCache::Get(const TableKey& key) {
  const int64_t size = RopeTable::ByteSizeFor(key);
  if (size > budget_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "table for ", key.DebugString(), " needs ", size,
        " bytes: over the table-cache budget of ", budget_bytes_, " bytes"));
  }
  {
    absl::MutexLock lock(&mu_);
    for (;;) {
      auto it = entries_.find(key);
      if (it == entries_.end()) break;  // not cached, nobody building: build it
      if (it->second.table != nullptr) {
        ++hits_;
        lru_.splice(lru_.begin(), lru_, it->second.lru_pos);
        return it->second.table;
      }
      // Another thread is building this key: wait until it is published or
      // the build is abandoned (entry erased), then look again.
      auto built_or_gone = [this, &key]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        auto found = entries_.find(key);
        return found == entries_.end() || found->second.table != nullptr;
      };
      mu_.Await(absl::Condition(&built_or_gone));
    }
    ++misses_;
    entries_.emplace(key, Entry{});  // placeholder: "being built"
  }

  std::shared_ptr<const RopeTable> table;
  absl::Status build_status;
  try {
    table = builder_(key);
  } catch (const std::bad_alloc&) {
    build_status = absl::ResourceExhaustedError(
        absl::StrCat("out of memory building the table for ", key.DebugString(), " (", size,
                     " bytes)"));
  }
  if (table == nullptr && build_status.ok()) {
    build_status = absl::InternalError(absl::StrCat("table builder returned no table for ",
                                                    key.DebugString()));
  }

  absl::MutexLock lock(&mu_);
  if (!build_status.ok()) {
    entries_.erase(key);  // waiters wake and retry the build themselves
    return build_status;
  }
  EvictUntilFits(size);
  lru_.push_front(key);
  Entry& entry = entries_[key];
  entry.table = table;
  entry.lru_pos = lru_.begin();
  bytes_ += size;
  return table;
}

void TableCache::EvictUntilFits(int64_t incoming_bytes) {
  while (bytes_ + incoming_bytes > budget_bytes_ && !lru_.empty()) {
    const TableKey victim = lru_.back();
    lru_.pop_back();
    auto it = entries_.find(victim);
    bytes_ -= it->second.table->byte_size();
    entries_.erase(it);
    ++evictions_;
  }
}

TableCacheStats TableCache::stats() const {
  absl::MutexLock lock(&mu_);
  TableCacheStats s;
  s.hits = hits_;
  s.misses = misses_;
  s.evictions = evictions_;
  s.entries = static_cast<int64_t>(lru_.size());
  s.bytes = bytes_;
  s.budget_bytes = budget_bytes_;
  return s;
}

}  // namespace rope
