// RopeConfig: what a client says about the rotary embedding it wants, and
// TableKey: the part of it that determines the cos/sin table.
#ifndef ROPE_ENGINE_ROPE_CONFIG_H_
#define ROPE_ENGINE_ROPE_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/defaults.h"  // kDefaultTheta
#include "core/engine/dtype.h"
#include "core/engine/mrope.h"
#include "core/engine/scaling.h"

namespace rope {

// How the table's angles are computed (rope.proto's AnglePrecision).
// kExact: in double, cos/sin rounded once to float32 (the precision
// contract). kFloat32: as transformers computes them in float32
// (float32_angles.h), for bit-parity checks; none, linear and llama3
// scaling only.
enum class AnglePrecision { kExact, kFloat32 };

struct RopeConfig {
  double theta = 0;          // base; 0 means kDefaultTheta
  uint32_t head_dim = 0;     // required, even, > 0
  uint32_t rotary_dim = 0;   // 0 means head_dim; even, <= head_dim
  uint32_t max_len = 0;      // table length; every position must be < max_len
  Layout layout = Layout::kInterleaved;
  ScalingConfig scaling = NoScaling{};
  MropeConfig mrope;  // disabled: one position per token
  AnglePrecision angle_precision = AnglePrecision::kExact;
  // A model's config.json (whole, or only its rope keys). When set, theta,
  // rotary_dim, scaling and mrope must be unset and head_dim 0 or equal to
  // what the JSON gives: the Engine derives them (hf_config.h) before
  // anything else looks at the config. hf_layer_type picks the layer type
  // ("" = full_attention).
  std::string hf_config_json;
  std::string hf_layer_type;
  // Set only by resolving hf_config_json (ApplyHfRopeConfig): the model's
  // softmax scale where it is not head_dim^-0.5 (DeepSeek, Gemma), else 0.
  // Not part of the table; AttentionScores uses it when its scale is 0.
  double model_softmax_scale = 0;

  double EffectiveTheta() const { return theta == 0 ? kDefaultTheta : theta; }
  uint32_t EffectiveRotaryDim() const { return rotary_dim == 0 ? head_dim : rotary_dim; }
};

// The largest head_dim (and so rotary_dim) accepted: 32 times the widest
// heads of published models (256), and small enough that what a config
// makes per call before any tensor bounds it (rotary_dim/2 inverse
// frequencies, LongRoPE's factor lists, a ResolveConfig reply) stays a few
// tens of KiB.
inline constexpr uint32_t kMaxHeadDim = 8192;

// Checks an explicit config (hf_config_json empty) on its own, not against
// tensors. `max_len_cap` is the server's limit on table length. Returns
// INVALID_ARGUMENT naming the field and value for a malformed config (and
// for a config whose hf_config_json was not resolved), RESOURCE_EXHAUSTED
// when max_len exceeds the cap.
absl::Status ValidateConfig(const RopeConfig& config, uint32_t max_len_cap);

// Every field that changes the table, and nothing else: head_dim, layout and
// mrope do not (pairing and the choice of position are applied when
// rotating), so configs that differ only in those share one table. theta is
// the effective base (after defaults, and after dynamic NTK's change for the
// request's length); scaling holds every parameter of the variant with
// defaults filled in (LongRoPE: its attention factor resolved, and
// max_position_embeddings 0); long_factor says which LongRoPE list the table
// uses (false for the other variants).
struct TableKey {
  double theta = kDefaultTheta;
  uint32_t rotary_dim = 0;
  uint32_t max_len = 0;
  ScalingConfig scaling = NoScaling{};
  bool long_factor = false;
  // AnglePrecision::kFloat32: transformers' float32 angles (float32_angles.h).
  bool float32_angles = false;

  friend bool operator==(const TableKey& a, const TableKey& b) {
    return a.theta == b.theta && a.rotary_dim == b.rotary_dim &&
           a.max_len == b.max_len && a.scaling == b.scaling && a.long_factor == b.long_factor &&
           a.float32_angles == b.float32_angles;
  }
  template <typename H>
  friend H AbslHashValue(H h, const TableKey& k) {
    // Debian's Abseil is built without std::variant support in absl::Hash,
    // so the active alternative is hashed by hand.
    h = H::combine(std::move(h), k.theta, k.rotary_dim, k.max_len, k.long_factor,
                   k.float32_angles, k.scaling.index());
    return std::visit([&h](const auto& alt) { return H::combine(std::move(h), alt); },
                      k.scaling);
  }
  // Short form for error messages (the scaling by name only).
  std::string DebugString() const;
  // Every field, exactly (ExactDecimal): two keys are equal iff
  // their strings are. What ResolveConfig reports as the table-cache key.
  std::string ToString() const;
};

// The key of the table for a validated config, for a request whose largest
// position is `max_position` (used by dynamic NTK, whose base grows with the
// sequence length max_position + 1, and by LongRoPE's per-request choice of
// list).
TableKey MakeTableKey(const RopeConfig& config, int64_t max_position);

}  // namespace rope

#endif  // ROPE_ENGINE_ROPE_CONFIG_H_
