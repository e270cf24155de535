#include "client/hf_config_defaults.h"

#include <sys/stat.h>

#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace rope {
namespace client {
namespace {

// A config.json is a few KiB; this bounds what a mistyped path can pull in.
constexpr int64_t kMaxHfConfigBytes = 64 << 20;

// model_types whose transformers modeling code pairs neighbours (x[2i],
// x[2i+1]): rotate_every_two (gptj, codegen), an interleaved rotate_half
// with repeat_interleave'd cos/sin (glm, glm4, cohere, cohere2, helium,
// ernie4_5, ernie4_5_moe), complex multiplication of view_as_complex pairs
// (deepseek_v2, llama4, llama4_text), apply_rotary_pos_emb_interleave
// (deepseek_v3, whose rope_interleave defaults to true). Every other
// model_type rotates halves (rotate_half). The Python package's copy is
// ropeserve/config.py's _INTERLEAVED_MODEL_TYPES; tests/python compares them.
// BEGIN interleaved model types
constexpr const char* kInterleavedModelTypes[] = {
    "codegen", "cohere",      "cohere2",      "deepseek_v2", "deepseek_v3", "ernie4_5",
    "ernie4_5_moe", "glm",    "glm4",         "gptj",        "helium",      "llama4",
    "llama4_text",
};
// END interleaved model types

// max_position_embeddings of transformers' config classes whose published
// config.json leaves it out (Gemma3TextConfig: 131072), as the server's
// class defaults (core/engine/hf_config.cc). Python: config.py's
// _CLASS_MAX_POSITION_EMBEDDINGS.
struct ClassDefault {
  const char* model_type;
  uint32_t max_position_embeddings;
};
constexpr ClassDefault kClassMaxPositionEmbeddings[] = {{"gemma3", 131072}, {"gemma3_text", 131072}};

const nlohmann::json* Member(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// The key at the top level, else in text_config (vision-language models).
const nlohmann::json* TopOrText(const nlohmann::json& config, const char* key) {
  if (const nlohmann::json* v = Member(config, key)) return v;
  if (const nlohmann::json* text = Member(config, "text_config")) return Member(*text, key);
  return nullptr;
}

}  // namespace

absl::StatusOr<std::string> ReadHfConfigFile(const std::string& path, absl::string_view what) {
  std::string file = path;
  struct stat info = {};
  if (stat(file.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
    file = absl::StrCat(path, path.empty() || path.back() == '/' ? "" : "/", "config.json");
    if (stat(file.c_str(), &info) != 0) {
      return absl::NotFoundError(absl::StrCat(what, "=", path,
                                              " is a directory without a config.json: give the "
                                              "model's config.json or its directory"));
    }
  } else if (stat(file.c_str(), &info) != 0) {
    return absl::NotFoundError(
        absl::StrCat(what, "=", path, ": no such file or directory"));
  }
  if (!S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "=", file, " is not a regular file: give a config.json"));
  }
  if (info.st_size > kMaxHfConfigBytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, "=", file, " is ", info.st_size,
                                                   " bytes: a config.json is far smaller"));
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(what, "=", file, ": cannot open the file"));
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(what, "=", file, ": reading failed"));
  return text.str();
}

v1::Layout TransformersLayout(absl::string_view model_type) {
  for (const char* interleaved : kInterleavedModelTypes) {
    if (model_type == interleaved) return v1::INTERLEAVED;
  }
  return v1::HALF;
}

absl::StatusOr<HfConfigDefaults> HfConfigDefaultsOf(absl::string_view json) {
  // Duplicate keys and comments are the server's to refuse; here only three
  // keys are read, so a lenient parse (no exceptions) is enough.
  const nlohmann::json config =
      nlohmann::json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) {
    return absl::InvalidArgumentError("the config.json is not a JSON object");
  }
  HfConfigDefaults defaults;
  if (const nlohmann::json* type = TopOrText(config, "model_type"); type && type->is_string()) {
    defaults.model_type = type->get<std::string>();
  }
  const nlohmann::json* interleave = TopOrText(config, "rope_interleave");
  if (interleave != nullptr && interleave->is_boolean()) {
    defaults.layout = interleave->get<bool>() ? v1::INTERLEAVED : v1::HALF;
    defaults.layout_reason =
        absl::StrCat("rope_interleave ", interleave->get<bool>() ? "true" : "false");
  } else {
    defaults.layout = TransformersLayout(defaults.model_type);
    defaults.layout_reason = absl::StrCat(
        defaults.model_type.empty() ? "no model_type" : absl::StrCat("model_type ",
                                                                      defaults.model_type),
        defaults.layout == v1::INTERLEAVED ? ": transformers pairs neighbours"
                                           : ": transformers rotates halves");
  }
  if (const nlohmann::json* max = TopOrText(config, "max_position_embeddings");
      max != nullptr && max->is_number_integer()) {
    const int64_t value = max->get<int64_t>();
    if (value > 0 && value <= std::numeric_limits<uint32_t>::max()) {
      defaults.max_position_embeddings = static_cast<uint32_t>(value);
      defaults.max_len_reason = "the config's max_position_embeddings";
    }
  } else if (max == nullptr) {
    for (const ClassDefault& known : kClassMaxPositionEmbeddings) {
      if (defaults.model_type != known.model_type) continue;
      defaults.max_position_embeddings = known.max_position_embeddings;
      defaults.max_len_reason =
          absl::StrCat("max_position_embeddings of transformers' ", known.model_type,
                       " config class: the config.json has none");
    }
  }
  return defaults;
}

absl::StatusOr<v1::RopeConfig> RopeConfigFromHfConfig(absl::string_view json,
                                                      const HfConfigOverrides& overrides) {
  absl::StatusOr<HfConfigDefaults> defaults = HfConfigDefaultsOf(json);
  if (!defaults.ok()) return defaults.status();
  v1::RopeConfig config;
  config.set_hf_config_json(std::string(json));
  config.set_hf_layer_type(overrides.hf_layer_type);
  config.set_head_dim(overrides.head_dim);
  config.set_layout(overrides.layout.value_or(defaults->layout));
  if (overrides.max_len.has_value()) {
    config.set_max_len(*overrides.max_len);
  } else if (defaults->max_position_embeddings.has_value()) {
    config.set_max_len(*defaults->max_position_embeddings);
  } else {
    return absl::InvalidArgumentError(
        "the config.json has no max_position_embeddings (the default table length): give "
        "max_len");
  }
  return config;
}

}  // namespace client
}  // namespace rope
