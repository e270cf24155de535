// RopeConfig: what a client says about the rotary embedding it wants, and
// TableKey: the part of it that determines the cos/sin table.
#ifndef ROPE_ENGINE_ROPE_CONFIG_H_
#define ROPE_ENGINE_ROPE_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "common/defaults.h"  // kDefaultTheta
#include "core/engine/axial.h"
#include "core/engine/dtype.h"
#include "core/engine/mrope.h"
#include "core/engine/scaling.h"

namespace rope {

// A decoder layer without rotary embedding (Llama 4's and SmolLM3's NoPE
// layers: no_rope_layers[i] == 0): Rotate leaves q and k as they are. With
// floor_scale > 0, Llama 4's attention temperature tuning (transformers'
// Llama4TextAttention): AttentionScores multiplies query i, at position p,
// by Temperature(p) = log(floor((p + 1) / floor_scale) + 1) * attn_scale + 1
// before the dot products, rounding the product to q's dtype as
// transformers does.
struct NoRopeConfig {
  bool enabled = false;
  double floor_scale = 0;  // 0: no temperature tuning; else finite and > 0
  double attn_scale = 0;   // finite

  bool tuned() const { return enabled && floor_scale != 0; }
  double Temperature(int64_t position) const;
  friend bool operator==(const NoRopeConfig& a, const NoRopeConfig& b) {
    return a.enabled == b.enabled && a.floor_scale == b.floor_scale &&
           a.attn_scale == b.attn_scale;
  }
};

// How the table's angles are computed (rope.proto's AnglePrecision).
// kExact: in double, cos/sin rounded once to float32 (the precision
// contract). kFloat32: as transformers computes them in float32
// (float32_angles.h), for bit-parity checks; none, linear and llama3
// scaling only.
enum class AnglePrecision { kExact, kFloat32 };

struct RopeConfig {
  double theta = 0;          // base; 0 means kDefaultTheta
  uint32_t head_dim = 0;     // required, even, > 0
  // Features that rotate: rotary_offset .. rotary_offset + rotary_dim - 1
  // (0 means head_dim - rotary_offset; even). The rest pass through. A
  // non-zero offset is DeepSeek's MLA heads, whose last features rotate.
  uint32_t rotary_dim = 0;
  uint32_t rotary_offset = 0;
  uint32_t max_len = 0;      // table length; every position must be < max_len
  Layout layout = Layout::kInterleaved;
  ScalingConfig scaling = NoScaling{};
  MropeConfig mrope;  // disabled: one position per token
  NoRopeConfig no_rope;  // disabled: the layer rotates
  // Disabled: one frequency ladder. Enabled: one ladder and one position per
  // axis (axial.h); excludes mrope and scaling (each axis has its own
  // theta_rescale and interpolation), hf_config_json, rotary_offset and
  // no_rope.
  AxialConfig axial;
  AnglePrecision angle_precision = AnglePrecision::kExact;
  // A model's config.json (whole, or only its rope keys). When set, theta,
  // rotary_dim, rotary_offset, scaling, mrope and no_rope must be unset and
  // head_dim 0 or equal to what the JSON gives: the Engine derives them
  // (hf_config.h) before anything else looks at the config. hf_layer_type
  // and hf_layer_index pick the decoder layer (unset: full_attention).
  std::string hf_config_json;
  std::string hf_layer_type;
  // Set only by resolving hf_config_json (ApplyHfRopeConfig): the model's
  // softmax scale where it is not head_dim^-0.5 (DeepSeek, Gemma), else 0.
  // Not part of the table; AttentionScores uses it when its scale is 0.
  double model_softmax_scale = 0;
  std::optional<uint32_t> hf_layer_index;
  // Set only by the config.json derivation, never on the wire: the width of
  // a whole DeepSeek MLA head whose rope part this config describes
  // (head_dim). A tensor of this width rotates its last rotary_dim features
  // (Engine::Rotate and AttentionScores take the width from the tensors).
  uint32_t whole_head_dim = 0;

  double EffectiveTheta() const { return theta == 0 ? kDefaultTheta : theta; }
  uint32_t EffectiveRotaryDim() const {
    return rotary_dim != 0 ? rotary_dim : head_dim > rotary_offset ? head_dim - rotary_offset : 0;
  }
  // Positions each token has: 3 with M-RoPE, one per axis with axial RoPE,
  // else 1.
  int PositionAxes() const {
    if (mrope.enabled()) return kMropeAxes;
    if (axial.enabled()) return axial.count();
    return 1;
  }
};

// The largest head_dim (and so rotary_dim) accepted: 32 times the widest
// heads of published models (256), and small enough that what a config
// makes per call before any tensor bounds it (rotary_dim/2 inverse
// frequencies, LongRoPE's factor lists, a ResolveConfig reply) stays a few
// tens of KiB.
inline constexpr uint32_t kMaxHeadDim = 8192;

// The whole-head form of a config whose whole_head_dim is set: head_dim
// whole_head_dim, its last rotary_dim features rotating. Unchanged when
// `width` is not whole_head_dim (or it is unset).
RopeConfig ForTensorWidth(const RopeConfig& config, int64_t width);

// Checks an explicit config (hf_config_json empty) on its own, not against
// tensors. `max_len_cap` is the server's limit on table length. Returns
// INVALID_ARGUMENT naming the field and value for a malformed config (and
// for a config whose hf_config_json was not resolved; rotary_offset +
// rotary_dim past head_dim; a non-finite or negative no_rope parameter;
// axial with mrope, scaling, no_rope or rotary_offset), RESOURCE_EXHAUSTED when max_len exceeds the cap.
absl::Status ValidateConfig(const RopeConfig& config, uint32_t max_len_cap);

// Every field that changes the table, and nothing else: head_dim,
// rotary_offset, layout, mrope and no_rope do not (pairing and the choice of
// position are applied when rotating), so configs that differ only in those
// share one table (an axial config has one table per axis: AxisTableKey). theta is
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

// The table of axis `axis` of a validated axial config: rotary_dim the
// axis' dim, theta its rescaled base, its interpolation as linear scaling
// (axial.h), the config's max_len.
TableKey AxisTableKey(const RopeConfig& config, int axis);

}  // namespace rope

#endif  // ROPE_ENGINE_ROPE_CONFIG_H_
