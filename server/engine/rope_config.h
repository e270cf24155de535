// RopeConfig: what a client says about the rotary embedding it wants, and
// TableKey: the part of it that determines the cos/sin table.
#ifndef ROPE_ENGINE_ROPE_CONFIG_H_
#define ROPE_ENGINE_ROPE_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/defaults.h"  // kDefaultTheta
#include "server/engine/dtype.h"
#include "server/engine/scaling.h"

namespace rope {

struct RopeConfig {
  double theta = 0;          // base; 0 means kDefaultTheta
  uint32_t head_dim = 0;     // required, even, > 0
  uint32_t rotary_dim = 0;   // 0 means head_dim; even, <= head_dim
  uint32_t max_len = 0;      // table length; every position must be < max_len
  Layout layout = Layout::kInterleaved;
  ScalingConfig scaling = NoScaling{};

  double EffectiveTheta() const { return theta == 0 ? kDefaultTheta : theta; }
  uint32_t EffectiveRotaryDim() const { return rotary_dim == 0 ? head_dim : rotary_dim; }
};

// Checks a config on its own (not against tensors). `max_len_cap` is the
// server's limit on table length. Returns INVALID_ARGUMENT naming the field
// and value for a malformed config, RESOURCE_EXHAUSTED when max_len exceeds
// the cap.
absl::Status ValidateConfig(const RopeConfig& config, uint32_t max_len_cap);

// Every field that changes the table, and nothing else: head_dim and layout do
// not (pairing is applied when rotating), so configs that differ only in those
// share one table. theta is the effective base (after defaults, and after
// dynamic NTK's change for the request's length); scaling holds every
// parameter of the variant with defaults filled in.
struct TableKey {
  double theta = kDefaultTheta;
  uint32_t rotary_dim = 0;
  uint32_t max_len = 0;
  ScalingConfig scaling = NoScaling{};

  friend bool operator==(const TableKey& a, const TableKey& b) {
    return a.theta == b.theta && a.rotary_dim == b.rotary_dim &&
           a.max_len == b.max_len && a.scaling == b.scaling;
  }
  template <typename H>
  friend H AbslHashValue(H h, const TableKey& k) {
    // Debian's Abseil is built without std::variant support in absl::Hash,
    // so the active alternative is hashed by hand.
    h = H::combine(std::move(h), k.theta, k.rotary_dim, k.max_len, k.scaling.index());
    return std::visit([&h](const auto& alt) { return H::combine(std::move(h), alt); },
                      k.scaling);
  }
  std::string DebugString() const;
};

// The key of the table for a validated config, for a request whose largest
// position is `max_position` (used only by dynamic NTK, whose base grows with
// the sequence length max_position + 1).
TableKey MakeTableKey(const RopeConfig& config, int64_t max_position);

}  // namespace rope

#endif  // ROPE_ENGINE_ROPE_CONFIG_H_
