// HfConfigCache: ParseHfRopeConfig's results by content, so that a client
// that sends the same config.json with every request pays for one parse.
//
// The key is the whole JSON text and layer selector (equal keys are equal
// inputs; no hash collision can hand one config another's result). Bounded
// by the bytes of cached text and by the number of entries, least recently
// used out first. Refusals are cached as well: a malformed config sent
// again costs no reparse either.
//
// Thread-safe. Two threads missing the same key at once may both parse it;
// the result is a pure function of the key, so either copy is right.
#ifndef ROPE_ENGINE_HF_CONFIG_CACHE_H_
#define ROPE_ENGINE_HF_CONFIG_CACHE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "core/engine/hf_config.h"

namespace rope {

class HfConfigCache {
 public:
  using Result = absl::StatusOr<HfRopeConfig>;

  struct Stats {
    int64_t hits = 0;
    int64_t misses = 0;  // parses
    int64_t entries = 0;
    int64_t bytes = 0;   // of cached keys (JSON text + layer selector)
  };

  // A text longer than budget_bytes is parsed on every call, never cached.
  HfConfigCache(int64_t budget_bytes, int64_t max_entries);
  HfConfigCache(const HfConfigCache&) = delete;
  HfConfigCache& operator=(const HfConfigCache&) = delete;

  // ParseHfRopeConfig(json, selector, interrupt), from the cache when it
  // holds it. The key is the JSON text and the whole selector (layer type
  // and index). A parse the interrupt stopped (CANCELLED,
  // DEADLINE_EXCEEDED) is not cached: it says nothing about the text.
  std::shared_ptr<const Result> Get(absl::string_view json, const HfLayerSelector& selector,
                                    const Interrupt* interrupt = nullptr);
  // The layer type alone.
  std::shared_ptr<const Result> Get(absl::string_view json, absl::string_view layer_type,
                                    const Interrupt* interrupt = nullptr);

  Stats stats() const;

 private:
  struct Entry {
    std::shared_ptr<const Result> result;
    std::list<const std::string*>::iterator lru_pos;
  };

  const int64_t budget_bytes_;
  const int64_t max_entries_;
  mutable absl::Mutex mu_;
  // node_hash_map: keys stay put, so the LRU list can point at them.
  absl::node_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<const std::string*> lru_ ABSL_GUARDED_BY(mu_);  // front = most recent
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace rope

#endif  // ROPE_ENGINE_HF_CONFIG_CACHE_H_
