#include "server/kserve/kserve_scaling_cache.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace rope {
namespace kserve {

std::string ScalingKey::DebugString() const {
  double theta = 0;
  static_assert(sizeof(theta) == sizeof(theta_bits));
  std::memcpy(&theta, &theta_bits, sizeof(theta));
  return absl::StrCat("rope_scaling of ", rope_scaling.size(), " bytes (theta ", theta,
                      ", head_dim ", head_dim, ")");
}

RopeScalingCache::RopeScalingCache(int64_t budget_bytes)
    : budget_bytes_(budget_bytes), cache_(budget_bytes, "rope_scaling cache") {}

absl::StatusOr<std::shared_ptr<const v1::RopeConfig>> RopeScalingCache::Get(
    absl::string_view rope_scaling, double theta, uint32_t head_dim, const Converter& convert) {
  auto build = [&convert]() -> absl::StatusOr<std::shared_ptr<const v1::RopeConfig>> {
    absl::StatusOr<v1::RopeConfig> converted = convert();
    if (!converted.ok()) return converted.status();
    return std::make_shared<const v1::RopeConfig>(*std::move(converted));
  };
  // An entry larger than the whole budget would be refused by the cache:
  // such a text is converted on every call instead.
  const int64_t bytes = static_cast<int64_t>(rope_scaling.size()) + kEntryOverheadBytes;
  if (static_cast<int64_t>(rope_scaling.size()) > kMaxCachedTextBytes || bytes > budget_bytes_) {
    return build();
  }
  ScalingKey key;
  key.rope_scaling = std::string(rope_scaling);
  static_assert(sizeof(theta) == sizeof(key.theta_bits));
  std::memcpy(&key.theta_bits, &theta, sizeof(theta));
  key.head_dim = head_dim;
  return cache_.Get(key, bytes, build);
}

}  // namespace kserve
}  // namespace rope
