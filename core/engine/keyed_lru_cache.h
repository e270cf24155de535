// KeyedLruCache<Key, Value>: a byte-bounded LRU cache of immutable values,
// each built at most once at a time. The host table cache (TableCache, table
// blocks in host memory) and the CUDA backend's device table cache (blocks
// uploaded to device memory) are both this one policy, keyed by
// TableBlockKey. Key is hashable with absl::Hash and has DebugString().
//
// Thread-safe. Concurrent lookups of the same missing key build the value
// once: the first caller builds (outside the lock), the others wait for it.
// What happens to a value callers still hold depends on HeldValues:
// kMayExceedBudget evicts it anyway (it stays alive until they drop their
// shared_ptr, so held values can add to the budget); kCountAgainstBudget
// never evicts a held value, so cached bytes (held or not) are all the
// memory there is, and a miss that cannot make room among values nobody
// holds is refused before anything is built. Evicted values are dropped
// after the cache's lock is released: destroying one may be slow (unmapping
// a large host table, freeing device memory) and must not hold up every
// other lookup.
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

enum class HeldValues {
  kMayExceedBudget,     // evicted while held; the holders keep them alive
  kCountAgainstBudget,  // never evicted while held; a miss without room is refused
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
  KeyedLruCache(int64_t budget_bytes, std::string name,
                HeldValues held = HeldValues::kMayExceedBudget)
      : budget_bytes_(budget_bytes), name_(std::move(name)), held_(held) {}
  KeyedLruCache(const KeyedLruCache&) = delete;
  KeyedLruCache& operator=(const KeyedLruCache&) = delete;

  // Returns the value for `key`, calling `build` on a miss and evicting least
  // recently used values to make room for its `bytes`. RESOURCE_EXHAUSTED,
  // naming the sizes, when `bytes` alone exceeds the whole budget, or (with
  // HeldValues::kCountAgainstBudget) when values callers hold leave no room
  // for it; the builder's own error when it fails; INTERNAL when it returns
  // null.
  absl::StatusOr<std::shared_ptr<const Value>> Get(const Key& key, int64_t bytes,
                                                   const Builder& build) {
    if (bytes > budget_bytes_) {
      return absl::ResourceExhaustedError(absl::StrCat(key.DebugString(), " needs ", bytes,
                                                       " bytes: over the ", name_, " budget of ",
                                                       budget_bytes_, " bytes"));
    }
    // Values evicted to make room before a build: declared before the lock,
    // so destroyed after it is released.
    std::vector<std::shared_ptr<const Value>> unheld;
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
      if (held_ == HeldValues::kCountAgainstBudget) {
        // Room first, from values nobody holds, then the bytes reserved
        // while the value is built outside the lock.
        EvictUnheldUntilFits(bytes, &unheld);
        if (bytes_ + reserved_ + bytes > budget_bytes_) {
          return absl::ResourceExhaustedError(absl::StrCat(
              key.DebugString(), " needs ", bytes, " bytes: the ", name_, " budget of ",
              budget_bytes_, " bytes is held by calls in flight (", bytes_ + reserved_,
              " bytes of values in use or being built); retry once they finish"));
        }
        reserved_ += bytes;
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
    if (held_ == HeldValues::kCountAgainstBudget) reserved_ -= bytes;
    if (!built.ok()) {
      entries_.erase(key);  // waiters wake and retry the build themselves
      return built.status();
    }
    ++built_;
    if (held_ == HeldValues::kMayExceedBudget) EvictUntilFits(bytes, &evicted);
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

  // Evicts least recently used values that only the cache holds (a
  // shared_ptr's use_count of 1 cannot rise meanwhile: other copies come
  // only from Get, under this lock) until `incoming_bytes` more fit beside
  // the cached and reserved bytes, or none is left to evict.
  void EvictUnheldUntilFits(int64_t incoming_bytes,
                            std::vector<std::shared_ptr<const Value>>* evicted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = lru_.end();
    while (bytes_ + reserved_ + incoming_bytes > budget_bytes_ && it != lru_.begin()) {
      --it;
      auto entry = entries_.find(*it);
      if (entry->second.value.use_count() > 1) continue;  // held by a call
      bytes_ -= entry->second.bytes;
      evicted->push_back(std::move(entry->second.value));
      entries_.erase(entry);
      it = lru_.erase(it);
      ++evictions_;
    }
  }

  const int64_t budget_bytes_;
  const std::string name_;
  const HeldValues held_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<Key, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<Key> lru_ ABSL_GUARDED_BY(mu_);  // front = most recent
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reserved_ ABSL_GUARDED_BY(mu_) = 0;  // of values being built (kCountAgainstBudget)
  int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t built_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t evictions_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace rope

#endif  // ROPE_ENGINE_KEYED_LRU_CACHE_H_
