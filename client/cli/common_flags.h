// Flags shared by several ropectl commands, and what they turn into: a
// RopeClient, a rope.v1.RopeConfig, input tensors, output .npy files.
#ifndef ROPE_CLIENT_CLI_COMMON_FLAGS_H_
#define ROPE_CLIENT_CLI_COMMON_FLAGS_H_

#include <cstdint>
#include <initializer_list>
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
// scaling flag. NOT_FOUND when the --hf_config file (or a model directory's
// config.json) cannot be opened. With --hf_config, --layout and --max_len
// default to the config.json's (hf_config_defaults.h), and `defaults_note`
// (when given) says which values were taken and why, for the summary.
absl::StatusOr<v1::RopeConfig> RopeConfigFromFlags(const FlagSet& flags,
                                                   int64_t inferred_head_dim,
                                                   std::string* defaults_note = nullptr);

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

// Bytes the input named by --<file_flag> (its file's size) or --<shape_flag>
// (product of the shape times the element size of --dtype, float32 when
// unset) will have, known before any value is generated; 0 when neither is
// given or the value is malformed (LoadInputTensor names that error).
int64_t InputBytesBeforeLoading(const FlagSet& flags, absl::string_view file_flag,
                                absl::string_view shape_flag);

// RESOURCE_EXHAUSTED naming the message and the limit when `bytes` exceed
// the largest message a ropectl call may send or receive (512 MiB, as the
// server's default --max_message_bytes): checked before inputs are
// generated and the call is made, so that a mistyped shape fails at once.
absl::Status CheckMessageFits(absl::string_view what, int64_t bytes);

// A usage error naming the flag when one of `output_flags` names a file that
// cannot be written (its directory missing or not writable, or the file
// not writable): checked before the call, so that no result is lost after
// it. Nothing is created.
absl::Status CheckOutputsWritable(const FlagSet& flags,
                                  std::initializer_list<absl::string_view> output_flags);

// `status` said in ropectl's terms when the server refused a config.json's
// head_dim against the last dim of q that ropectl sent for it (the user never
// set --head_dim); any other status unchanged.
absl::Status ExplainHfHeadDimMismatch(const absl::Status& status, const FlagSet& flags,
                                      int64_t q_last_dim);

// --save_inputs=DIR (commands that send tensors): the flag, and the inputs
// as sent (random or read, in the dtype sent) written to DIR/q.npy, DIR/k.npy
// and DIR/v.npy, so that a later call can send them again with --q, --k,
// --v. DIR is created when missing (its parent must exist).
void AddSaveInputsFlag(FlagSet* flags);
absl::Status SaveInputsIfAsked(const FlagSet& flags, const std::optional<InputTensor>& q,
                               const std::optional<InputTensor>& k,
                               const std::optional<InputTensor>& v, std::ostream& out);

// Writes `tensor` to the .npy path in --<flag> when that flag is non-empty,
// and notes it on `out`.
absl::Status WriteOutputIfAsked(const FlagSet& flags, absl::string_view flag,
                                const v1::Tensor& tensor, std::ostream& out);

}  // namespace client
}  // namespace rope

#endif  // ROPE_CLIENT_CLI_COMMON_FLAGS_H_
