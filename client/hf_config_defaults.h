// A model's config.json in a client: reading it (a file or a model
// directory), and the one rule every client (ropectl, ropeload, RopeClient
// users, the Python package) follows for the two RopeConfig fields the server
// does not take from it: the layout and max_len.
//
// The rule: both come from the server. ResolveConfig of a config with
// hf_config_json returns the layout transformers' modeling code for the
// config's model_type rotates with (ResolvedConfig.hf_layout: the server's
// one model_type table, a `rope_interleave` key winning) and the config's
// max_position_embeddings; a client takes them unless its caller gives
// layout or max_len. Clients keep no model_type table of their own, so a
// model type the server learns is every client's at once.
#ifndef ROPE_CLIENT_HF_CONFIG_DEFAULTS_H_
#define ROPE_CLIENT_HF_CONFIG_DEFAULTS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/rope_client.h"
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

// What the server says a config.json implies for layout and max_len, and
// why (for a CLI to print).
struct HfConfigDefaults {
  v1::Layout layout = v1::LAYOUT_UNSPECIFIED;
  // "the server's hf_layout for model_type llama"
  std::string layout_reason;
  // ResolvedConfig.max_position_embeddings; nullopt when the server says the
  // config has none (0).
  std::optional<uint32_t> max_position_embeddings;
  std::string max_len_reason;  // "the server's max_position_embeddings for ..."
};

// The defaults in a ResolveConfig reply for `config` (which has
// hf_config_json). FAILED_PRECONDITION when the reply has no hf_layout: a
// server older than that field, which cannot say the layout; the message
// names the way out (give layout and max_len, then nothing is asked).
absl::StatusOr<HfConfigDefaults> HfConfigDefaultsFromResolved(const v1::ResolvedConfig& resolved,
                                                              const v1::RopeConfig& config);

// Asks the server: ResolveConfig of `config` with a placeholder layout
// (when LAYOUT_UNSPECIFIED) and max_len 1 (when 0), so that only what the
// server derives from the config.json is read back. The server's error
// (a malformed config.json, a head_dim mismatch) when it refuses `config`.
absl::StatusOr<HfConfigDefaults> HfConfigDefaultsFromServer(RopeClient& client,
                                                            const v1::RopeConfig& config);

// Fills `config`'s layout when it is LAYOUT_UNSPECIFIED and its max_len
// when it is 0 with the server's defaults; nothing is asked when neither
// is missing or `config` has no hf_config_json. INVALID_ARGUMENT when
// max_len is missing and the server says the config.json has no
// max_position_embeddings. `used` (when given and the server was asked)
// receives the defaults.
absl::Status CompleteHfConfig(RopeClient& client, v1::RopeConfig* config,
                              HfConfigDefaults* used = nullptr);

// What the caller chose; nullopt: the server's default for the config.json.
struct HfConfigOverrides {
  std::optional<v1::Layout> layout;
  std::optional<uint32_t> max_len;
  uint32_t head_dim = 0;      // 0: the server derives it
  std::string hf_layer_type;  // "": full_attention
};

// A RopeConfig carrying `json` (hf_config_json) with layout and max_len by
// the rule above (CompleteHfConfig).
absl::StatusOr<v1::RopeConfig> RopeConfigFromHfConfig(RopeClient& client, absl::string_view json,
                                                      const HfConfigOverrides& overrides);

}  // namespace client
}  // namespace rope

#endif  // ROPE_CLIENT_HF_CONFIG_DEFAULTS_H_
