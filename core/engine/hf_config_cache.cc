#include "core/engine/hf_config_cache.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace rope {

HfConfigCache::HfConfigCache(int64_t budget_bytes, int64_t max_entries)
    : budget_bytes_(budget_bytes), max_entries_(max_entries) {}

std::shared_ptr<const HfConfigCache::Result> HfConfigCache::Get(absl::string_view json,
                                                                absl::string_view layer_type,
                                                                const Interrupt* interrupt) {
  HfLayerSelector selector;
  selector.layer_type = std::string(layer_type);
  return Get(json, selector, interrupt);
}

std::shared_ptr<const HfConfigCache::Result> HfConfigCache::Get(absl::string_view json,
                                                                const HfLayerSelector& selector,
                                                                const Interrupt* interrupt) {
  // Length-prefixed, so that no (layer selector, JSON) pair can spell
  // another's key.
  const std::string index =
      selector.layer_index.has_value() ? absl::StrCat(*selector.layer_index) : "-";
  std::string key = absl::StrCat(selector.layer_type.size(), ":", selector.layer_type,
                                 index.size(), ":", index, json);
  const int64_t key_bytes = static_cast<int64_t>(key.size());
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      ++hits_;
      lru_.splice(lru_.begin(), lru_, it->second.lru_pos);
      return it->second.result;
    }
    ++misses_;
  }
  auto result = std::make_shared<const Result>(ParseHfRopeConfig(json, selector, interrupt));
  const bool interrupted = result->status().code() == absl::StatusCode::kCancelled ||
                           result->status().code() == absl::StatusCode::kDeadlineExceeded;
  if (interrupted || key_bytes > budget_bytes_ || max_entries_ <= 0) return result;

  absl::MutexLock lock(&mu_);
  auto [it, inserted] = entries_.try_emplace(std::move(key));
  if (!inserted) return it->second.result;  // another thread got here first
  while (!lru_.empty() && (bytes_ + key_bytes > budget_bytes_ ||
                           static_cast<int64_t>(lru_.size()) >= max_entries_)) {
    auto victim = entries_.find(*lru_.back());
    bytes_ -= static_cast<int64_t>(victim->first.size());
    lru_.pop_back();
    entries_.erase(victim);
  }
  lru_.push_front(&it->first);
  it->second.result = result;
  it->second.lru_pos = lru_.begin();
  bytes_ += key_bytes;
  return result;
}

HfConfigCache::Stats HfConfigCache::stats() const {
  absl::MutexLock lock(&mu_);
  Stats s;
  s.hits = hits_;
  s.misses = misses_;
  s.entries = static_cast<int64_t>(lru_.size());
  s.bytes = bytes_;
  return s;
}

}  // namespace rope
