// The rotary embedding a Hugging Face model's config.json describes, derived
// with transformers' rules, so that a client can send the published file
// instead of copying its fields by hand.
//
// The rules are those of transformers' modeling_rope_utils.py
// (RotaryEmbeddingConfigMixin.standardize_rope_params and the
// _compute_*_parameters functions) and of the model classes that depart from
// them: Gemma 3 (rope_local_base_freq for sliding layers, class defaults for
// keys its published config omits), DeepSeek-V3 (qk_rope_head_dim: the rotated
// part is its own tensor), Qwen2-VL / Qwen3-VL (rope_type "mrope",
// mrope_section, mrope_interleaved), Phi-3 / Phi-4 (original_max_position_-
// embeddings at the top level), and the text_config nesting of vision-language
// models. docs/models.md lists the keys read and what each becomes.
//
// Transport-free: JSON text in, engine structs out. Thread-safe (no state).
#ifndef ROPE_ENGINE_HF_CONFIG_H_
#define ROPE_ENGINE_HF_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/engine/interrupt.h"
#include "core/engine/mrope.h"
#include "core/engine/rope_config.h"
#include "core/engine/scaling.h"

namespace rope {

// The layer type transformers assumes when a model has one rope.
inline constexpr char kFullAttention[] = "full_attention";
inline constexpr char kSlidingAttention[] = "sliding_attention";

// What a config.json says about the rope of one layer type.
struct HfRopeConfig {
  double theta = 0;                  // rope_theta (or rope_local_base_freq)
  uint32_t head_dim = 0;             // 0: the JSON gives none (the request's is used)
  double partial_rotary_factor = 1;  // rotary_dim = int(head_dim * partial_rotary_factor)
  ScalingConfig scaling = NoScaling{};
  MropeConfig mrope;
  std::string rope_type;             // transformers' name after standardising ("default", ...)
  // The attention's softmax scale where the model departs from
  // head_dim^-0.5 (DeepSeek's qk_head_dim^-0.5 * mscale^2, Gemma's
  // query_pre_attn_scalar^-0.5); 0 otherwise.
  double softmax_scale = 0;
};

// Parses `json` (a whole config.json, or only its rope keys) for
// `layer_type` ("" means full_attention), in time linear in its length.
// Nesting deeper than 64 levels (the top-level object being level 1) is
// refused. `interrupt` (may be null) is polled while parsing: CANCELLED or
// DEADLINE_EXCEEDED when it says stop. INVALID_ARGUMENT, the message starting "hf_config_json" and
// naming the key path (e.g. "text_config.rope_scaling.factor") and value,
// for malformed JSON, a wrong type, a non-finite or out-of-range number, a
// missing required key, an unknown rope_type or layer type.
absl::StatusOr<HfRopeConfig> ParseHfRopeConfig(absl::string_view json,
                                               absl::string_view layer_type,
                                               const Interrupt* interrupt = nullptr);

// The explicit config `request` stands for: theta, head_dim, rotary_dim,
// scaling, mrope and model_softmax_scale from `hf`; max_len and layout from
// `request` (its hf_config_json and hf_layer_type are dropped). INVALID_ARGUMENT naming the
// field when the request also sets theta, rotary_dim, a scaling or mrope,
// when its non-zero head_dim differs from the JSON's, when neither gives a
// head_dim, or when partial_rotary_factor gives an odd or zero rotary_dim.
absl::StatusOr<RopeConfig> ApplyHfRopeConfig(const RopeConfig& request, const HfRopeConfig& hf);

}  // namespace rope

#endif  // ROPE_ENGINE_HF_CONFIG_H_
