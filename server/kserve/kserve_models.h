// The models of ropeserve's KServe v2 / Triton front end: named RoPE
// configurations.
//
// Two built-in models take their RoPE configuration as request parameters:
//   rotate     Rotate (inputs q, optional k and positions; outputs q_out, k_out)
//   attention  AttentionScores (inputs q, k, optional v; outputs scores, output)
// and ropeserve --model_repository=DIR adds one model per folder of DIR: the
// folder's name is the model's, and it holds
//   config.json     a Hugging Face model's config.json (at most 4 MiB), read
//                   as rope.v1 reads RopeConfig.hf_config_json and resolved
//                   once, at load time, into the explicit RopeConfig
//   ropeserve.json  {"operation": "rotate" | "attention",       (required)
//                    "layer_type": "sliding_attention",         (optional)
//                    "layer_index": 3,                          (optional)
//                    "max_len": 8192,        (optional: max_position_embeddings)
//                    "layout": "half" | "interleaved",   (optional: see below)
//                    "datatype": "FP32" | "FP16" | "BF16"} (optional: "FP32")
// layer_type and layer_index select a layer as RopeConfig.hf_layer_type and
// hf_layer_index do (layer_index: a decoder layer by number, e.g. one of
// Llama 4's NoPE layers, which the model then serves as the identity).
// layout defaults to the pairing transformers' modeling code uses for the
// config.json's model_type (ResolveConfig's hf_layout: neighbours for GPT-J,
// GLM, DeepSeek-V2/V3 with rope_interleave and Llama 4, halves otherwise).
// A DeepSeek MLA config (qk_rope_head_dim) is served at the rope width:
// tensors of qk_rope_head_dim features, which ModelMetadata advertises.
// datatype is what ModelMetadata advertises (so that perf_analyzer sends
// it); every model takes FP32, FP16 and BF16 alike. Every model has the one
// version "1".
//
// Immutable once loaded; thread-safe to read.
#ifndef ROPE_SERVER_KSERVE_KSERVE_MODELS_H_
#define ROPE_SERVER_KSERVE_KSERVE_MODELS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/engine/engine.h"
#include "rope/v1/rope.pb.h"
#include "server/kserve/kserve_scaling_cache.h"

namespace rope {
namespace kserve {

enum class ModelOperation { kRotate, kAttention };

inline constexpr char kRotateModel[] = "rotate";
inline constexpr char kAttentionModel[] = "attention";
inline constexpr char kModelVersion[] = "1";
inline constexpr char kModelConfigFile[] = "config.json";
inline constexpr char kModelSettingsFile[] = "ropeserve.json";

struct Model {
  std::string name;
  ModelOperation operation = ModelOperation::kRotate;
  // Built-in: the RoPE configuration comes from each request's parameters;
  // `config` is then empty.
  bool builtin = false;
  // A repository model's configuration, the base of every request's rope.v1
  // config: its config.json (and layer type) as the engine resolved it at
  // load time, in the explicit form (theta, head_dim, rotary_dim, scaling,
  // mrope), with max_len and layout. rope.v1 guarantees that form gives the
  // bits hf_config_json gives, and spares every call the JSON (and makes
  // small rotations eligible to run inline, as explicit rope.v1 ones are).
  v1::RopeConfig config;
  // Built-in: the conversions of the rope_scaling parameters its requests
  // sent (thread-safe; shared by the copies of the model). Null otherwise.
  std::shared_ptr<RopeScalingCache> scaling_cache;
  // The layer type whose rope it is ("" : full attention), and the decoder
  // layer ropeserve.json's layer_index names, if any.
  std::string layer_type;
  std::optional<uint32_t> layer_index;
  // Features per head the configuration gives (ModelMetadata's last dim of
  // q and k); 0: chosen by the request (-1 in metadata).
  uint32_t head_dim = 0;
  // The datatype ModelMetadata advertises for q, k and v.
  std::string datatype = "FP32";
  // The model's folder (repository models), for messages.
  std::string source;
  // Its position in ModelRepository::models() (per-model statistics).
  size_t index = 0;
};

class ModelRepository {
 public:
  // The built-in models only.
  ModelRepository();

  // The built-in models plus one per folder of `dir` (see the file comment).
  // Each repository model's configuration is resolved by `engine` now, so
  // that a malformed config.json, a max_len over the server's cap or an
  // unknown layer type stops the server at start-up instead of failing every
  // call. INVALID_ARGUMENT naming the folder and the file, key or value; a
  // folder named like a built-in model is refused too. Entries that are not
  // folders, and folders whose name starts with '.', are skipped.
  static absl::StatusOr<ModelRepository> Load(const std::string& dir, Engine& engine);

  // The model `name` at `version` ("" or "1"). NOT_FOUND otherwise, with
  // Triton's message for an unknown model.
  absl::StatusOr<const Model*> Find(absl::string_view name, absl::string_view version) const;

  // Every model, sorted by name.
  const std::vector<Model>& models() const { return models_; }

 private:
  std::vector<Model> models_;
};

// "interleaved" / "half" (any case) to the rope.v1 layout; INVALID_ARGUMENT
// naming `what` otherwise.
absl::StatusOr<v1::Layout> ParseLayout(absl::string_view text, absl::string_view what);

}  // namespace kserve
}  // namespace rope

#endif  // ROPE_SERVER_KSERVE_KSERVE_MODELS_H_
