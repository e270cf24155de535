// A model's config.json in a client: reading it (a file or a model
// directory), and the one rule every client (ropectl, ropeload, RopeClient
// users, the Python package) follows for the two RopeConfig fields the server
// does not take from it: the layout and max_len.
//
// The rule: the layout is the one transformers' modeling code for the
// config's model_type rotates with (an explicit `rope_interleave` key wins:
// DeepSeek-V3 reads it), and max_len is the config's max_position_embeddings
// (top level, else text_config). Either is overridden by a value the caller
// gives. The Python package has the same table (config.py), and a test
// holds the two equal.
#ifndef ROPE_CLIENT_HF_CONFIG_DEFAULTS_H_
#define ROPE_CLIENT_HF_CONFIG_DEFAULTS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rope/v1/rope.pb.h"

namespace rope {
namespace client {

// The text of a model's config.json: `path` is the file, or a model
// directory holding config.json (as RopeConfig.from_hf in Python takes).
// NOT_FOUND naming the path when neither exists or it cannot be opened;
// INVALID_ARGUMENT when the file is larger than a config.json can be
// (64 MiB) or is not a regular file. `what` prefixes messages ("--hf_config").
absl::StatusOr<std::string> ReadHfConfigFile(const std::string& path,
                                             absl::string_view what = "hf_config");

// The layout transformers' modeling code pairs features with for a
// model_type: INTERLEAVED (neighbours: GPT-J, CodeGen, GLM, Cohere, Helium,
// ERNIE 4.5, DeepSeek V2/V3, Llama 4) or HALF (rotate_half: Llama, Qwen,
// Mistral, Gemma, Phi, GPT-NeoX, gpt-oss and every other model_type).
v1::Layout TransformersLayout(absl::string_view model_type);

// What a config.json implies for layout and max_len, and why (for a CLI
// to print).
struct HfConfigDefaults {
  std::string model_type;  // top level, else text_config's; "" when absent
  v1::Layout layout = v1::HALF;
  // "model_type llama: transformers rotates halves", "rope_interleave true", ...
  std::string layout_reason;
  // max_position_embeddings (top level, else text_config; absent, the
  // value of transformers' config class for the model_type where a published
  // config leaves it out: gemma3); nullopt when absent otherwise, not a
  // positive integer, or above uint32.
  std::optional<uint32_t> max_position_embeddings;
  std::string max_len_reason;  // "the config's max_position_embeddings", ...
};

// Reads model_type, rope_interleave and max_position_embeddings of `json`.
// INVALID_ARGUMENT when it is not a JSON object; the server checks
// everything else.
absl::StatusOr<HfConfigDefaults> HfConfigDefaultsOf(absl::string_view json);

// What the caller chose; nullopt: the config.json's default.
struct HfConfigOverrides {
  std::optional<v1::Layout> layout;
  std::optional<uint32_t> max_len;
  uint32_t head_dim = 0;      // 0: the server derives it
  std::string hf_layer_type;  // "": full_attention
};

// A RopeConfig carrying `json` (hf_config_json) with layout and max_len by
// the rule above. INVALID_ARGUMENT when max_len is not given and the
// config.json has no max_position_embeddings (naming both ways out).
absl::StatusOr<v1::RopeConfig> RopeConfigFromHfConfig(absl::string_view json,
                                                      const HfConfigOverrides& overrides);

}  // namespace client
}  // namespace rope

#endif  // ROPE_CLIENT_HF_CONFIG_DEFAULTS_H_
