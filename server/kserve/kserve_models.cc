#include "server/kserve/kserve_models.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "core/engine/hf_config.h"
#include "core/proto_engine/request_conversion.h"
#include "nlohmann/json.hpp"

namespace rope {
namespace kserve {
namespace {

// The engine's own bound on RopeConfig.hf_config_json.
constexpr uintmax_t kMaxConfigJsonBytes = uintmax_t{4} << 20;
// ropeserve.json is a handful of keys.
constexpr uintmax_t kMaxSettingsBytes = 64 << 10;

bool IsModelName(absl::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
}

absl::StatusOr<std::string> ReadSmallFile(const std::filesystem::path& path, uintmax_t max_bytes) {
  std::error_code error;
  const uintmax_t size = std::filesystem::file_size(path, error);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat(path.string(), ": cannot read it (", error.message(), ")"));
  }
  if (size > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path.string(), " is ", size, " bytes: at most ", max_bytes));
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": read failed"));
  }
  return text.str();
}

// max_position_embeddings of a config.json, at the top level or in
// text_config (vision-language models); 0 when neither has one.
uint32_t MaxPositionEmbeddings(const nlohmann::json& config) {
  for (const nlohmann::json* scope :
       {&config, config.contains("text_config") ? &config["text_config"]
                                                : static_cast<const nlohmann::json*>(nullptr)}) {
    if (scope == nullptr || !scope->is_object()) continue;
    auto it = scope->find("max_position_embeddings");
    if (it != scope->end() && it->is_number_unsigned() &&
        it->get<uint64_t>() <= std::numeric_limits<uint32_t>::max()) {
      return static_cast<uint32_t>(it->get<uint64_t>());
    }
  }
  return 0;
}

Model Builtin(const char* name, ModelOperation operation) {
  Model model;
  model.name = name;
  model.operation = operation;
  model.builtin = true;
  model.scaling_cache = std::make_shared<RopeScalingCache>();
  return model;
}

// One folder of the repository: its ropeserve.json and config.json.
absl::StatusOr<Model> LoadModel(const std::filesystem::path& folder, Engine& engine) {
  Model model;
  model.name = folder.filename().string();
  model.source = folder.string();
  if (!IsModelName(model.name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model folder ", folder.string(), ": a model name is 1-128 characters [A-Za-z0-9._-]"));
  }
  if (model.name == kRotateModel || model.name == kAttentionModel) {
    return absl::InvalidArgumentError(absl::StrCat("model folder ", folder.string(), ": \"",
                                                   model.name,
                                                   "\" is the name of a built-in model"));
  }
  const std::filesystem::path settings_path = folder / kModelSettingsFile;
  ROPE_ASSIGN_OR_RETURN(std::string settings_text, ReadSmallFile(settings_path, kMaxSettingsBytes));
  const nlohmann::json settings = nlohmann::json::parse(settings_text, nullptr, false);
  if (settings.is_discarded() || !settings.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(settings_path.string(), ": not a JSON object"));
  }
  auto bad_key = [&](const std::string& key, const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat(settings_path.string(), ": \"", key, "\" ", why));
  };
  std::string operation;
  std::string layer_type;
  std::optional<std::string> layout;  // absent: the config.json's model_type's
  std::optional<uint32_t> layer_index;
  int64_t max_len = 0;
  for (const auto& [key, value] : settings.items()) {
    if (key == "operation" || key == "layer_type" || key == "layout" || key == "datatype") {
      if (!value.is_string()) return bad_key(key, "must be a string");
      const std::string text = value.get<std::string>();
      if (key == "operation") operation = text;
      if (key == "layer_type") layer_type = text;
      if (key == "layout") layout = text;
      if (key == "datatype") model.datatype = text;
    } else if (key == "layer_index") {
      if (!value.is_number_unsigned() ||
          value.get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
        return bad_key(key, absl::StrCat("is ", value.dump(), ": must be an integer in [0, 2^32)"));
      }
      layer_index = static_cast<uint32_t>(value.get<uint64_t>());
    } else if (key == "max_len") {
      if (!value.is_number_unsigned() || value.get<uint64_t>() == 0 ||
          value.get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
        return bad_key(key, absl::StrCat("is ", value.dump(), ": must be an integer in [1, 2^32)"));
      }
      max_len = static_cast<int64_t>(value.get<uint64_t>());
    } else {
      return bad_key(key,
                     "is not a setting (operation, layer_type, layer_index, max_len, layout, "
                     "datatype)");
    }
  }
  if (operation == "rotate") {
    model.operation = ModelOperation::kRotate;
  } else if (operation == "attention") {
    model.operation = ModelOperation::kAttention;
  } else {
    return bad_key("operation",
                   absl::StrCat("is \"", operation, "\": must be rotate or attention"));
  }
  if (model.datatype != "FP32" && model.datatype != "FP16" && model.datatype != "BF16") {
    return bad_key("datatype",
                   absl::StrCat("is \"", model.datatype, "\": must be FP32, FP16 or BF16"));
  }
  std::optional<v1::Layout> parsed_layout;
  if (layout.has_value()) {
    absl::StatusOr<v1::Layout> parsed = ParseLayout(*layout, "\"layout\"");
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(settings_path.string(), ": ", parsed.status().message()));
    }
    parsed_layout = *parsed;
  }

  const std::filesystem::path config_path = folder / kModelConfigFile;
  ROPE_ASSIGN_OR_RETURN(std::string config_json, ReadSmallFile(config_path, kMaxConfigJsonBytes));
  if (max_len == 0) {
    const nlohmann::json config = nlohmann::json::parse(config_json, nullptr, false);
    if (!config.is_discarded() && config.is_object()) max_len = MaxPositionEmbeddings(config);
    if (max_len == 0) {
      return bad_key("max_len", absl::StrCat("is missing and ", config_path.string(),
                                             " has no max_position_embeddings: set it"));
    }
  }
  // A model that does not resolve is a configuration error, whatever code a
  // request would get for it (a max_len over the cap: RESOURCE_EXHAUSTED).
  auto in_model = [&](const absl::Status& status) {
    return absl::InvalidArgumentError(
        absl::StrCat("model folder ", folder.string(), ": ", status.message()));
  };
  absl::StatusOr<HfRopeConfig> hf =
      ParseHfRopeConfig(config_json, HfLayerSelector{layer_type, layer_index});
  if (!hf.ok()) return in_model(hf.status());
  model.head_dim = hf->head_dim;

  v1::RopeConfig from_json;
  from_json.set_hf_config_json(std::move(config_json));
  from_json.set_hf_layer_type(layer_type);
  if (layer_index.has_value()) from_json.set_hf_layer_index(*layer_index);
  from_json.set_max_len(static_cast<uint32_t>(max_len));
  from_json.set_layout(parsed_layout.value_or(v1::HALF));
  absl::StatusOr<RopeConfig> engine_config = ConfigFromProto(from_json);
  if (!engine_config.ok()) return in_model(engine_config.status());
  absl::StatusOr<ResolvedConfig> resolved = engine.ResolveConfig(*engine_config);
  if (!resolved.ok()) return in_model(resolved.status());
  model.config = ConfigToProto(resolved->config);
  // The pairing transformers' code for the config's model_type uses (GPT-J,
  // GLM, DeepSeek with rope_interleave, Llama 4: neighbours; most others:
  // halves), unless ropeserve.json says otherwise.
  model.config.set_layout(
      parsed_layout.value_or(resolved->hf_layout.value_or(Layout::kHalf) == Layout::kInterleaved
                                 ? v1::INTERLEAVED
                                 : v1::HALF));
  model.layer_type = layer_type;
  model.layer_index = layer_index;
  model.head_dim = resolved->config.head_dim;
  return model;
}

}  // namespace

absl::StatusOr<v1::Layout> ParseLayout(absl::string_view text, absl::string_view what) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "interleaved") return v1::INTERLEAVED;
  if (lower == "half") return v1::HALF;
  return absl::InvalidArgumentError(
      absl::StrCat(what, " is \"", text, "\": must be \"interleaved\" or \"half\""));
}

ModelRepository::ModelRepository() {
  models_.push_back(Builtin(kAttentionModel, ModelOperation::kAttention));
  models_.push_back(Builtin(kRotateModel, ModelOperation::kRotate));
  for (size_t i = 0; i < models_.size(); ++i) models_[i].index = i;
}

absl::StatusOr<ModelRepository> ModelRepository::Load(const std::string& dir, Engine& engine) {
  ModelRepository repository;
  std::error_code error;
  std::filesystem::directory_iterator it(dir, error);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model_repository=", dir, ": cannot list it (", error.message(), ")"));
  }
  std::vector<std::filesystem::path> folders;
  for (const std::filesystem::directory_entry& entry : it) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.' || !entry.is_directory(error)) continue;
    folders.push_back(entry.path());
  }
  std::sort(folders.begin(), folders.end());
  for (const std::filesystem::path& folder : folders) {
    ROPE_ASSIGN_OR_RETURN(Model model, LoadModel(folder, engine));
    repository.models_.push_back(std::move(model));
  }
  std::sort(repository.models_.begin(), repository.models_.end(),
            [](const Model& a, const Model& b) { return a.name < b.name; });
  for (size_t i = 0; i < repository.models_.size(); ++i) repository.models_[i].index = i;
  return repository;
}

absl::StatusOr<const Model*> ModelRepository::Find(absl::string_view name,
                                                   absl::string_view version) const {
  auto it =
      std::lower_bound(models_.begin(), models_.end(), name,
                       [](const Model& model, absl::string_view key) { return model.name < key; });
  if (it == models_.end() || it->name != name) {
    return absl::NotFoundError(
        absl::StrCat("Request for unknown model: '", name, "' is not found"));
  }
  if (!version.empty() && version != kModelVersion) {
    return absl::NotFoundError(absl::StrCat("Request for unknown model: '", name, "' version ",
                                            version, " is not found (its one version is ",
                                            kModelVersion, ")"));
  }
  return &*it;
}

}  // namespace kserve
}  // namespace rope
