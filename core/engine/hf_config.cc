#include "core/engine/hf_config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "core/engine/bounded_json.h"

namespace rope {
namespace {

using Json = nlohmann::json;

constexpr size_t kMaxShown = 64;  // bytes of a value quoted in a message

constexpr double kPythonDefaultTheta = 10000.0;

// Keys a config may nest its per-layer rope parameters under when it has no
// layer_types list of its own.
const char* const kKnownLayerTypes[] = {kFullAttention, kSlidingAttention, "chunked_attention"};

// DeepSeek-V4 (transformers' DeepseekV4Config): rope parameters keyed by
// rope group, not by layer type; sliding-window layers read "main", the two
// compressed attention types "compress".
constexpr char kMainGroup[] = "main";
constexpr char kCompressGroup[] = "compress";
const char* const kCompressedLayerTypes[] = {"compressed_sparse_attention",
                                             "heavily_compressed_attention"};

// Defaults of the transformers config classes for keys their published
// configs omit. Only classes checked against transformers' source are here;
// for any other model_type a missing key is refused, never guessed. 0: no
// default for that key.
struct ModelTypeDefaults {
  const char* model_type;
  double rope_theta;            // full-attention layers
  double rope_local_base_freq;  // sliding-attention layers
  uint32_t head_dim;
  uint32_t max_position_embeddings;
};
constexpr ModelTypeDefaults kModelTypeDefaults[] = {
    // Gemma3TextConfig: head_dim=256, max_position_embeddings=131072,
    // default_theta = {"global": 1e6, "local": 1e4}. gemma-3-*-it's
    // config.json relies on all four.
    {"gemma3_text", 1'000'000.0, 10'000.0, 256, 131072},
    // GPT-J and CodeGen have no base key: their modeling code builds the
    // sinusoids with 10000 (create_sinusoidal_positions).
    {"gptj", 10'000.0, 0, 0, 0},
    {"codegen", 10'000.0, 0, 0, 0},
};

const ModelTypeDefaults* DefaultsFor(const std::string& model_type) {
  for (const ModelTypeDefaults& d : kModelTypeDefaults) {
    if (model_type == d.model_type) return &d;
  }
  return nullptr;
}

// model_types whose transformers modeling code pairs neighbouring features
// (GPT-J's rotate_every_two, view_as_complex, cos/sin repeat_interleave'd,
// DeepSeek-V3's rope_interleave); every other model rotates halves
// (rotate_half). A config's own rope_interleave (DeepSeek) or
// rotary_emb_interleaved (nomic-bert) says it outright.
const char* const kInterleavedModelTypes[] = {
    "gptj",         "codegen",     "glm",           "glm4",          "glm4v",
    "glm4v_text",   "cohere",      "cohere2",       "deepseek_v2",   "deepseek_v3",
    "kimi_k2",      "deepseek_v4", "llama4",        "llama4_text",   "ernie4_5",
    "ernie4_5_moe", "ernie4_5_vl", "ernie4_5_moe_vl", "ernie4_5_vl_moe", "ernie4_5_vl_moe_text",
    "helium"};

// Ernie 4.5-VL: its mrope_section is [h, w, t] in Ernie's 3-D layout.
bool IsErnieVl(const std::string& model_type) {
  return model_type == "ernie4_5_vl" || model_type == "ernie4_5_moe_vl" ||
         model_type == "ernie4_5_vl_moe" || model_type == "ernie4_5_vl_moe_text";
}

bool IsLlama4(const std::string& model_type) {
  return model_type == "llama4" || model_type == "llama4_text";
}

std::string Show(const Json& value) { return TruncatedUtf8(value.dump(), kMaxShown); }

absl::Status Invalid(const std::string& path, const Json& value, absl::string_view must) {
  return absl::InvalidArgumentError(
      absl::StrCat("hf_config_json: ", path, " is ", Show(value), ": ", must));
}

absl::Status Missing(const std::string& path, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("hf_config_json: ", path, " is missing: ", why));
}

// One JSON object and the key path that leads to it ("" at the top,
// "text_config.rope_scaling." below). A key that is absent or null is "not
// given", as Python's dict.get and `x or default` treat it.
class Scope {
 public:
  Scope() : object_(&EmptyObject()) {}
  Scope(const Json& object, std::string prefix) : object_(&object), prefix_(std::move(prefix)) {}

  const Json& object() const { return *object_; }
  std::string Path(absl::string_view key) const { return absl::StrCat(prefix_, key); }
  // The object's own path ("rope_parameters"; "" at the top).
  std::string Name() const {
    return prefix_.empty() ? prefix_ : prefix_.substr(0, prefix_.size() - 1);
  }

  const Json* Find(const std::string& key) const {
    auto it = object_->find(key);
    if (it == object_->end() || it->is_null()) return nullptr;
    return &*it;
  }
  bool Has(const std::string& key) const { return Find(key) != nullptr; }

  // A finite number (integer or float; booleans are not numbers).
  absl::StatusOr<std::optional<double>> Number(const std::string& key) const {
    const Json* v = Find(key);
    if (v == nullptr) return std::optional<double>();
    if (!v->is_number()) return Invalid(Path(key), *v, TypeWord(*v, "must be a number"));
    const double d = v->get<double>();
    if (!std::isfinite(d)) return Invalid(Path(key), *v, "must be finite");
    return std::optional<double>(d);
  }

  absl::StatusOr<std::optional<double>> PositiveNumber(const std::string& key) const {
    ROPE_ASSIGN_OR_RETURN(std::optional<double> d, Number(key));
    if (d.has_value() && *d <= 0) return Invalid(Path(key), *Find(key), "must be > 0");
    return d;
  }

  // A whole number in [1, 2^32 - 1]; 8192.0 counts as 8192.
  absl::StatusOr<std::optional<uint32_t>> Count(const std::string& key) const {
    const Json* v = Find(key);
    if (v == nullptr) return std::optional<uint32_t>();
    if (!v->is_number()) return Invalid(Path(key), *v, TypeWord(*v, "must be a whole number"));
    const double d = v->get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || d < 1 ||
        d > std::numeric_limits<uint32_t>::max()) {
      return Invalid(Path(key), *v, "must be a whole number in [1, 4294967295]");
    }
    return std::optional<uint32_t>(static_cast<uint32_t>(d));
  }

  absl::StatusOr<std::optional<std::string>> String(const std::string& key) const {
    const Json* v = Find(key);
    if (v == nullptr) return std::optional<std::string>();
    if (!v->is_string()) return Invalid(Path(key), *v, TypeWord(*v, "must be a string"));
    return std::optional<std::string>(v->get<std::string>());
  }

  absl::StatusOr<std::optional<bool>> Bool(const std::string& key) const {
    const Json* v = Find(key);
    if (v == nullptr) return std::optional<bool>();
    if (!v->is_boolean()) return Invalid(Path(key), *v, TypeWord(*v, "must be true or false"));
    return std::optional<bool>(v->get<bool>());
  }

  // A JSON object, or nullopt when not given.
  absl::StatusOr<std::optional<Scope>> Object(const std::string& key) const {
    const Json* v = Find(key);
    if (v == nullptr) return std::optional<Scope>();
    if (!v->is_object()) return Invalid(Path(key), *v, TypeWord(*v, "must be an object"));
    return std::optional<Scope>(Scope(*v, absl::StrCat(Path(key), ".")));
  }

  // A non-empty list of numbers, each finite and > 0.
  absl::StatusOr<std::optional<std::vector<double>>> PositiveList(const std::string& key) const {
    const Json* v = Find(key);
    if (v == nullptr) return std::optional<std::vector<double>>();
    if (!v->is_array() || v->empty()) {
      return Invalid(Path(key), *v, TypeWord(*v, "must be a non-empty list of numbers"));
    }
    std::vector<double> out;
    out.reserve(v->size());
    for (size_t i = 0; i < v->size(); ++i) {
      const Json& e = (*v)[i];
      const std::string path = absl::StrCat(Path(key), "[", i, "]");
      if (!e.is_number()) return Invalid(path, e, TypeWord(e, "must be a number"));
      const double d = e.get<double>();
      if (!std::isfinite(d) || d <= 0) return Invalid(path, e, "must be finite and > 0");
      out.push_back(d);
    }
    return std::optional<std::vector<double>>(std::move(out));
  }

  // A list of whole numbers >= 0 (M-RoPE sections).
  absl::StatusOr<std::optional<std::vector<uint32_t>>> CountList(const std::string& key) const {
    const Json* v = Find(key);
    if (v == nullptr) return std::optional<std::vector<uint32_t>>();
    if (!v->is_array()) return Invalid(Path(key), *v, TypeWord(*v, "must be a list"));
    std::vector<uint32_t> out;
    for (size_t i = 0; i < v->size(); ++i) {
      const Json& e = (*v)[i];
      const std::string path = absl::StrCat(Path(key), "[", i, "]");
      if (!e.is_number()) return Invalid(path, e, TypeWord(e, "must be a whole number"));
      const double d = e.get<double>();
      if (!std::isfinite(d) || d != std::floor(d) || d < 0 ||
          d > std::numeric_limits<uint32_t>::max()) {
        return Invalid(path, e, "must be a whole number in [0, 4294967295]");
      }
      out.push_back(static_cast<uint32_t>(d));
    }
    return std::optional<std::vector<uint32_t>>(std::move(out));
  }

 private:
  static const Json& EmptyObject() {
    static const Json* const kEmpty = new Json(Json::object());
    return *kEmpty;
  }
  // "must be a number (it is a string)".
  static std::string TypeWord(const Json& v, absl::string_view must) {
    return absl::StrCat(must, " (it is ", v.is_boolean() ? "a boolean" : v.type_name(), ")");
  }

  const Json* object_;
  std::string prefix_;
};

// Python's truthiness of a JSON value (null, false, 0, "", [] and {} are
// false), as `if config.get(key)` reads it.
bool Truthy(const Json* v) {
  if (v == nullptr || v->is_null()) return false;
  if (v->is_boolean()) return v->get<bool>();
  if (v->is_number()) return v->get<double>() != 0;
  if (v->is_string() || v->is_array() || v->is_object()) return !v->empty();
  return true;
}

// Keys that change RoPE in published configs of models this server does not
// derive. A config that has one (and, where marked, sets it true) is
// refused rather than served with the key ignored.
struct RefusedKey {
  const char* key;
  bool only_when_true;
  const char* what;
};
constexpr RefusedKey kRefusedKeys[] = {
    {"rope_ratio", false, "ChatGLM's base multiplier (base = 10000 * rope_ratio)"},
    {"use_dynamic_ntk", true, "Qwen-1's dynamic NTK with log-n attention"},
    {"use_logn_attn", true, "Qwen-1's log-n attention scaling"},
    {"alibi", true, "ALiBi position biases instead of rotary embedding"},
    {"rotary_emb_scale_base", false, "xPos scaling of the rotary embedding"},
    {"dual_chunk_attention_config", false,
     "Qwen2.5-1M's dual-chunk attention, with positions of its own per chunk"},
};

absl::Status CheckRefusedKeys(const Scope& cfg) {
  for (const RefusedKey& r : kRefusedKeys) {
    const Json* v = cfg.Find(r.key);
    if (v == nullptr || (r.only_when_true && !Truthy(v))) continue;
    return Invalid(cfg.Path(r.key), *v,
                   absl::StrCat("changes RoPE (", r.what,
                                ") in a way this server does not read: send the explicit config "
                                "instead of the config.json"));
  }
  if (const Json* v = cfg.Find("position_embedding_type")) {
    if (!v->is_string() || (v->get<std::string>() != "rope" && v->get<std::string>() != "rotary")) {
      return Invalid(cfg.Path("position_embedding_type"), *v,
                     "the model's positions are not rotary (\"rope\" or \"rotary\"): this server "
                     "serves rotary embeddings only");
    }
  }
  return absl::OkStatus();
}

// The first of `keys` that `scope` has, with its path; several that
// disagree are refused (two spellings of one setting must not contradict).
absl::StatusOr<std::optional<std::pair<double, std::string>>> AliasedNumber(
    const Scope& scope, std::initializer_list<const char*> keys) {
  std::optional<std::pair<double, std::string>> found;
  for (const char* key : keys) {
    ROPE_ASSIGN_OR_RETURN(std::optional<double> v, scope.Number(key));
    if (!v.has_value()) continue;
    if (found.has_value() && found->first != *v) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hf_config_json: ", found->second, " is ", found->first, " but ", scope.Path(key),
          " is ", *v, ": two spellings of one setting disagree"));
    }
    if (!found.has_value()) found = std::make_pair(*v, scope.Path(key));
  }
  return found;
}

// The layer types of the config, explicit (layer_types) or as the model
// class derives them when the config omits the list. A derived pattern is
// kept as its rule, never spelled out per layer: num_hidden_layers may be
// anything up to 2^32 - 1 in a hostile config.
struct LayerPlan {
  std::vector<std::string> layer_types;  // explicit; empty: derived or all full_attention
  std::string layer_types_key;           // where they come from, for messages
  // no_rope_layers (1: the layer rotates, 0: NoPE) as given; empty: see
  // nope_every.
  std::vector<bool> uses_rope;
  std::string uses_rope_key;
  // The model class's default NoPE rule: layer i is NoPE when
  // (i + 1) % nope_every == 0, for nope_layers layers (0: no rule).
  uint32_t nope_every = 0;
  uint32_t nope_layers = 0;
  // Llama 4: a layer's type follows its rope (chunked_attention when it
  // rotates, full_attention when NoPE).
  bool types_follow_rope = false;
  // Gemma 3: layer i is full_attention when (i + 1) % global_every == 0,
  // else sliding_attention, for global_layers layers (0: no rule).
  uint32_t global_every = 0;
  uint32_t global_layers = 0;
  std::optional<uint32_t> num_hidden_layers;

  // The distinct layer type names the config has (for SelectParams).
  std::vector<std::string> TypeNames() const {
    if (!layer_types.empty()) return layer_types;
    if (types_follow_rope) return {"chunked_attention", kFullAttention};
    if (global_every != 0) return {kSlidingAttention, kFullAttention};
    return {};
  }
};

absl::StatusOr<std::vector<std::string>> StringList(const Scope& cfg, const std::string& key) {
  std::vector<std::string> out;
  const Json* v = cfg.Find(key);
  if (v == nullptr) return out;
  if (!v->is_array()) return Invalid(cfg.Path(key), *v, "must be a list of layer type names");
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) {
      return Invalid(absl::StrCat(cfg.Path(key), "[", i, "]"), (*v)[i],
                     "must be a layer type name (a string)");
    }
    out.push_back((*v)[i].get<std::string>());
  }
  return out;
}

absl::StatusOr<LayerPlan> PlanLayers(const Scope& cfg, const std::string& model_type) {
  LayerPlan plan;
  ROPE_ASSIGN_OR_RETURN(plan.num_hidden_layers, cfg.Count("num_hidden_layers"));
  ROPE_ASSIGN_OR_RETURN(plan.layer_types, StringList(cfg, "layer_types"));
  plan.layer_types_key = cfg.Path("layer_types");

  // no_rope_layers: Llama 4 and SmolLM3 (1 rotates, 0 is NoPE), default
  // [(i + 1) % no_rope_layer_interval != 0] over num_hidden_layers.
  if (const Json* v = cfg.Find("no_rope_layers")) {
    if (!v->is_array()) return Invalid(cfg.Path("no_rope_layers"), *v, "must be a list of 0 / 1");
    for (size_t i = 0; i < v->size(); ++i) {
      const Json& e = (*v)[i];
      const bool ok = e.is_boolean() || (e.is_number() && (e.get<double>() == 0 || e.get<double>() == 1));
      if (!ok) {
        return Invalid(absl::StrCat(cfg.Path("no_rope_layers"), "[", i, "]"), e,
                       "must be 1 (the layer rotates) or 0 (NoPE)");
      }
      plan.uses_rope.push_back(Truthy(&e));
    }
    plan.uses_rope_key = cfg.Path("no_rope_layers");
  }
  ROPE_ASSIGN_OR_RETURN(std::optional<uint32_t> interval, cfg.Count("no_rope_layer_interval"));
  if (!cfg.Has("no_rope_layers") && (IsLlama4(model_type) || model_type == "smollm3" ||
                                     interval.has_value())) {
    // Llama4TextConfig: 48 layers; SmolLM3Config: 36.
    plan.nope_layers = plan.num_hidden_layers.value_or(model_type == "smollm3" ? 36 : 48);
    plan.nope_every = interval.value_or(4);
    plan.uses_rope_key =
        absl::StrCat(cfg.Path("no_rope_layer_interval"), " (", plan.nope_every, ")");
  }

  if (plan.layer_types.empty()) {
    if (IsLlama4(model_type) && (!plan.uses_rope.empty() || plan.nope_every != 0)) {
      // Llama4TextConfig: rope layers are chunked_attention, NoPE layers
      // full_attention.
      plan.types_follow_rope = true;
      plan.layer_types_key = plan.uses_rope_key;
    } else if (model_type == "gemma3_text") {
      // Gemma3TextConfig: every sliding_window_pattern-th layer is global.
      ROPE_ASSIGN_OR_RETURN(std::optional<uint32_t> pattern, cfg.Count("sliding_window_pattern"));
      plan.global_every = pattern.value_or(6);
      plan.global_layers = plan.num_hidden_layers.value_or(26);
      plan.layer_types_key =
          absl::StrCat(cfg.Path("sliding_window_pattern"), " (", plan.global_every, ")");
    } else if (model_type == "deepseek_v4" && cfg.Has("compress_ratios")) {
      // DeepseekV4Config folds the legacy per-layer compress_ratios in.
      const Json& ratios = *cfg.Find("compress_ratios");
      if (!ratios.is_array()) {
        return Invalid(cfg.Path("compress_ratios"), ratios, "must be a list of 0, 4 or 128");
      }
      for (size_t i = 0; i < ratios.size(); ++i) {
        const Json& r = ratios[i];
        const double ratio = r.is_number() ? r.get<double>() : -1;
        if (ratio != 0 && ratio != 4 && ratio != 128) {
          return Invalid(absl::StrCat(cfg.Path("compress_ratios"), "[", i, "]"), r,
                         "must be 0 (sliding_attention), 4 (compressed_sparse_attention) or 128 "
                         "(heavily_compressed_attention), as transformers maps them");
        }
        plan.layer_types.push_back(ratio == 0   ? kSlidingAttention
                                   : ratio == 4 ? kCompressedLayerTypes[0]
                                                : kCompressedLayerTypes[1]);
      }
      plan.layer_types_key = cfg.Path("compress_ratios");
    }
  }
  return plan;
}

// The layer `selector` names: its type and whether it rotates.
struct ChosenLayer {
  std::string layer_type;
  bool no_rope = false;
};

absl::StatusOr<ChosenLayer> ChooseLayer(const LayerPlan& plan, const HfLayerSelector& selector) {
  ChosenLayer chosen;
  if (!selector.layer_index.has_value()) {
    // A layer type alone never selects a NoPE layer: transformers names
    // Llama 4's NoPE layers full_attention, the type its rope layers have
    // everywhere else (hf_layer_index selects them).
    chosen.layer_type = selector.layer_type.empty() ? kFullAttention : selector.layer_type;
    return chosen;
  }
  const uint32_t index = *selector.layer_index;
  auto out_of_range = [&](size_t count, const std::string& source) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hf_layer_index is ", index, ": hf_config_json has ", count, " decoder layers (",
        source, "); layers are numbered from 0"));
  };
  if (plan.num_hidden_layers.has_value() && index >= *plan.num_hidden_layers) {
    return out_of_range(*plan.num_hidden_layers, "num_hidden_layers");
  }
  if (!plan.layer_types.empty() && index >= plan.layer_types.size()) {
    return out_of_range(plan.layer_types.size(), plan.layer_types_key);
  }
  if (plan.global_every != 0 && index >= plan.global_layers) {
    return out_of_range(plan.global_layers, plan.layer_types_key);
  }
  if (!plan.uses_rope.empty() && index >= plan.uses_rope.size()) {
    return out_of_range(plan.uses_rope.size(), plan.uses_rope_key);
  }
  if (plan.nope_every != 0 && index >= plan.nope_layers) {
    return out_of_range(plan.nope_layers, plan.uses_rope_key);
  }
  bool rotates = true;
  if (!plan.uses_rope.empty()) {
    rotates = plan.uses_rope[index];
  } else if (plan.nope_every != 0) {
    rotates = (static_cast<uint64_t>(index) + 1) % plan.nope_every != 0;
  }
  chosen.no_rope = !rotates;
  if (!plan.layer_types.empty()) {
    chosen.layer_type = plan.layer_types[index];
  } else if (plan.types_follow_rope) {
    chosen.layer_type = rotates ? "chunked_attention" : kFullAttention;
  } else if (plan.global_every != 0) {
    chosen.layer_type = (static_cast<uint64_t>(index) + 1) % plan.global_every != 0
                            ? kSlidingAttention
                            : kFullAttention;
  } else {
    chosen.layer_type = kFullAttention;
  }
  return chosen;
}

// Where the rope parameters of the requested layer type come from.
struct Selection {
  Scope params;                  // the dict transformers computes from
  bool per_layer = false;        // rope_parameters keyed by layer type (or rope group)
  bool gemma_sliding = false;    // Gemma 3 sliding layer: rope_local_base_freq, no scaling
  // A base that takes the place of rope_theta (DeepSeek-V4's
  // compress_rope_theta), and where it is.
  std::optional<double> theta;
  std::string theta_path;
  // YaRN's attention factor when the dict has none (DeepSeek-V4's compress
  // group: 1, as DeepseekV4Config sets it).
  std::optional<double> default_attention_factor;
};

// transformers' test for the per-layer form: every key of the dict names a
// layer type (of layer_types when the config has it) and holds a dict.
bool IsPerLayer(const Json& params, const std::vector<std::string>& layer_types) {
  if (params.empty()) return false;
  std::set<std::string> names(layer_types.begin(), layer_types.end());
  if (names.empty()) names.insert(std::begin(kKnownLayerTypes), std::end(kKnownLayerTypes));
  for (auto it = params.begin(); it != params.end(); ++it) {
    if (names.count(it.key()) == 0 || !it.value().is_object()) return false;
  }
  return true;
}

// DeepSeek-V4's saved form: {"main": {...}, "compress": {...}}.
bool IsGrouped(const Json& params) {
  if (params.size() != 2) return false;
  auto main = params.find(kMainGroup);
  auto compress = params.find(kCompressGroup);
  return main != params.end() && main->is_object() && compress != params.end() &&
         compress->is_object();
}

std::string Keys(const Json& object) {
  std::vector<std::string> keys;
  for (auto it = object.begin(); it != object.end(); ++it) keys.push_back(it.key());
  return absl::StrJoin(keys, ", ");
}

// The dict transformers reads the rope from: `rope_scaling or
// rope_parameters`, the older key first.
absl::StatusOr<Scope> RopeDict(const Scope& cfg) {
  ROPE_ASSIGN_OR_RETURN(std::optional<Scope> rope_scaling, cfg.Object("rope_scaling"));
  ROPE_ASSIGN_OR_RETURN(std::optional<Scope> rope_parameters, cfg.Object("rope_parameters"));
  if (rope_scaling.has_value() && !rope_scaling->object().empty()) return *rope_scaling;
  if (rope_parameters.has_value()) return *rope_parameters;
  return Scope(Scope().object(), cfg.Path("rope_parameters."));
}

// DeepSeek-V4's rope group of a layer type or group name.
absl::StatusOr<std::string> GroupOf(const std::string& layer_type) {
  if (layer_type == kMainGroup || layer_type == kSlidingAttention) return std::string(kMainGroup);
  if (layer_type == kCompressGroup || layer_type == kCompressedLayerTypes[0] ||
      layer_type == kCompressedLayerTypes[1]) {
    return std::string(kCompressGroup);
  }
  if (layer_type.empty() || layer_type == kFullAttention) {
    return absl::InvalidArgumentError(
        "hf_layer_type is unset (full_attention): DeepSeek-V4 has two rope groups, main "
        "(sliding_attention layers, rope_theta) and compress (compressed_sparse_attention and "
        "heavily_compressed_attention layers, compress_rope_theta): set hf_layer_type to one of "
        "them, or hf_layer_index");
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "hf_layer_type is '", TruncatedUtf8(layer_type, kMaxShown),
      "': DeepSeek-V4's layers are sliding_attention (rope group main), "
      "compressed_sparse_attention or heavily_compressed_attention (rope group compress)"));
}

// DeepSeek-V4's group `group` ("main" or "compress"), from the saved form
// ({"main": ..., "compress": ...}) or, as DeepseekV4Config builds it, from
// rope_theta (main: plain) and rope_scaling with compress_rope_theta
// (compress; a yarn's attention factor 1 unless given).
absl::StatusOr<Selection> SelectGroup(const Scope& cfg, const Scope& dict, const std::string& group) {
  Selection sel;
  sel.per_layer = true;
  if (IsGrouped(dict.object())) {
    ROPE_ASSIGN_OR_RETURN(std::optional<Scope> entry, dict.Object(group));
    sel.params = *entry;
  } else if (group == kMainGroup) {
    sel.params = Scope(Scope().object(), cfg.Path("rope_parameters.main."));
  } else {
    sel.params = dict;
    ROPE_ASSIGN_OR_RETURN(std::optional<double> theta, cfg.Number("compress_rope_theta"));
    sel.theta_path = cfg.Path("compress_rope_theta");
    if (!theta.has_value()) {
      theta = 160000.0;  // DeepseekV4Config's default
      sel.theta_path = absl::StrCat(sel.theta_path, " (DeepseekV4Config's default, 160000)");
    }
    sel.theta = theta;
    sel.default_attention_factor = 1.0;
  }
  return sel;
}

absl::StatusOr<Selection> SelectParams(const Scope& cfg, const std::string& model_type,
                                       const std::string& layer_type,
                                       const std::vector<std::string>& layer_types) {
  ROPE_ASSIGN_OR_RETURN(const Scope dict, RopeDict(cfg));
  Selection sel;
  sel.params = dict;
  if (IsPerLayer(dict.object(), layer_types)) {
    ROPE_ASSIGN_OR_RETURN(std::optional<Scope> entry, dict.Object(layer_type));
    if (!entry.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hf_layer_type is '", TruncatedUtf8(layer_type, kMaxShown), "': hf_config_json's ",
          dict.Name(), " has no entry for it (it has ", Keys(dict.object()), ")"));
    }
    sel.params = *entry;
    sel.per_layer = true;
    return sel;
  }
  // Gemma 3's published configs: one rope_scaling for the full-attention
  // layers, rope_local_base_freq (and no scaling) for the sliding ones.
  const bool gemma_style = model_type == "gemma3_text" || cfg.Has("rope_local_base_freq");
  const bool known_layer =
      layer_type == kFullAttention || layer_type == kSlidingAttention ||
      std::find(layer_types.begin(), layer_types.end(), layer_type) != layer_types.end();
  if (!known_layer || (gemma_style && layer_type != kFullAttention &&
                       layer_type != kSlidingAttention)) {
    return absl::InvalidArgumentError(
        absl::StrCat("hf_layer_type is '", TruncatedUtf8(layer_type, kMaxShown),
                     "': must be full_attention or sliding_attention",
                     layer_types.empty() ? "" : " (or a name in hf_config_json's layer_types)"));
  }
  sel.gemma_sliding = gemma_style && layer_type == kSlidingAttention;
  return sel;
}

// rope_theta of the selected layer type.
absl::StatusOr<double> Theta(const Scope& cfg, const Selection& sel,
                             const std::string& layer_type, const ModelTypeDefaults* defaults) {
  std::optional<double> theta;
  std::string path;
  if (sel.theta.has_value()) {
    theta = sel.theta;
    path = sel.theta_path;
  } else if (sel.gemma_sliding) {
    ROPE_ASSIGN_OR_RETURN(theta, cfg.Number("rope_local_base_freq"));
    path = cfg.Path("rope_local_base_freq");
    if (!theta.has_value()) {
      if (defaults == nullptr || defaults->rope_local_base_freq == 0) {
        return Missing(path, "the sliding-attention layers' base (Gemma 3)");
      }
      theta = defaults->rope_local_base_freq;
    }
  } else {
    ROPE_ASSIGN_OR_RETURN(theta, sel.params.Number("rope_theta"));
    path = sel.params.Path("rope_theta");
    if (!theta.has_value()) {
      // GPT-NeoX (and Qwen-1, nomic-bert) spell it rotary_emb_base.
      using Spelled = std::optional<std::pair<double, std::string>>;
      ROPE_ASSIGN_OR_RETURN(Spelled top, AliasedNumber(cfg, {"rope_theta", "rotary_emb_base"}));
      if (top.has_value()) {
        theta = top->first;
        path = top->second;
      }
    }
    if (!theta.has_value()) {
      if (defaults == nullptr || defaults->rope_theta == 0) {
        return Missing(cfg.Path("rope_theta"),
                       absl::StrCat("transformers would take the model class's default (",
                                    kPythonDefaultTheta,
                                    " for most), which this server knows only for model_type "
                                    "gemma3_text, gptj and codegen: add rope_theta"));
      }
      // Gemma3TextConfig's per-layer dicts default to its local base for
      // sliding layers.
      theta = sel.per_layer && layer_type == kSlidingAttention && defaults->rope_local_base_freq != 0
                  ? defaults->rope_local_base_freq
                  : defaults->rope_theta;
    }
  }
  if (*theta <= 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("hf_config_json: ", path, " is ", *theta, ": must be > 1"));
  }
  return *theta;
}

// The per-head width the rope applies to, before partial_rotary_factor: 0
// when the JSON says nothing about it.
absl::StatusOr<uint32_t> HeadDim(const Scope& cfg, const ModelTypeDefaults* defaults,
                                 const std::string& model_type, const std::string& layer_type) {
  // DeepSeek MLA: the rotated part of q and k is a tensor of its own.
  ROPE_ASSIGN_OR_RETURN(std::optional<uint32_t> rope_part, cfg.Count("qk_rope_head_dim"));
  if (rope_part.has_value()) return *rope_part;
  // Gemma 4's full-attention layers have wider heads (transformers reads
  // global_head_dim for them, head_dim for the sliding ones).
  if (absl::StartsWith(model_type, "gemma4") && layer_type == kFullAttention) {
    ROPE_ASSIGN_OR_RETURN(std::optional<uint32_t> global, cfg.Count("global_head_dim"));
    if (global.has_value()) return *global;
  }
  ROPE_ASSIGN_OR_RETURN(std::optional<uint32_t> head_dim, cfg.Count("head_dim"));
  if (head_dim.has_value()) return *head_dim;
  if (defaults != nullptr && defaults->head_dim != 0) return defaults->head_dim;
  // GPT-J and CodeGen spell them n_embd and n_head.
  ROPE_ASSIGN_OR_RETURN(std::optional<uint32_t> hidden, cfg.Count("hidden_size"));
  std::string hidden_path = cfg.Path("hidden_size");
  if (!hidden.has_value()) {
    ROPE_ASSIGN_OR_RETURN(hidden, cfg.Count("n_embd"));
    hidden_path = cfg.Path("n_embd");
  }
  ROPE_ASSIGN_OR_RETURN(std::optional<uint32_t> heads, cfg.Count("num_attention_heads"));
  std::string heads_path = cfg.Path("num_attention_heads");
  if (!heads.has_value()) {
    ROPE_ASSIGN_OR_RETURN(heads, cfg.Count("n_head"));
    heads_path = cfg.Path("n_head");
  }
  if (hidden.has_value() && heads.has_value()) {
    if (*hidden < *heads) {
      return absl::InvalidArgumentError(absl::StrCat("hf_config_json: ", hidden_path, " is ",
                                                     *hidden, ": smaller than ", heads_path, " ",
                                                     *heads, " (head_dim would be 0)"));
    }
    return *hidden / *heads;  // Python's //
  }
  return 0u;
}

// The model's softmax scale when its attention departs from head_dim^-0.5
// (0 otherwise), as transformers' attention classes set `self.scaling`:
//   DeepSeek MLA (qk_nope_head_dim and qk_rope_head_dim): qk_head_dim^-0.5
//     with qk_head_dim their sum, times mscale^2 when the rope is scaled
//     (rope_type not default) and gives mscale_all_dim, where mscale is
//     yarn_get_mscale(factor, mscale_all_dim) = 0.1 * mscale_all_dim *
//     ln(factor) + 1 (1 for factor <= 1);
//   Gemma 2 / 3 (query_pre_attn_scalar, by their config classes' default
//     256 when the JSON omits it): query_pre_attn_scalar^-0.5.
absl::StatusOr<double> SoftmaxScale(const Scope& cfg, const Scope& params,
                                    const std::string& model_type, const std::string& rope_type) {
  ROPE_ASSIGN_OR_RETURN(std::optional<double> nope, cfg.Number("qk_nope_head_dim"));
  ROPE_ASSIGN_OR_RETURN(std::optional<double> rope_part, cfg.Number("qk_rope_head_dim"));
  if (nope.has_value() && rope_part.has_value()) {
    const double qk_head_dim = *nope + *rope_part;
    if (*nope < 0 || qk_head_dim <= 0) {
      return Invalid(cfg.Path("qk_nope_head_dim"), *cfg.Find("qk_nope_head_dim"),
                     "must be >= 0 (qk_head_dim = qk_nope_head_dim + qk_rope_head_dim)");
    }
    double scale = 1.0 / std::sqrt(qk_head_dim);
    if (rope_type != "default") {
      ROPE_ASSIGN_OR_RETURN(std::optional<double> mscale_all_dim, params.Number("mscale_all_dim"));
      ROPE_ASSIGN_OR_RETURN(std::optional<double> factor, params.Number("factor"));
      if (mscale_all_dim.value_or(0) != 0 && factor.has_value()) {
        const double mscale =
            *factor <= 1 ? 1.0 : 0.1 * *mscale_all_dim * std::log(*factor) + 1.0;
        scale *= mscale * mscale;
      }
    }
    return scale;
  }
  ROPE_ASSIGN_OR_RETURN(std::optional<double> scalar, cfg.PositiveNumber("query_pre_attn_scalar"));
  if (!scalar.has_value() && (model_type == "gemma2" || model_type == "gemma3_text")) {
    scalar = 256.0;  // Gemma2Config's and Gemma3TextConfig's default
  }
  if (scalar.has_value()) return 1.0 / std::sqrt(*scalar);
  return 0.0;
}

// max_position_embeddings (GPT-J: n_positions), or the class default.
absl::StatusOr<std::optional<uint32_t>> MaxPositions(const Scope& cfg,
                                                     const ModelTypeDefaults* defaults) {
  ROPE_ASSIGN_OR_RETURN(std::optional<uint32_t> max_positions, cfg.Count("max_position_embeddings"));
  if (!max_positions.has_value()) {
    ROPE_ASSIGN_OR_RETURN(max_positions, cfg.Count("n_positions"));
  }
  if (!max_positions.has_value() && defaults != nullptr && defaults->max_position_embeddings != 0) {
    max_positions = defaults->max_position_embeddings;
  }
  return max_positions;
}

absl::StatusOr<ScalingConfig> Scaling(const std::string& rope_type, const Scope& cfg,
                                      const Selection& sel, const ModelTypeDefaults* defaults) {
  const Scope& p = sel.params;
  ROPE_ASSIGN_OR_RETURN(const std::optional<uint32_t> max_positions, MaxPositions(cfg, defaults));
  auto require_max_positions = [&](absl::string_view why) -> absl::StatusOr<uint32_t> {
    if (!max_positions.has_value()) return Missing(cfg.Path("max_position_embeddings"), why);
    return *max_positions;
  };
  // llama3 / yarn / longrope: the pretraining length. A top-level
  // original_max_position_embeddings (Phi-3) wins over the dict's, except in
  // the per-layer form; max_position_embeddings is the last resort.
  auto original = [&]() -> absl::StatusOr<uint32_t> {
    std::optional<uint32_t> value;
    if (!sel.per_layer) {
      ROPE_ASSIGN_OR_RETURN(value, cfg.Count("original_max_position_embeddings"));
    }
    if (!value.has_value()) {
      ROPE_ASSIGN_OR_RETURN(value, p.Count("original_max_position_embeddings"));
    }
    if (value.has_value()) return *value;
    if (max_positions.has_value()) return *max_positions;
    return Missing(p.Path("original_max_position_embeddings"),
                   absl::StrCat("rope_type ", rope_type,
                                " needs it (or max_position_embeddings, transformers' fallback)"));
  };
  auto required = [&](const std::string& key) -> absl::StatusOr<double> {
    ROPE_ASSIGN_OR_RETURN(std::optional<double> v, p.PositiveNumber(key));
    if (!v.has_value()) return Missing(p.Path(key), absl::StrCat("rope_type ", rope_type, " needs it"));
    return *v;
  };

  if (rope_type == "default") return ScalingConfig(NoScaling{});
  if (rope_type == "linear") {
    LinearScaling s;
    ROPE_ASSIGN_OR_RETURN(s.factor, required("factor"));
    return ScalingConfig(s);
  }
  if (rope_type == "dynamic") {
    // HunYuan: an alpha (truthy, as its rotary embedding tests it) makes the
    // base theta * alpha^(r/(r-2)) whatever the length, with no factor.
    if (Truthy(p.Find("alpha"))) {
      DynamicNtkAlphaScaling s;
      ROPE_ASSIGN_OR_RETURN(s.alpha, required("alpha"));
      return ScalingConfig(s);
    }
    DynamicNtkScaling s;
    ROPE_ASSIGN_OR_RETURN(s.factor, required("factor"));
    // transformers' dynamic NTK grows the base past max_position_embeddings.
    ROPE_ASSIGN_OR_RETURN(s.original_max_position_embeddings,
                          require_max_positions("rope_type dynamic scales past it"));
    return ScalingConfig(s);
  }
  if (rope_type == "ntk") {
    // vLLM's NTKScalingRotaryEmbedding (get_rope: factor, optional mixed_b).
    NtkScaling s;
    ROPE_ASSIGN_OR_RETURN(s.factor, required("factor"));
    ROPE_ASSIGN_OR_RETURN(std::optional<double> mixed_b, p.Number("mixed_b"));
    s.has_mixed_b = mixed_b.has_value();
    s.mixed_b = mixed_b.value_or(0);
    return ScalingConfig(s);
  }
  if (rope_type == "yarn") {
    YarnScaling s;
    ROPE_ASSIGN_OR_RETURN(s.original_max_position_embeddings, original());
    // transformers' validate_rope requires factor (a KeyError without it).
    ROPE_ASSIGN_OR_RETURN(s.factor, required("factor"));
    ROPE_ASSIGN_OR_RETURN(std::optional<double> attention, p.PositiveNumber("attention_factor"));
    if (!attention.has_value()) attention = sel.default_attention_factor;
    s.attention_factor = attention.value_or(0);
    // transformers: `mscale and mscale_all_dim` (0 and absent alike unset).
    ROPE_ASSIGN_OR_RETURN(std::optional<double> mscale, p.Number("mscale"));
    ROPE_ASSIGN_OR_RETURN(std::optional<double> mscale_all_dim, p.Number("mscale_all_dim"));
    s.mscale = mscale.value_or(0);
    s.mscale_all_dim = mscale_all_dim.value_or(0);
    // transformers: `beta_fast or 32`, `beta_slow or 1`; 0 is this engine's
    // "default" too. Equal betas (Kimi K2) are accepted, as transformers
    // accepts them.
    ROPE_ASSIGN_OR_RETURN(std::optional<double> beta_fast, p.Number("beta_fast"));
    ROPE_ASSIGN_OR_RETURN(std::optional<double> beta_slow, p.Number("beta_slow"));
    s.beta_fast = beta_fast.value_or(0);
    s.beta_slow = beta_slow.value_or(0);
    ROPE_ASSIGN_OR_RETURN(std::optional<bool> truncate, p.Bool("truncate"));
    s.truncate = truncate.value_or(true);
    return ScalingConfig(s);
  }
  if (rope_type == "deepseek_yarn" || rope_type == "deepseek_llama_scaling") {
    // vLLM's names for DeepSeek's YaRN (DeepseekScalingRotaryEmbedding):
    // factor and original_max_position_embeddings required, the rest at
    // vLLM's defaults.
    DeepseekYarnScaling s;
    ROPE_ASSIGN_OR_RETURN(s.factor, required("factor"));
    ROPE_ASSIGN_OR_RETURN(std::optional<uint32_t> original_value,
                          p.Count("original_max_position_embeddings"));
    if (!original_value.has_value()) {
      return Missing(p.Path("original_max_position_embeddings"),
                     "rope_type deepseek_yarn needs it");
    }
    s.original_max_position_embeddings = *original_value;
    ROPE_ASSIGN_OR_RETURN(std::optional<double> beta_fast, p.PositiveNumber("beta_fast"));
    ROPE_ASSIGN_OR_RETURN(std::optional<double> beta_slow, p.PositiveNumber("beta_slow"));
    s.beta_fast = beta_fast.value_or(32);
    s.beta_slow = beta_slow.value_or(1);
    ROPE_ASSIGN_OR_RETURN(std::optional<double> mscale, p.Number("mscale"));
    ROPE_ASSIGN_OR_RETURN(std::optional<double> mscale_all_dim, p.Number("mscale_all_dim"));
    ROPE_ASSIGN_OR_RETURN(std::optional<double> attn_factor, p.PositiveNumber("attn_factor"));
    ROPE_ASSIGN_OR_RETURN(std::optional<double> extrapolation, p.Number("extrapolation_factor"));
    s.mscale = mscale.value_or(1);
    s.mscale_all_dim = mscale_all_dim.value_or(0);
    s.attn_factor = attn_factor.value_or(1);
    s.extrapolation_factor = extrapolation.value_or(1);
    return ScalingConfig(s);
  }
  if (rope_type == "llama3") {
    Llama3Scaling s;
    ROPE_ASSIGN_OR_RETURN(s.factor, required("factor"));
    ROPE_ASSIGN_OR_RETURN(s.low_freq_factor, required("low_freq_factor"));
    ROPE_ASSIGN_OR_RETURN(s.high_freq_factor, required("high_freq_factor"));
    ROPE_ASSIGN_OR_RETURN(s.original_max_position_embeddings, original());
    if (s.low_freq_factor > s.high_freq_factor) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hf_config_json: ", p.Path("low_freq_factor"), " is ", s.low_freq_factor,
          ": must be <= high_freq_factor ", s.high_freq_factor,
          " (the smoothing bands of transformers' formula overlap otherwise)"));
    }
    return ScalingConfig(s);
  }
  if (rope_type == "longrope") {
    LongRopeScaling s;
    ROPE_ASSIGN_OR_RETURN(std::optional<std::vector<double>> short_factor,
                          p.PositiveList("short_factor"));
    if (!short_factor.has_value()) return Missing(p.Path("short_factor"), "rope_type longrope needs it");
    ROPE_ASSIGN_OR_RETURN(std::optional<std::vector<double>> long_factor,
                          p.PositiveList("long_factor"));
    if (!long_factor.has_value()) return Missing(p.Path("long_factor"), "rope_type longrope needs it");
    // Phi-3.5-MoE (model_type phimoe) scales cos/sin by short_mscale or
    // long_mscale, chosen with the list, in place of longrope's attention
    // factor. Equal (as published: 1.243163121016122 both), that is one
    // attention factor; different, it needs a per-list factor this server
    // does not have: refused rather than read as plain longrope (1.19).
    ROPE_ASSIGN_OR_RETURN(std::optional<double> short_mscale, p.PositiveNumber("short_mscale"));
    ROPE_ASSIGN_OR_RETURN(std::optional<double> long_mscale, p.PositiveNumber("long_mscale"));
    std::optional<double> list_mscale;
    if (short_mscale.has_value() || long_mscale.has_value()) {
      if (short_mscale != long_mscale) {
        return absl::InvalidArgumentError(absl::StrCat(
            "hf_config_json: ", p.Path("short_mscale"), " (",
            short_mscale.has_value() ? absl::StrCat(*short_mscale) : "absent", ") and ",
            p.Path("long_mscale"), " (",
            long_mscale.has_value() ? absl::StrCat(*long_mscale) : "absent",
            ") differ: a scaling of cos/sin per factor list is not supported by this server"));
      }
      list_mscale = short_mscale;
    }
    s.short_factor = *std::move(short_factor);
    s.long_factor = *std::move(long_factor);
    ROPE_ASSIGN_OR_RETURN(s.original_max_position_embeddings, original());
    // The per-request choice of list follows transformers only with
    // max_position_embeddings set (LongRopeScaling).
    ROPE_ASSIGN_OR_RETURN(s.max_position_embeddings,
                          require_max_positions("rope_type longrope derives its attention factor "
                                                "from max_position_embeddings / original"));
    ROPE_ASSIGN_OR_RETURN(std::optional<double> attention, p.PositiveNumber("attention_factor"));
    ROPE_ASSIGN_OR_RETURN(std::optional<double> factor, p.PositiveNumber("factor"));
    if (list_mscale.has_value()) {
      s.attention_factor = *list_mscale;
    } else if (attention.has_value()) {
      s.attention_factor = *attention;
    } else if (factor.has_value()) {
      // An explicit factor replaces max_position_embeddings / original in
      // transformers' attention factor.
      s.attention_factor =
          *factor <= 1 ? 1.0
                       : std::sqrt(1 + std::log(*factor) /
                                           std::log(static_cast<double>(
                                               s.original_max_position_embeddings)));
    }
    return ScalingConfig(s);
  }
  if (rope_type == "proportional") {
    // rotated_pairs needs head_dim, which may be the request's:
    // ApplyHfRopeConfig sets it from partial_rotary_factor.
    ProportionalScaling s;
    ROPE_ASSIGN_OR_RETURN(std::optional<double> factor, p.PositiveNumber("factor"));
    s.factor = factor.value_or(1.0);
    return ScalingConfig(s);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "hf_config_json: ", p.Path("rope_type"), " is \"", TruncatedUtf8(rope_type, kMaxShown),
      "\": not supported (this server serves default, linear, dynamic (with factor or alpha), "
      "yarn, deepseek_yarn (deepseek_llama_scaling), llama3, longrope, proportional, ntk, "
      "ernie_3d, and mrope sections "
      "with them)"));
}

// Ernie 4.5-VL's frequencies on the t axis: the published (remote-code)
// config's freq_allocation (vLLM reads it, default 20), or the same key in
// a rope_type "ernie_3d" dict.
absl::StatusOr<std::optional<uint32_t>> ErnieFreqAllocation(const Scope& cfg, const Scope& params,
                                                            const std::string& model_type,
                                                            const std::string& rope_type) {
  std::optional<uint32_t> value;
  const Scope* given_in = nullptr;  // the scope that gave `value`
  for (const Scope* scope : {&params, &cfg}) {
    if (value.has_value() || !scope->Has("freq_allocation")) continue;
    given_in = scope;
    const Json& v = *scope->Find("freq_allocation");
    if (!v.is_number() || v.get<double>() != std::floor(v.get<double>()) || v.get<double>() < 0 ||
        v.get<double>() > std::numeric_limits<uint32_t>::max()) {
      return Invalid(scope->Path("freq_allocation"), v, "must be a whole number >= 0");
    }
    value = static_cast<uint32_t>(v.get<double>());
  }
  const bool ernie_model = model_type == "ernie4_5_moe_vl" || model_type == "ernie4_5_vl";
  ROPE_ASSIGN_OR_RETURN(std::optional<bool> rope_3d, cfg.Bool("rope_3d"));
  if (value.has_value() && !ernie_model && rope_type != "ernie_3d" && !rope_3d.value_or(false)) {
    return Invalid(given_in->Path("freq_allocation"), *given_in->Find("freq_allocation"),
                   "Ernie's 3-D RoPE key, in a config that neither is an Ernie 4.5-VL "
                   "(model_type ernie4_5_moe_vl) nor sets rope_3d: refused rather than ignored");
  }
  if (!value.has_value() && (ernie_model || rope_type == "ernie_3d")) value = 20u;  // vLLM's default
  if (rope_3d.has_value() && !*rope_3d) value.reset();
  return value;
}

// One layer type's (or rope group's) rope from its Selection.
absl::StatusOr<HfRopeConfig> Derive(const Scope& cfg, const Selection& sel,
                                    const std::string& layer_type, const std::string& model_type,
                                    const ModelTypeDefaults* defaults) {
  HfRopeConfig out;
  out.layer_type = layer_type;
  ROPE_ASSIGN_OR_RETURN(out.theta, Theta(cfg, sel, layer_type, defaults));
  ROPE_ASSIGN_OR_RETURN(out.head_dim, HeadDim(cfg, defaults, model_type, layer_type));

  // A top-level partial_rotary_factor overrides the dict's (transformers
  // copies it in). GPT-NeoX spells it rotary_pct (older StableLM rope_pct,
  // nomic-bert rotary_emb_fraction).
  using Spelled = std::optional<std::pair<double, std::string>>;
  ROPE_ASSIGN_OR_RETURN(
      Spelled partial,
      AliasedNumber(cfg, {"partial_rotary_factor", "rotary_pct", "rope_pct", "rotary_emb_fraction"}));
  if (!partial.has_value()) {
    ROPE_ASSIGN_OR_RETURN(partial, AliasedNumber(sel.params, {"partial_rotary_factor"}));
  }
  if (partial.has_value() && (partial->first <= 0 || partial->first > 1)) {
    return absl::InvalidArgumentError(absl::StrCat("hf_config_json: ", partial->second, " is ",
                                                   partial->first, ": must be in (0, 1]"));
  }
  out.partial_rotary_factor = partial.has_value() ? partial->first : 1.0;
  // GPT-J, CodeGen and MiniMax give the rotated width itself.
  ROPE_ASSIGN_OR_RETURN(std::optional<uint32_t> rotary_dim, cfg.Count("rotary_dim"));
  if (rotary_dim.has_value()) {
    if (partial.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hf_config_json: ", cfg.Path("rotary_dim"), " is ", *rotary_dim, " and ",
          partial->second, " is ", partial->first,
          ": two settings of the rotated width; give one"));
    }
    out.rotary_dim = *rotary_dim;
  }

  if (sel.gemma_sliding) {
    out.rope_type = "default";
    ROPE_ASSIGN_OR_RETURN(out.softmax_scale,
                          SoftmaxScale(cfg, sel.params, model_type, out.rope_type));
    return out;
  }
  ROPE_ASSIGN_OR_RETURN(std::optional<std::string> rope_type, sel.params.String("rope_type"));
  if (!rope_type.has_value()) {
    ROPE_ASSIGN_OR_RETURN(rope_type, sel.params.String("type"));
  }
  out.rope_type = rope_type.value_or("default");
  // transformers' Phi3Config reads the names of the first Phi-3 configs as
  // longrope: "su" (Phi-3-mini-128k-instruct as first published) and "yarn".
  if (model_type == "phi3" && (out.rope_type == "su" || out.rope_type == "yarn")) {
    out.rope_type = "longrope";
  }
  // Qwen2-VL's legacy "type": "mrope" is plain frequencies with sections;
  // "ernie_3d" (an early transformers port of Ernie 4.5-VL) plain frequencies
  // with Ernie's 3-D positions.
  const bool mrope_type = out.rope_type == "mrope";
  const bool ernie_type = out.rope_type == "ernie_3d";
  if (mrope_type || ernie_type) out.rope_type = "default";
  ROPE_ASSIGN_OR_RETURN(out.scaling, Scaling(out.rope_type, cfg, sel, defaults));
  ROPE_ASSIGN_OR_RETURN(out.softmax_scale,
                        SoftmaxScale(cfg, sel.params, model_type, out.rope_type));

  ROPE_ASSIGN_OR_RETURN(std::optional<uint32_t> freq_allocation,
                        ErnieFreqAllocation(cfg, sel.params, model_type,
                                            ernie_type ? "ernie_3d" : out.rope_type));
  ROPE_ASSIGN_OR_RETURN(std::optional<std::vector<uint32_t>> section,
                        sel.params.CountList("mrope_section"));
  if (section.has_value()) {
    if (section->size() != kMropeAxes) {
      return Invalid(sel.params.Path("mrope_section"), *sel.params.Find("mrope_section"),
                     "must have 3 values (the t, h, w sections)");
    }
    if (IsErnieVl(model_type)) {
      // Ernie's mrope_section is [h, w, t]; the engine's order is (t, h, w).
      const std::vector<uint32_t> hwt = *std::move(section);
      out.mrope.section = {hwt[2], hwt[0], hwt[1]};
      out.mrope.ernie_3d = true;
    } else {
      out.mrope.section = *std::move(section);
      ROPE_ASSIGN_OR_RETURN(std::optional<bool> interleaved, sel.params.Bool("mrope_interleaved"));
      out.mrope.interleaved = interleaved.value_or(false);
    }
  } else if (freq_allocation.has_value()) {
    // Sections need rotary_dim, which may be the request's:
    // ApplyHfRopeConfig completes them (t = freq_allocation, h = w = the
    // rest halved).
    out.mrope.section = {*freq_allocation, 0, 0};
    out.mrope.ernie_3d = true;
  } else if (mrope_type) {
    return Missing(sel.params.Path("mrope_section"), "rope type mrope needs it");
  }
  if (out.mrope.ernie_3d && !std::holds_alternative<NoScaling>(out.scaling)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hf_config_json: ", sel.params.Path("rope_type"), " is ", out.rope_type,
        ": Ernie 4.5-VL's 3-D RoPE takes plain frequencies (transformers requires rope_type "
        "default)"));
  }
  return out;
}

// The rest of the config that is not one layer type's dict: the head of
// DeepSeek's MLA, the model's layout, the temperature tuning.
absl::Status AddModelKeys(const Scope& cfg, const std::string& model_type,
                          const ModelTypeDefaults* defaults, HfRopeConfig* out) {
  // MLA (DeepSeek-V2/V3, Kimi K2): q and k heads are qk_nope_head_dim
  // features then qk_rope_head_dim rotating ones. DeepSeek-V4: head_dim
  // features of which the last qk_rope_head_dim (head_dim *
  // partial_rotary_factor) rotate.
  ROPE_ASSIGN_OR_RETURN(std::optional<uint32_t> rope_part, cfg.Count("qk_rope_head_dim"));
  ROPE_ASSIGN_OR_RETURN(std::optional<uint32_t> nope_part, cfg.Count("qk_nope_head_dim"));
  if (model_type == "deepseek_v4") {
    ROPE_ASSIGN_OR_RETURN(std::optional<uint32_t> whole, cfg.Count("head_dim"));
    const uint32_t head = whole.value_or(512);  // DeepseekV4Config's default
    uint32_t rope = rope_part.value_or(0);
    if (!rope_part.has_value()) {
      // partial_rotary_factor of the whole head (default 64 / 512).
      const double factor = out->partial_rotary_factor != 1 ? out->partial_rotary_factor : 0.125;
      rope = static_cast<uint32_t>(static_cast<double>(head) * factor);
    }
    if (rope == 0 || rope > head) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hf_config_json: DeepSeek-V4's rotated part (qk_rope_head_dim) is ", rope,
          ": must be in 1 .. head_dim ", head));
    }
    out->head_dim = rope;
    out->partial_rotary_factor = 1;
    out->whole_head_dim = head;
  } else if (rope_part.has_value() && nope_part.has_value()) {
    out->whole_head_dim = *rope_part + *nope_part;
  }

  ROPE_ASSIGN_OR_RETURN(std::optional<bool> rope_interleave, cfg.Bool("rope_interleave"));
  ROPE_ASSIGN_OR_RETURN(std::optional<bool> emb_interleaved, cfg.Bool("rotary_emb_interleaved"));
  bool interleaved = std::find(std::begin(kInterleavedModelTypes), std::end(kInterleavedModelTypes),
                               model_type) != std::end(kInterleavedModelTypes);
  if (emb_interleaved.has_value()) interleaved = *emb_interleaved;
  if (rope_interleave.has_value()) interleaved = *rope_interleave;
  out->layout = interleaved ? Layout::kInterleaved : Layout::kHalf;

  ROPE_ASSIGN_OR_RETURN(std::optional<uint32_t> max_positions, MaxPositions(cfg, defaults));
  out->max_position_embeddings = max_positions.value_or(0);

  // Llama 4's temperature tuning of NoPE layers (Llama4TextConfig defaults:
  // on, floor_scale 8192, attn_scale 0.1). Read whether or not this layer
  // uses it, so that a malformed key is refused either way.
  const Json* tuning = cfg.Find("attn_temperature_tuning");
  if (tuning != nullptr && !tuning->is_boolean() && !tuning->is_number()) {
    return Invalid(cfg.Path("attn_temperature_tuning"), *tuning, "must be true / false (or a number)");
  }
  const bool tuned = tuning != nullptr ? Truthy(tuning) : IsLlama4(model_type);
  ROPE_ASSIGN_OR_RETURN(std::optional<double> floor_scale, cfg.PositiveNumber("floor_scale"));
  ROPE_ASSIGN_OR_RETURN(std::optional<double> attn_scale, cfg.Number("attn_scale"));
  if (tuned && out->no_rope) {
    if (!floor_scale.has_value()) {
      if (!IsLlama4(model_type)) {
        return Missing(cfg.Path("floor_scale"), "attn_temperature_tuning needs it");
      }
      floor_scale = 8192;
    }
    if (!attn_scale.has_value()) {
      if (!IsLlama4(model_type)) {
        return Missing(cfg.Path("attn_scale"), "attn_temperature_tuning needs it");
      }
      attn_scale = 0.1;
    }
    out->floor_scale = *floor_scale;
    out->attn_scale = *attn_scale;
  }
  return absl::OkStatus();
}

// Whatever can be checked of an entry without the request (its head_dim
// from the JSON): the scaling and M-RoPE against its rotary width.
absl::Status CheckEntry(const HfRopeConfig& entry, const std::string& where) {
  if (entry.head_dim == 0) return absl::OkStatus();
  RopeConfig request;
  request.max_len = 1;
  absl::StatusOr<RopeConfig> explicit_config = ApplyHfRopeConfig(request, entry);
  absl::Status status = explicit_config.status();
  if (status.ok()) status = ValidateScaling(explicit_config->scaling, explicit_config->EffectiveRotaryDim());
  if (status.ok()) status = ValidateMrope(explicit_config->mrope, explicit_config->EffectiveRotaryDim());
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("hf_config_json: ", where,
                                                  " gives an unusable config: ", status.message()));
}

}  // namespace

absl::StatusOr<HfRopeConfig> ParseHfRopeConfig(absl::string_view json,
                                               const HfLayerSelector& selector,
                                               const Interrupt* interrupt) {
  ROPE_ASSIGN_OR_RETURN(const Json root, ParseConfigJson(json, interrupt));
  const Scope top(root, "");
  // Vision-language models keep the language model's keys in text_config.
  ROPE_ASSIGN_OR_RETURN(std::optional<Scope> text_config, top.Object("text_config"));
  const Scope cfg = text_config.has_value() ? *text_config : top;
  ROPE_ASSIGN_OR_RETURN(std::optional<std::string> model_type_value, cfg.String("model_type"));
  if (!model_type_value.has_value()) {
    ROPE_ASSIGN_OR_RETURN(model_type_value, top.String("model_type"));
  }
  std::string model_type = model_type_value.value_or("");
  // Gemma3Config builds a Gemma3TextConfig for its text part.
  if (model_type == "gemma3") model_type = "gemma3_text";
  const ModelTypeDefaults* defaults = DefaultsFor(model_type);
  ROPE_RETURN_IF_ERROR(CheckRefusedKeys(cfg));

  ROPE_ASSIGN_OR_RETURN(const LayerPlan plan, PlanLayers(cfg, model_type));
  ROPE_ASSIGN_OR_RETURN(const ChosenLayer layer, ChooseLayer(plan, selector));
  if (selector.layer_index.has_value() && !selector.layer_type.empty() &&
      selector.layer_type != layer.layer_type) {
    // DeepSeek-V4: a rope group name agrees with its layer types.
    absl::StatusOr<std::string> named = GroupOf(selector.layer_type);
    absl::StatusOr<std::string> indexed = GroupOf(layer.layer_type);
    if (model_type != "deepseek_v4" || !named.ok() || !indexed.ok() || *named != *indexed) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hf_layer_type is '", TruncatedUtf8(selector.layer_type, kMaxShown), "' but hf_layer_index ",
          *selector.layer_index, " is a '", layer.layer_type, "' layer (", plan.layer_types_key,
          "): leave one of them unset"));
    }
  }

  ROPE_ASSIGN_OR_RETURN(const Scope dict, RopeDict(cfg));
  const bool grouped = model_type == "deepseek_v4" || IsGrouped(dict.object());
  HfRopeConfig out;
  if (grouped) {
    ROPE_ASSIGN_OR_RETURN(const std::string group, GroupOf(layer.layer_type));
    for (const char* name : {kMainGroup, kCompressGroup}) {
      ROPE_ASSIGN_OR_RETURN(const Selection sel, SelectGroup(cfg, dict, name));
      ROPE_ASSIGN_OR_RETURN(HfRopeConfig entry, Derive(cfg, sel, name, model_type, defaults));
      entry.no_rope = group == name && layer.no_rope;
      ROPE_RETURN_IF_ERROR(AddModelKeys(cfg, model_type, defaults, &entry));
      ROPE_RETURN_IF_ERROR(CheckEntry(entry, absl::StrCat("rope group ", name)));
      if (group == name) out = std::move(entry);
    }
  } else {
    ROPE_ASSIGN_OR_RETURN(const Selection sel,
                          SelectParams(cfg, model_type, layer.layer_type, plan.TypeNames()));
    if (sel.per_layer) {
      // transformers' validate_rope checks every layer type's dict: one
      // unusable entry refuses the whole config, whichever is asked for.
      for (auto it = dict.object().begin(); it != dict.object().end(); ++it) {
        if (it.key() == layer.layer_type) continue;
        ROPE_ASSIGN_OR_RETURN(const Selection other,
                              SelectParams(cfg, model_type, it.key(), plan.TypeNames()));
        ROPE_ASSIGN_OR_RETURN(HfRopeConfig entry, Derive(cfg, other, it.key(), model_type, defaults));
        ROPE_RETURN_IF_ERROR(AddModelKeys(cfg, model_type, defaults, &entry));
        ROPE_RETURN_IF_ERROR(CheckEntry(entry, other.params.Name()));
      }
    }
    ROPE_ASSIGN_OR_RETURN(out, Derive(cfg, sel, layer.layer_type, model_type, defaults));
    out.no_rope = layer.no_rope;
    ROPE_RETURN_IF_ERROR(AddModelKeys(cfg, model_type, defaults, &out));
  }
  out.layer_type = layer.layer_type;
  return out;
}

absl::StatusOr<RopeConfig> ApplyHfRopeConfig(const RopeConfig& request, const HfRopeConfig& hf) {
  constexpr char kWhy[] = " when config.hf_config_json is set (the JSON gives it)";
  if (request.theta != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.theta is ", request.theta, ": must be unset (0)", kWhy));
  }
  if (request.rotary_dim != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.rotary_dim is ", request.rotary_dim, ": must be unset (0)", kWhy));
  }
  if (request.rotary_offset != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.rotary_offset is ", request.rotary_offset, ": must be unset (0)", kWhy,
        "; a DeepSeek head's last features rotate when its tensors are the whole head"));
  }
  if (!std::holds_alternative<NoScaling>(request.scaling)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.", ScalingFieldName(request.scaling), " is set: the scaling must be unset", kWhy));
  }
  if (request.mrope.enabled()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.mrope is ", DescribeMrope(request.mrope), ": must be unset", kWhy));
  }
  if (request.no_rope.enabled) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.no_rope is set: must be unset", kWhy,
        " for the layer hf_layer_index names"));
  }
  RopeConfig out;
  out.max_len = request.max_len;
  out.layout = request.layout;
  out.angle_precision = request.angle_precision;
  out.theta = hf.theta;
  out.model_softmax_scale = hf.softmax_scale;
  out.scaling = hf.scaling;
  out.mrope = hf.mrope;
  out.no_rope.enabled = hf.no_rope;
  out.no_rope.floor_scale = hf.floor_scale;
  out.no_rope.attn_scale = hf.attn_scale;
  bool whole_head = false;
  if (hf.head_dim != 0) {
    if (hf.whole_head_dim != 0 && request.head_dim == hf.whole_head_dim) {
      whole_head = true;
    } else if (request.head_dim != 0 && request.head_dim != hf.head_dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.head_dim is ", request.head_dim, " but hf_config_json gives head_dim ",
          hf.head_dim,
          hf.whole_head_dim != 0
              ? absl::StrCat(" (the rotated part of the head) or ", hf.whole_head_dim,
                             " (the whole head, whose last ", hf.head_dim, " features rotate)")
              : std::string(),
          ": leave config.head_dim 0 or make them equal"));
    }
    out.head_dim = hf.head_dim;
  } else if (request.head_dim != 0) {
    out.head_dim = request.head_dim;
  } else {
    return absl::InvalidArgumentError(
        "config.head_dim is 0 and hf_config_json gives none (head_dim, qk_rope_head_dim, or "
        "hidden_size and num_attention_heads): set one of them");
  }
  if (auto* proportional = std::get_if<ProportionalScaling>(&out.scaling)) {
    // transformers' _compute_proportional_rope_parameters: the whole head
    // pairs, int(partial_rotary_factor * head_dim // 2) frequencies rotate.
    const double pairs =
        std::floor(hf.partial_rotary_factor * static_cast<double>(out.head_dim) / 2);
    if (pairs < 1 || out.head_dim % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hf_config_json: rope_type proportional with partial_rotary_factor ",
          hf.partial_rotary_factor, " and head_dim ", out.head_dim, " rotates ", pairs,
          " pairs: needs at least one, and an even head_dim"));
    }
    proportional->rotated_pairs = static_cast<uint32_t>(pairs);
    out.rotary_dim = out.head_dim;
  } else if (hf.rotary_dim != 0) {
    if (hf.rotary_dim > out.head_dim || hf.rotary_dim % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hf_config_json: rotary_dim ", hf.rotary_dim, " must be even and <= head_dim ",
          out.head_dim));
    }
    out.rotary_dim = hf.rotary_dim;
  } else {
    // Python's int(head_dim * partial_rotary_factor): the same double
    // product, truncated.
    const double product = static_cast<double>(out.head_dim) * hf.partial_rotary_factor;
    const uint32_t rotary = static_cast<uint32_t>(product);
    if (rotary == 0 || rotary % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hf_config_json: partial_rotary_factor ", hf.partial_rotary_factor,
          " gives rotary_dim int(", out.head_dim, " * ", hf.partial_rotary_factor, ") = ", rotary,
          ": must be even and > 0"));
    }
    out.rotary_dim = rotary;
  }
  if (out.mrope.ernie_3d && out.mrope.section[1] == 0 && out.mrope.section[2] == 0) {
    // freq_allocation: t takes the last ones, h and w share the rest
    // (vLLM: (head_dim / 2 - freq_allocation) // 2 each).
    const uint32_t half = out.rotary_dim / 2;
    const uint32_t t = out.mrope.section[0];
    if (t > half || (half - t) % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hf_config_json: freq_allocation is ", t, ": with rotary_dim/2 = ", half,
          " frequencies it must leave an even number (h and w alternate) of at most ", half));
    }
    out.mrope.section = {t, (half - t) / 2, (half - t) / 2};
  }
  if (whole_head) {
    out.head_dim = hf.whole_head_dim;
    out.rotary_offset = hf.whole_head_dim - out.rotary_dim;
  } else if (hf.whole_head_dim != 0 && hf.whole_head_dim > out.head_dim) {
    out.whole_head_dim = hf.whole_head_dim;
  }
  return out;
}

}  // namespace rope
