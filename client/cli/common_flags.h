// Flags shared by several ropectl commands, and what they turn into: a
// RopeClient, a rope.v1.RopeConfig, input tensors, output .npy files.
#ifndef ROPE_CLIENT_CLI_COMMON_FLAGS_H_
#define ROPE_CLIENT_CLI_COMMON_FLAGS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/channel_security.h"
#include "client/cli/flag_set.h"
#include "client/rope_client.h"
#include "rope/v1/rope.pb.h"

namespace rope {
namespace client {

// Whether the command's calls are retried on UNAVAILABLE (ropectl's are, by
// ClientOptions' retry policy; ropeload's never are): --deadline's help says
// which.
enum class CallRetries { kOnUnavailable, kNone };

// --target, --deadline and the security flags: --tls, --tls_ca_file,
// --tls_cert_file, --tls_key_file, --tls_server_name, --token_file (every
// command of ropectl and ropeload).
void AddConnectionFlags(FlagSet* flags, CallRetries retries = CallRetries::kOnUnavailable);
// --theta, --head_dim, --rotary_dim, --max_len, --layout, --mrope_section,
// --mrope_interleaved, the scaling flags of scaling_flags.h, and
// --hf_config / --hf_layer_type (a model's config.json instead).
void AddRopeConfigFlags(FlagSet* flags);
// --dtype (commands that send tensors).
void AddDTypeFlag(FlagSet* flags);
// --seed, --distribution (commands that can make random inputs).
void AddRandomFlags(FlagSet* flags);

// The security flags' values (see AddConnectionFlags); files are read later,
// by ApplyChannelSecurity.
ChannelSecurityFiles ChannelSecurityFromFlags(const FlagSet& flags);

// ApplyChannelSecurity, with its INVALID_ARGUMENTs (flag combinations, token
// files) turned into usage errors.
absl::Status ApplySecurityFlags(const ChannelSecurityFiles& files, ClientOptions* options);

// A client for --target with the connection flags. `health_check`:
// ClientOptions::health_check (off for ropectl health).
absl::StatusOr<std::unique_ptr<RopeClient>> ClientFromFlags(const FlagSet& flags,
                                                           bool health_check = true);

// The RopeConfig of the flags. --head_dim=0 takes `inferred_head_dim` (the
// last dim of q); a usage error when both are 0 (without --hf_config, which
// lets the server derive it), when a value does not fit the proto's uint32,
// or when --hf_config comes with --theta, --rotary_dim, --mrope_* or a
// scaling flag. NOT_FOUND when the --hf_config file cannot be opened.
absl::StatusOr<v1::RopeConfig> RopeConfigFromFlags(const FlagSet& flags,
                                                   int64_t inferred_head_dim);

// "theta=10000 head_dim=64 rotary_dim=64 max_len=4096 layout=interleaved",
// or "hf_config (N bytes, full_attention) ...".
std::string DescribeConfig(const v1::RopeConfig& config);

// DescribeConfig of what the server makes of `config`: with scaling or an
// hf_config the parameters left 0 (server defaults) or derived are shown as
// the server's ResolveConfig gives them (llama3 factor=8 low_freq_factor=1
// ..., not the zeros sent), after "hf_config (...) -> " for a config.json.
// Falls back to DescribeConfig(config) when the server cannot resolve it.
std::string DescribeEffectiveConfig(RopeClient& client, const v1::RopeConfig& config);

// The flags that give an explicit `config` exactly: "--theta=500000
// --head_dim=128 ... --rope_scaling=llama3 --factor=8 ...".
std::string ConfigAsFlags(const v1::RopeConfig& config);

// An input tensor and where it came from ("q.npy (<f4)", "random normal,
// seed 1").
struct InputTensor {
  v1::Tensor tensor;
  std::string source;
};

// Loads the tensor named by --<file_flag> (a .npy file) or makes a random
// one from --<shape_flag> (values from --seed + seed_offset, so q, k and v
// differ). nullopt when neither is given; a usage error when both are.
// The dtype is --dtype when given, else the file's ('<u2' needs
// --dtype=bfloat16), else float32.
absl::StatusOr<std::optional<InputTensor>> LoadInputTensor(const FlagSet& flags,
                                                           absl::string_view file_flag,
                                                           absl::string_view shape_flag,
                                                           uint64_t seed_offset);

// Writes `tensor` to the .npy path in --<flag> when that flag is non-empty,
// and notes it on `out`.
absl::Status WriteOutputIfAsked(const FlagSet& flags, absl::string_view flag,
                                const v1::Tensor& tensor, std::ostream& out);

}  // namespace client
}  // namespace rope

#endif  // ROPE_CLIENT_CLI_COMMON_FLAGS_H_
