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

namespace rope {
namespace {

using Json = nlohmann::json;

// Real config.json files nest 3 or 4 levels; the limit keeps a hostile
// document from building a deep tree (nlohmann's parser itself is
// iterative, its tree is not). The top-level object is level 1.
constexpr int kMaxDepth = 64;
constexpr size_t kMaxShown = 64;  // bytes of a value quoted in a message

constexpr double kPythonDefaultTheta = 10000.0;

// Keys a config may nest its per-layer rope parameters under when it has no
// layer_types list of its own.
const char* const kKnownLayerTypes[] = {kFullAttention, kSlidingAttention, "chunked_attention"};

// Defaults of the transformers config classes for keys their published
// configs omit. Only classes checked against transformers' source are here;
// for any other model_type a missing key is refused, never guessed.
struct ModelTypeDefaults {
  const char* model_type;
  double rope_theta;            // full-attention layers
  double rope_local_base_freq;  // sliding-attention layers
  uint32_t head_dim;
  uint32_t max_position_embeddings;
};
// Gemma3TextConfig: head_dim=256, max_position_embeddings=131072,
// default_theta = {"global": 1e6, "local": 1e4}. gemma-3-*-it's config.json
// relies on all four.
constexpr ModelTypeDefaults kModelTypeDefaults[] = {
    {"gemma3_text", 1'000'000.0, 10'000.0, 256, 131072},
};

const ModelTypeDefaults* DefaultsFor(const std::string& model_type) {
  for (const ModelTypeDefaults& d : kModelTypeDefaults) {
    if (model_type == d.model_type) return &d;
  }
  return nullptr;
}

// `text` cut to at most `max` bytes on a UTF-8 character boundary.
std::string Truncated(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  size_t end = max;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return absl::StrCat(text.substr(0, end), "... (", text.size(), " bytes)");
}

std::string Show(const Json& value) { return Truncated(value.dump(), kMaxShown); }

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

// nlohmann's DOM builder behind a SAX handler that counts nesting and polls
// the caller's interrupt. Not nlohmann's callback parser: after every closing
// brace it walks the parent container looking for values the callback
// discarded, so `[{},{},...]` took time quadratic in its length (4 MiB of
// `{}`: minutes of a work thread). This is one pass, linear in the text.
class BoundedDomBuilder {
 public:
  using number_integer_t = Json::number_integer_t;
  using number_unsigned_t = Json::number_unsigned_t;
  using number_float_t = Json::number_float_t;
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  BoundedDomBuilder(Json& root, const Interrupt* interrupt)
      : dom_(root, /*allow_exceptions_=*/false), interrupt_(interrupt) {}

  bool null() { return Tick() && dom_.null(); }
  bool boolean(bool value) { return Tick() && dom_.boolean(value); }
  bool number_integer(number_integer_t value) { return Tick() && dom_.number_integer(value); }
  bool number_unsigned(number_unsigned_t value) { return Tick() && dom_.number_unsigned(value); }
  bool number_float(number_float_t value, const string_t& text) {
    return Tick() && dom_.number_float(value, text);
  }
  bool string(string_t& value) { return Tick() && dom_.string(value); }
  bool binary(binary_t& value) { return Tick() && dom_.binary(value); }
  bool key(string_t& value) { return Tick() && dom_.key(value); }
  bool start_object(std::size_t size) { return Enter() && dom_.start_object(size); }
  bool end_object() {
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t size) { return Enter() && dom_.start_array(size); }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(std::size_t /*position*/, const std::string& /*token*/,
                   const nlohmann::detail::exception& error) {
    status_ = absl::InvalidArgumentError(
        absl::StrCat("hf_config_json is not valid JSON: ", Truncated(error.what(), 240)));
    return false;
  }

  // Why parsing stopped early; OK when it did not.
  const absl::Status& status() const { return status_; }

 private:
  // The top-level object is level 1; kMaxDepth levels are accepted.
  bool Enter() {
    if (++depth_ > kMaxDepth) {
      status_ = absl::InvalidArgumentError(absl::StrCat(
          "hf_config_json nests objects and arrays deeper than ", kMaxDepth, " levels"));
      return false;
    }
    return Tick();
  }

  // Polls the interrupt every kEventsPerCheck values (a few microseconds of
  // parsing), so a cancelled or late call stops within that.
  bool Tick() {
    static constexpr int64_t kEventsPerCheck = 4096;
    if (interrupt_ == nullptr || ++events_ % kEventsPerCheck != 0) return true;
    status_ = interrupt_->Check("parsing hf_config_json");
    return status_.ok();
  }

  nlohmann::detail::json_sax_dom_parser<Json> dom_;
  const Interrupt* const interrupt_;
  int depth_ = 0;
  int64_t events_ = 0;
  absl::Status status_;
};

absl::StatusOr<Json> ParseJson(absl::string_view text, const Interrupt* interrupt) {
  Json root;
  BoundedDomBuilder builder(root, interrupt);
  bool parsed = false;
  // The SAX parser reports malformed input through parse_error; anything it
  // still throws is caught here and never leaves.
  try {
    parsed = Json::sax_parse(text.begin(), text.end(), &builder);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("hf_config_json is not valid JSON: ", Truncated(e.what(), 240)));
  }
  if (!builder.status().ok()) return builder.status();
  if (!parsed) return absl::InvalidArgumentError("hf_config_json is not valid JSON");
  if (!root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hf_config_json is ", Show(root), ": must be a JSON object (a model's config.json)"));
  }
  return root;
}

// Where the rope parameters of the requested layer type come from.
struct Selection {
  Scope params;             // the dict transformers computes from
  bool per_layer = false;   // rope_parameters keyed by layer type
  bool gemma_sliding = false;  // Gemma 3 sliding layer: rope_local_base_freq, no scaling
};

absl::StatusOr<std::vector<std::string>> LayerTypes(const Scope& cfg) {
  std::vector<std::string> out;
  const Json* v = cfg.Find("layer_types");
  if (v == nullptr) return out;
  if (!v->is_array()) {
    return Invalid(cfg.Path("layer_types"), *v, "must be a list of layer type names");
  }
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) {
      return Invalid(absl::StrCat(cfg.Path("layer_types"), "[", i, "]"), (*v)[i],
                     "must be a layer type name (a string)");
    }
    out.push_back((*v)[i].get<std::string>());
  }
  return out;
}

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

std::string Keys(const Json& object) {
  std::vector<std::string> keys;
  for (auto it = object.begin(); it != object.end(); ++it) keys.push_back(it.key());
  return absl::StrJoin(keys, ", ");
}

absl::StatusOr<Selection> SelectParams(const Scope& cfg, const std::string& model_type,
                                       const std::string& layer_type) {
  // transformers: `rope_scaling or rope_parameters`, the older key first.
  ROPE_ASSIGN_OR_RETURN(std::optional<Scope> rope_scaling, cfg.Object("rope_scaling"));
  ROPE_ASSIGN_OR_RETURN(std::optional<Scope> rope_parameters, cfg.Object("rope_parameters"));
  Selection sel;
  if (rope_scaling.has_value() && !rope_scaling->object().empty()) {
    sel.params = *rope_scaling;
  } else if (rope_parameters.has_value()) {
    sel.params = *rope_parameters;
  } else {
    sel.params = Scope(sel.params.object(), cfg.Path("rope_parameters."));
  }
  ROPE_ASSIGN_OR_RETURN(const std::vector<std::string> layer_types, LayerTypes(cfg));

  if (IsPerLayer(sel.params.object(), layer_types)) {
    ROPE_ASSIGN_OR_RETURN(std::optional<Scope> entry, sel.params.Object(layer_type));
    if (!entry.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hf_layer_type is '", Truncated(layer_type, kMaxShown), "': hf_config_json's ",
          sel.params.Name(), " has no entry for it (it has ", Keys(sel.params.object()), ")"));
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
        absl::StrCat("hf_layer_type is '", Truncated(layer_type, kMaxShown),
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
  if (sel.gemma_sliding) {
    ROPE_ASSIGN_OR_RETURN(theta, cfg.Number("rope_local_base_freq"));
    path = cfg.Path("rope_local_base_freq");
    if (!theta.has_value()) {
      if (defaults == nullptr) {
        return Missing(path, "the sliding-attention layers' base (Gemma 3)");
      }
      theta = defaults->rope_local_base_freq;
    }
  } else {
    ROPE_ASSIGN_OR_RETURN(theta, sel.params.Number("rope_theta"));
    path = sel.params.Path("rope_theta");
    if (!theta.has_value()) {
      ROPE_ASSIGN_OR_RETURN(theta, cfg.Number("rope_theta"));
      path = cfg.Path("rope_theta");
    }
    if (!theta.has_value()) {
      if (defaults == nullptr) {
        return Missing(cfg.Path("rope_theta"),
                       absl::StrCat("transformers would take the model class's default (",
                                    kPythonDefaultTheta,
                                    " for most), which this server knows only for model_type "
                                    "gemma3_text: add rope_theta"));
      }
      // Gemma3TextConfig's per-layer dicts default to its local base for
      // sliding layers.
      theta = sel.per_layer && layer_type == kSlidingAttention ? defaults->rope_local_base_freq
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
  ROPE_ASSIGN_OR_RETURN(std::optional<uint32_t> hidden, cfg.Count("hidden_size"));
  ROPE_ASSIGN_OR_RETURN(std::optional<uint32_t> heads, cfg.Count("num_attention_heads"));
  if (hidden.has_value() && heads.has_value()) {
    if (*hidden < *heads) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hf_config_json: ", cfg.Path("hidden_size"), " is ", *hidden, ": smaller than ",
          cfg.Path("num_attention_heads"), " ", *heads, " (head_dim would be 0)"));
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

absl::StatusOr<ScalingConfig> Scaling(const std::string& rope_type, const Scope& cfg,
                                      const Selection& sel, const ModelTypeDefaults* defaults) {
  const Scope& p = sel.params;
  ROPE_ASSIGN_OR_RETURN(std::optional<uint32_t> max_positions, cfg.Count("max_position_embeddings"));
  if (!max_positions.has_value() && defaults != nullptr) {
    max_positions = defaults->max_position_embeddings;
  }
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
    DynamicNtkScaling s;
    ROPE_ASSIGN_OR_RETURN(s.factor, required("factor"));
    // transformers' dynamic NTK grows the base past max_position_embeddings.
    ROPE_ASSIGN_OR_RETURN(s.original_max_position_embeddings,
                          require_max_positions("rope_type dynamic scales past it"));
    return ScalingConfig(s);
  }
  if (rope_type == "yarn") {
    YarnScaling s;
    ROPE_ASSIGN_OR_RETURN(s.original_max_position_embeddings, original());
    ROPE_ASSIGN_OR_RETURN(std::optional<double> factor, p.PositiveNumber("factor"));
    if (!factor.has_value()) {
      ROPE_ASSIGN_OR_RETURN(const uint32_t expanded,
                            require_max_positions("yarn without factor takes "
                                                  "max_position_embeddings / original"));
      factor = static_cast<double>(expanded) / s.original_max_position_embeddings;
    }
    s.factor = *factor;
    ROPE_ASSIGN_OR_RETURN(std::optional<double> attention, p.PositiveNumber("attention_factor"));
    s.attention_factor = attention.value_or(0);
    // transformers: `mscale and mscale_all_dim` (0 and absent alike unset).
    ROPE_ASSIGN_OR_RETURN(std::optional<double> mscale, p.Number("mscale"));
    ROPE_ASSIGN_OR_RETURN(std::optional<double> mscale_all_dim, p.Number("mscale_all_dim"));
    s.mscale = mscale.value_or(0);
    s.mscale_all_dim = mscale_all_dim.value_or(0);
    // transformers: `beta_fast or 32`, `beta_slow or 1`; 0 is this engine's
    // "default" too.
    ROPE_ASSIGN_OR_RETURN(std::optional<double> beta_fast, p.Number("beta_fast"));
    ROPE_ASSIGN_OR_RETURN(std::optional<double> beta_slow, p.Number("beta_slow"));
    s.beta_fast = beta_fast.value_or(0);
    s.beta_slow = beta_slow.value_or(0);
    ROPE_ASSIGN_OR_RETURN(std::optional<bool> truncate, p.Bool("truncate"));
    s.truncate = truncate.value_or(true);
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
      "hf_config_json: ", p.Path("rope_type"), " is \"", Truncated(rope_type, kMaxShown),
      "\": not supported (this server serves default, linear, dynamic, yarn, llama3, longrope, "
      "proportional, and mrope sections with any of them)"));
}

}  // namespace

absl::StatusOr<HfRopeConfig> ParseHfRopeConfig(absl::string_view json,
                                               absl::string_view layer_type_in,
                                               const Interrupt* interrupt) {
  ROPE_ASSIGN_OR_RETURN(const Json root, ParseJson(json, interrupt));
  const Scope top(root, "");
  // Vision-language models keep the language model's keys in text_config.
  ROPE_ASSIGN_OR_RETURN(std::optional<Scope> text_config, top.Object("text_config"));
  const Scope cfg = text_config.has_value() ? *text_config : top;
  ROPE_ASSIGN_OR_RETURN(std::optional<std::string> model_type, cfg.String("model_type"));
  if (!model_type.has_value()) {
    ROPE_ASSIGN_OR_RETURN(model_type, top.String("model_type"));
  }
  // Gemma3Config builds a Gemma3TextConfig for its text part.
  if (model_type == std::optional<std::string>("gemma3")) model_type = "gemma3_text";
  const ModelTypeDefaults* defaults = DefaultsFor(model_type.value_or(""));
  const std::string layer_type = layer_type_in.empty() ? kFullAttention : std::string(layer_type_in);

  ROPE_ASSIGN_OR_RETURN(const Selection sel, SelectParams(cfg, model_type.value_or(""), layer_type));
  HfRopeConfig out;
  ROPE_ASSIGN_OR_RETURN(out.theta, Theta(cfg, sel, layer_type, defaults));
  ROPE_ASSIGN_OR_RETURN(out.head_dim,
                        HeadDim(cfg, defaults, model_type.value_or(""), layer_type));

  // A top-level partial_rotary_factor overrides the dict's (transformers
  // copies it in).
  ROPE_ASSIGN_OR_RETURN(std::optional<double> partial, cfg.PositiveNumber("partial_rotary_factor"));
  std::string partial_path = cfg.Path("partial_rotary_factor");
  if (!partial.has_value()) {
    ROPE_ASSIGN_OR_RETURN(partial, sel.params.PositiveNumber("partial_rotary_factor"));
    partial_path = sel.params.Path("partial_rotary_factor");
  }
  if (partial.has_value() && *partial > 1) {
    return absl::InvalidArgumentError(absl::StrCat("hf_config_json: ", partial_path, " is ",
                                                   *partial, ": must be in (0, 1]"));
  }
  out.partial_rotary_factor = partial.value_or(1.0);

  if (sel.gemma_sliding) {
    out.rope_type = "default";
    ROPE_ASSIGN_OR_RETURN(out.softmax_scale,
                          SoftmaxScale(cfg, sel.params, model_type.value_or(""), out.rope_type));
    return out;
  }
  ROPE_ASSIGN_OR_RETURN(std::optional<std::string> rope_type, sel.params.String("rope_type"));
  if (!rope_type.has_value()) {
    ROPE_ASSIGN_OR_RETURN(rope_type, sel.params.String("type"));
  }
  out.rope_type = rope_type.value_or("default");
  // transformers' Phi3Config reads the names of the first Phi-3 configs as
  // longrope: "su" (Phi-3-mini-128k-instruct as first published) and "yarn".
  if (model_type == std::optional<std::string>("phi3") &&
      (out.rope_type == "su" || out.rope_type == "yarn")) {
    out.rope_type = "longrope";
  }
  // Qwen2-VL's legacy "type": "mrope" is plain frequencies with sections.
  const bool mrope_type = out.rope_type == "mrope";
  if (mrope_type) out.rope_type = "default";
  ROPE_ASSIGN_OR_RETURN(out.scaling, Scaling(out.rope_type, cfg, sel, defaults));
  ROPE_ASSIGN_OR_RETURN(out.softmax_scale,
                        SoftmaxScale(cfg, sel.params, model_type.value_or(""), out.rope_type));

  ROPE_ASSIGN_OR_RETURN(std::optional<std::vector<uint32_t>> section,
                        sel.params.CountList("mrope_section"));
  if (section.has_value()) {
    if (section->size() != kMropeAxes) {
      return Invalid(sel.params.Path("mrope_section"), *sel.params.Find("mrope_section"),
                     "must have 3 values (the t, h, w sections)");
    }
    out.mrope.section = *std::move(section);
    ROPE_ASSIGN_OR_RETURN(std::optional<bool> interleaved, sel.params.Bool("mrope_interleaved"));
    out.mrope.interleaved = interleaved.value_or(false);
  } else if (mrope_type) {
    return Missing(sel.params.Path("mrope_section"), "rope type mrope needs it");
  }
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
  if (!std::holds_alternative<NoScaling>(request.scaling)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.", ScalingName(request.scaling) == "dynamic" ? "dynamic_ntk"
                                                              : ScalingName(request.scaling),
        " is set: the scaling must be unset", kWhy));
  }
  if (request.mrope.enabled()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.mrope is ", DescribeMrope(request.mrope), ": must be unset", kWhy));
  }
  RopeConfig out;
  out.max_len = request.max_len;
  out.layout = request.layout;
  out.angle_precision = request.angle_precision;
  out.theta = hf.theta;
  out.model_softmax_scale = hf.softmax_scale;
  out.scaling = hf.scaling;
  out.mrope = hf.mrope;
  if (hf.head_dim != 0) {
    if (request.head_dim != 0 && request.head_dim != hf.head_dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.head_dim is ", request.head_dim, " but hf_config_json gives head_dim ",
          hf.head_dim, ": leave config.head_dim 0 or make them equal"));
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
    return out;
  }
  // Python's int(head_dim * partial_rotary_factor): the same double product,
  // truncated.
  const double product = static_cast<double>(out.head_dim) * hf.partial_rotary_factor;
  const uint32_t rotary = static_cast<uint32_t>(product);
  if (rotary == 0 || rotary % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hf_config_json: partial_rotary_factor ", hf.partial_rotary_factor,
        " gives rotary_dim int(", out.head_dim, " * ", hf.partial_rotary_factor, ") = ", rotary,
        ": must be even and > 0"));
  }
  out.rotary_dim = rotary;
  return out;
}

}  // namespace rope
