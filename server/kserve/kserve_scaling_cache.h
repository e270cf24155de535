// RopeScalingCache: what a built-in model's parameter rope_scaling (a
// config.json's rope_scaling object, as JSON text) gives as rope.v1 config
// fields, by the text and the theta and head_dim it was read with, so that
// a client sending the same rope_scaling with every request pays for one
// JSON parse, as a rope.v1 client sending the same RopeConfig.scaling pays
// for none.
//
// The key is the whole text, the theta's bits and the head_dim (equal keys
// are equal inputs: no hash collision can hand one request another's
// scaling). Bounded by the bytes of its entries (each counted as its text
// plus a fixed overhead for the key and the config), least recently used
// out first; a text longer than kMaxCachedTextBytes is converted on every
// call, never cached. A conversion that fails is never cached: a bad
// rope_scaling is refused again, by a new conversion, every time it is sent.
//
// Thread-safe (core/engine/keyed_lru_cache.h: concurrent misses of one key
// convert it once).
#ifndef ROPE_SERVER_KSERVE_KSERVE_SCALING_CACHE_H_
#define ROPE_SERVER_KSERVE_KSERVE_SCALING_CACHE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/engine/keyed_lru_cache.h"
#include "rope/v1/rope.pb.h"

namespace rope {
namespace kserve {

struct ScalingKey {
  std::string rope_scaling;  // the parameter's JSON text
  uint64_t theta_bits = 0;   // the theta it was read with, bit for bit
  uint32_t head_dim = 0;

  friend bool operator==(const ScalingKey& a, const ScalingKey& b) {
    return a.theta_bits == b.theta_bits && a.head_dim == b.head_dim &&
           a.rope_scaling == b.rope_scaling;
  }
  template <typename H>
  friend H AbslHashValue(H h, const ScalingKey& k) {
    return H::combine(std::move(h), k.rope_scaling, k.theta_bits, k.head_dim);
  }
  std::string DebugString() const;
};

class RopeScalingCache {
 public:
  static constexpr int64_t kMaxCachedTextBytes = 16 << 10;
  // What an entry counts beside its text.
  static constexpr int64_t kEntryOverheadBytes = 512;
  static constexpr int64_t kDefaultBudgetBytes = 1 << 20;

  // Converts a rope_scaling text read with `theta` and `head_dim`.
  using Converter = std::function<absl::StatusOr<v1::RopeConfig>()>;

  explicit RopeScalingCache(int64_t budget_bytes = kDefaultBudgetBytes);
  RopeScalingCache(const RopeScalingCache&) = delete;
  RopeScalingCache& operator=(const RopeScalingCache&) = delete;

  // The conversion of (`rope_scaling`, `theta`, `head_dim`): cached, or
  // `convert`'s result (cached when it succeeds and the text is at most
  // kMaxCachedTextBytes).
  absl::StatusOr<std::shared_ptr<const v1::RopeConfig>> Get(absl::string_view rope_scaling,
                                                            double theta, uint32_t head_dim,
                                                            const Converter& convert);

  TableCacheStats stats() const { return cache_.stats(); }

 private:
  const int64_t budget_bytes_;
  KeyedLruCache<ScalingKey, v1::RopeConfig> cache_;
};

}  // namespace kserve
}  // namespace rope

#endif  // ROPE_SERVER_KSERVE_KSERVE_SCALING_CACHE_H_
