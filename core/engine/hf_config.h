// The rotary embedding a Hugging Face model's config.json describes, derived
// with transformers' rules, so that a client can send the published file
// instead of copying its fields by hand.
//
// The rules are those of transformers' modeling_rope_utils.py
// (RotaryEmbeddingConfigMixin.standardize_rope_params and validate_rope, the
// _compute_*_parameters functions) and of the model classes that depart from
// them: Gemma 3 (rope_local_base_freq for sliding layers, class defaults for
// keys its published config omits), DeepSeek-V2/V3 (qk_rope_head_dim and
// qk_nope_head_dim: MLA heads whose last features rotate; rope_interleave),
// DeepSeek-V4 (two rope groups, main and compress), Llama 4 and SmolLM3
// (no_rope_layers, Llama 4's attention temperature tuning), HunYuan (dynamic
// with alpha), Ernie 4.5-VL (freq_allocation / its mrope_section), Qwen2-VL /
// Qwen3-VL (rope_type "mrope", mrope_section, mrope_interleaved), Phi-3 /
// Phi-4 (original_max_position_embeddings at the top level), GPT-NeoX
// (rotary_pct, rotary_emb_base), GPT-J (rotary_dim, n_embd / n_head), and the
// text_config nesting of vision-language models; where only the serving
// engines define a variant (vLLM's "ntk", "deepseek_yarn"), vLLM's. Every
// other key known to change RoPE is refused, never ignored. docs/models.md
// lists the keys read and refused, and what each becomes.
//
// Transport-free: JSON text in, engine structs out. Thread-safe (no state).
#ifndef ROPE_ENGINE_HF_CONFIG_H_
#define ROPE_ENGINE_HF_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/engine/dtype.h"
#include "core/engine/interrupt.h"
#include "core/engine/mrope.h"
#include "core/engine/rope_config.h"
#include "core/engine/scaling.h"

namespace rope {

// The layer type transformers assumes when a model has one rope.
inline constexpr char kFullAttention[] = "full_attention";
inline constexpr char kSlidingAttention[] = "sliding_attention";

// Which decoder layer of the config the rope is for: a layer type (or a
// rope group, DeepSeek-V4's "main" / "compress"), a layer index, or both
// (they must then agree). Empty and unset: full_attention.
struct HfLayerSelector {
  std::string layer_type;
  std::optional<uint32_t> layer_index;
};

// What a config.json says about the rope of one layer.
struct HfRopeConfig {
  double theta = 0;                  // rope_theta (or rope_local_base_freq, rotary_emb_base)
  // The rotated part of a head: 0 when the JSON gives none (the request's
  // is used). For DeepSeek's MLA heads (V2, V3, Kimi K2, V4) the rope part
  // alone (qk_rope_head_dim); whole_head_dim is then the whole head.
  uint32_t head_dim = 0;
  uint32_t whole_head_dim = 0;       // MLA: nope + rope features; 0 otherwise
  double partial_rotary_factor = 1;  // rotary_dim = int(head_dim * partial_rotary_factor)
  uint32_t rotary_dim = 0;           // an absolute rotary width (GPT-J's rotary_dim); 0: none
  ScalingConfig scaling = NoScaling{};
  MropeConfig mrope;
  std::string rope_type;             // transformers' name after standardising ("default", ...)
  // The attention's softmax scale where the model departs from
  // head_dim^-0.5 (DeepSeek's qk_head_dim^-0.5 * mscale^2, Gemma's
  // query_pre_attn_scalar^-0.5); 0 otherwise.
  double softmax_scale = 0;
  std::string layer_type;            // the layer type (or rope group) the rope is for
  // A layer without rotary embedding (no_rope_layers[i] == 0), and Llama 4's
  // temperature tuning of its queries (floor_scale 0: none).
  bool no_rope = false;
  double floor_scale = 0;
  double attn_scale = 0;
  // The layout transformers' modeling code of the model_type pairs features
  // in (GPT-J, GLM, Cohere, DeepSeek-V2/V3/V4, Llama 4, Ernie 4.5:
  // neighbours; the rest: halves). ResolveConfig reports it; the request's
  // own layout is what rotates.
  Layout layout = Layout::kHalf;
  uint32_t max_position_embeddings = 0;  // 0: the JSON has none
};

// Parses `json` (a whole config.json, or only its rope keys) for the layer
// `selector` names, in time linear in its length. Nesting deeper than 64
// levels (the top-level object being level 1) is refused. `interrupt` (may
// be null) is polled while parsing: CANCELLED or DEADLINE_EXCEEDED when it
// says stop. Every entry of a per-layer-type rope dict (and both of
// DeepSeek-V4's groups) is derived and checked, not only the selected one,
// as transformers validates the whole config. INVALID_ARGUMENT, the message
// starting "hf_config_json" and
// naming the key path (e.g. "text_config.rope_scaling.factor") and value,
// for malformed JSON, a wrong type, a non-finite or out-of-range number, a
// missing required key (a yarn without factor included), an unknown
// rope_type, a key this server does not read that changes RoPE, an unknown
// layer type and an out-of-range or disagreeing layer index.
absl::StatusOr<HfRopeConfig> ParseHfRopeConfig(absl::string_view json,
                                               const HfLayerSelector& selector,
                                               const Interrupt* interrupt = nullptr);

// The explicit config `request` stands for: theta, head_dim, rotary_dim,
// rotary_offset, scaling, mrope, no_rope and model_softmax_scale from `hf`; max_len and layout
// from `request` (its hf_config_json, hf_layer_type and hf_layer_index are
// dropped). A request head_dim equal to hf.whole_head_dim selects the whole
// MLA head (its last hf.head_dim features rotate); 0 the rope part, whose
// config then carries whole_head_dim. INVALID_ARGUMENT naming the field
// when the request also sets theta, rotary_dim, rotary_offset, a scaling,
// mrope or no_rope, when its non-zero head_dim differs from the JSON's,
// when neither gives a head_dim, or when partial_rotary_factor gives an odd
// or zero rotary_dim.
absl::StatusOr<RopeConfig> ApplyHfRopeConfig(const RopeConfig& request, const HfRopeConfig& hf);

}  // namespace rope

#endif  // ROPE_ENGINE_HF_CONFIG_H_
