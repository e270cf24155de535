// KeyedLruCache<Key, Value>: a byte-bounded LRU cache of immutable values,
// each built at most once at a time. The host table cache (TableCache, table
// blocks in host memory) and the CUDA backend's device table cache (blocks
// uploaded to device memory) are both this one policy, keyed by
// TableBlockKey. Key is hashable with absl::Hash and has DebugString().
//
// Thread-safe. Concurrent lookups of the same missing key build the value
// once: the first caller builds (outside the lock), the others wait for it.
// A value evicted while callers still hold it stays alive until they drop
// their shared_ptr; only cached bytes count against the budget. Evicted
// values are dropped after the cache's lock is released: destroying one may
// be slow (unmapping a large host table, freeing device memory) and must not
// hold up every other lookup.
#ifndef ROPE_ENGINE_KEYED_LRU_CACHE_H_
#define ROPE_ENGINE_KEYED_LRU_CACHE_H_

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace rope {

struct TableCacheStats {
  int64_t hits = 0;       // lookups answered from the cache (or a build in flight)
  int64_t misses = 0;     // lookups that built a value
  int64_t built = 0;      // builds that succeeded (misses less failed builds)
  int64_t evictions = 0;  // values dropped to stay within the budget
  int64_t entries = 0;    // values cached now
  int64_t bytes = 0;      // bytes of cached values now (<= budget_bytes)
  int64_t budget_bytes = 0;
};

template <typename Key, typename Value>
class KeyedLruCache {
 public:
  // Makes the value of one key; called without the cache's lock held. An
  // error is returned to the caller that built and the key is not cached
  // (the next lookup builds again).
  using Builder = std::function<absl::StatusOr<std::shared_ptr<const Value>>()>;

  // `budget_bytes` bounds the bytes of cached values. `name` names the cache
  // in error messages (e.g. "table-cache", "device table-cache").
  KeyedLruCache(int64_t budget_bytes, std::string name)
      : budget_bytes_(budget_bytes), name_(std::move(name)) {}
  KeyedLruCache(const KeyedLruCache&) = delete;
  KeyedLruCache& operator=(const KeyedLruCache&) = delete;

  // Returns the value for `key`, calling `build` on a miss and evicting least
  // recently used values to make room for its `bytes`. RESOURCE_EXHAUSTED,
  // naming the sizes, when `bytes` alone exceeds the whole budget; the
  // builder's own error when it fails; INTERNAL when it returns null.
  absl::StatusOr<std::shared_ptr<const Value>> Get(const Key& key, int64_t bytes,
                                                   const Builder& build) {
    if (bytes > budget_bytes_) {
      return absl::ResourceExhaustedError(absl::StrCat(key.DebugString(), " needs ", bytes,
                                                       " bytes: over the ", name_, " budget of ",
                                                       budget_bytes_, " bytes"));
    }
    {
      absl::MutexLock lock(&mu_);
      for (;;) {
        auto it = entries_.find(key);
        if (it == entries_.end()) break;  // not cached, nobody building: build it
        if (it->second.value != nullptr) {
          ++hits_;
          lru_.splice(lru_.begin(), lru_, it->second.lru_pos);
          return it->second.value;
        }
        // Another thread is building this key: wait until it is published or
        // the build is abandoned (entry erased), then look again.
        auto built_or_gone = [this, &key]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          auto found = entries_.find(key);
          return found == entries_.end() || found->second.value != nullptr;
        };
        mu_.Await(absl::Condition(&built_or_gone));
      }
      ++misses_;
      entries_.emplace(key, Entry{});  // placeholder: "being built"
    }

    absl::StatusOr<std::shared_ptr<const Value>> built = build();
    if (built.ok() && *built == nullptr) {
      built = absl::InternalError(
          absl::StrCat(name_, " builder returned nothing for ", key.DebugString()));
    }

    // Declared before the lock, so destroyed after it is released.
    std::vector<std::shared_ptr<const Value>> evicted;
    absl::MutexLock lock(&mu_);
    if (!built.ok()) {
      entries_.erase(key);  // waiters wake and retry the build themselves
      return built.status();
    }
    ++built_;
    EvictUntilFits(bytes, &evicted);
    lru_.push_front(key);
    Entry& entry = entries_[key];
    entry.value = *built;
    entry.bytes = bytes;
    entry.lru_pos = lru_.begin();
    bytes_ += bytes;
    return *std::move(built);
  }

  TableCacheStats stats() const {
    absl::MutexLock lock(&mu_);
    TableCacheStats s;
    s.hits = hits_;
    s.misses = misses_;
    s.built = built_;
    s.evictions = evictions_;
    s.entries = static_cast<int64_t>(lru_.size());
    s.bytes = bytes_;
    s.budget_bytes = budget_bytes_;
    return s;
  }

 private:
  struct Entry {
    std::shared_ptr<const Value> value;  // null while being built
    int64_t bytes = 0;
    typename std::list<Key>::iterator lru_pos;  // valid once built
  };

  // Moves the cache's references to evicted values into `evicted`, for the
  // caller to drop once the lock is released.
  void EvictUntilFits(int64_t incoming_bytes, std::vector<std::shared_ptr<const Value>>* evicted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (bytes_ + incoming_bytes > budget_bytes_ && !lru_.empty()) {
      auto it = entries_.find(lru_.back());
      lru_.pop_back();
      bytes_ -= it->second.bytes;
      evicted->push_back(std::move(it->second.value));
      entries_.erase(it);
      ++evictions_;
    }
  }

  const int64_t budget_bytes_;
  const std::string name_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<Key, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<Key> lru_ ABSL_GUARDED_BY(mu_);  // front = most recent
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t built_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t evictions_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace rope

#endif  // ROPE_ENGINE_KEYED_LRU_CACHE_H_
