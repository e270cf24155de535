#include "client/hf_config_defaults.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace rope {
namespace client {
namespace {

// A config.json is a few KiB; this bounds what a mistyped path can pull in.
constexpr int64_t kMaxHfConfigBytes = 64 << 20;

// The config's model_type (top level, else text_config's), to name in a
// reason; "" when absent or the text is not a JSON object. Nothing else is
// read here: the server derives the values.
std::string ModelTypeOf(absl::string_view json) {
  const nlohmann::json config =
      nlohmann::json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) return "";
  auto it = config.find("model_type");
  if (it != config.end() && it->is_string()) return it->get<std::string>();
  auto text = config.find("text_config");
  if (text == config.end() || !text->is_object()) return "";
  it = text->find("model_type");
  return it != text->end() && it->is_string() ? it->get<std::string>() : "";
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

absl::StatusOr<HfConfigDefaults> HfConfigDefaultsFromResolved(const v1::ResolvedConfig& resolved,
                                                              const v1::RopeConfig& config) {
  if (resolved.hf_layout() == v1::LAYOUT_UNSPECIFIED) {
    return absl::FailedPreconditionError(
        "the server's ResolveConfig reply has no hf_layout (a ropeserve older than "
        "ResolvedConfig.hf_layout), so it cannot say the layout and max_len a config.json "
        "implies: give both (layout and max_len; ropectl and ropeload: --layout and --max_len)");
  }
  const std::string model_type = ModelTypeOf(config.hf_config_json());
  const std::string of =
      model_type.empty() ? std::string(" (the config.json has no model_type)")
                         : absl::StrCat(" for model_type ", model_type);
  HfConfigDefaults defaults;
  defaults.layout = resolved.hf_layout();
  defaults.layout_reason = absl::StrCat("the server's hf_layout", of);
  if (resolved.max_position_embeddings() != 0) {
    defaults.max_position_embeddings = resolved.max_position_embeddings();
    defaults.max_len_reason = absl::StrCat("the server's max_position_embeddings", of);
  }
  return defaults;
}

absl::StatusOr<HfConfigDefaults> HfConfigDefaultsFromServer(RopeClient& client,
                                                            const v1::RopeConfig& config) {
  v1::RopeConfig probe = config;
  // Placeholders: neither changes what the server derives from the file.
  if (probe.layout() == v1::LAYOUT_UNSPECIFIED) probe.set_layout(v1::HALF);
  if (probe.max_len() == 0) probe.set_max_len(1);
  absl::StatusOr<v1::ResolvedConfig> resolved = client.ResolveConfig(probe);
  if (!resolved.ok()) return resolved.status();
  return HfConfigDefaultsFromResolved(*resolved, config);
}

absl::Status CompleteHfConfig(RopeClient& client, v1::RopeConfig* config,
                              HfConfigDefaults* used) {
  if (config->hf_config_json().empty() ||
      (config->layout() != v1::LAYOUT_UNSPECIFIED && config->max_len() != 0)) {
    return absl::OkStatus();
  }
  absl::StatusOr<HfConfigDefaults> defaults = HfConfigDefaultsFromServer(client, *config);
  if (!defaults.ok()) return defaults.status();
  if (config->max_len() == 0) {
    if (!defaults->max_position_embeddings.has_value()) {
      return absl::InvalidArgumentError(
          "the config.json has no max_position_embeddings (the default table length): give "
          "max_len");
    }
    config->set_max_len(*defaults->max_position_embeddings);
  }
  if (config->layout() == v1::LAYOUT_UNSPECIFIED) config->set_layout(defaults->layout);
  if (used != nullptr) *used = *std::move(defaults);
  return absl::OkStatus();
}

absl::StatusOr<v1::RopeConfig> RopeConfigFromHfConfig(RopeClient& client, absl::string_view json,
                                                      const HfConfigOverrides& overrides) {
  v1::RopeConfig config;
  config.set_hf_config_json(std::string(json));
  config.set_hf_layer_type(overrides.hf_layer_type);
  config.set_head_dim(overrides.head_dim);
  config.set_layout(overrides.layout.value_or(v1::LAYOUT_UNSPECIFIED));
  config.set_max_len(overrides.max_len.value_or(0));
  absl::Status completed = CompleteHfConfig(client, &config);
  if (!completed.ok()) return completed;
  return config;
}

}  // namespace client
}  // namespace rope
