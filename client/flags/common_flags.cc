#include "client/flags/common_flags.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/flags/axial_flags.h"
#include "absl/strings/strip.h"
#include "client/flags/cli_parsing.h"
#include "client/flags/scaling_flags.h"
#include "client/hf_config_defaults.h"
#include "client/npy.h"
#include "client/tensor_util.h"
#include "common/defaults.h"
#include "common/status_macros.h"

namespace rope {
namespace client {
namespace {

absl::Status ValidateDTypeName(absl::string_view value) {
  if (value.empty()) return absl::OkStatus();  // from the input
  return ParseDType(value).status();
}

absl::Status ValidateLayoutName(absl::string_view value) { return ParseLayout(value).status(); }

absl::Status ValidateAnglePrecision(absl::string_view value) {
  if (value == "exact" || value == "float32") return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--angle_precision=", value, ": expected exact or float32"));
}

v1::AnglePrecision AnglePrecisionOfFlags(const FlagSet& flags) {
  return flags.String("angle_precision") == "float32" ? v1::ANGLE_FLOAT32 : v1::ANGLE_EXACT;
}

absl::Status ValidateDistribution(absl::string_view value) {
  return ParseDistribution(value).status();
}

absl::Status ValidateSectionList(absl::string_view value) {
  return ParseInt64List(value).status();
}

absl::StatusOr<uint32_t> Uint32Flag(absl::string_view name, int64_t value) {
  if (value < 0 || value > std::numeric_limits<uint32_t>::max()) {
    return UsageError(absl::StrCat("--", name, "=", value, ": must be in [0, ",
                                   std::numeric_limits<uint32_t>::max(), "]"));
  }
  return static_cast<uint32_t>(value);
}

// --hf_config's RopeConfig: layout and max_len as the flags give them, else
// LAYOUT_UNSPECIFIED and 0, for CompleteHfConfigFromFlags to take from the
// server.
absl::StatusOr<v1::RopeConfig> HfRopeConfigFromFlags(const FlagSet& flags, std::string json,
                                                     int64_t inferred_head_dim) {
  v1::RopeConfig config;
  config.set_hf_config_json(std::move(json));
  config.set_hf_layer_type(flags.String("hf_layer_type"));
  // An explicit --head_dim must agree with the config.json's; the last dim
  // of q is sent too, so that a mismatch is named by the server.
  const int64_t head_dim = flags.Int("head_dim") != 0 ? flags.Int("head_dim") : inferred_head_dim;
  ROPE_ASSIGN_OR_RETURN(uint32_t head_dim32, Uint32Flag("head_dim", head_dim));
  config.set_head_dim(head_dim32);
  config.set_layout(v1::LAYOUT_UNSPECIFIED);
  if (flags.IsSet("layout")) {
    absl::StatusOr<v1::Layout> layout = ParseLayout(flags.String("layout"));
    if (!layout.ok()) return UsageError(layout.status().message());
    config.set_layout(*layout);
  }
  if (flags.IsSet("max_len")) {
    ROPE_ASSIGN_OR_RETURN(uint32_t max_len, Uint32Flag("max_len", flags.Int("max_len")));
    config.set_max_len(max_len);
  }
  config.set_angle_precision(AnglePrecisionOfFlags(flags));
  const int64_t index = flags.Int("hf_layer_index");
  if (index != -1) {
    ROPE_ASSIGN_OR_RETURN(uint32_t layer, Uint32Flag("hf_layer_index", index));
    config.set_hf_layer_index(layer);
  }
  return config;
}

}  // namespace

void AddConnectionFlags(FlagSet* flags, CallRetries retries) {
  flags->BeginGroup("Connection flags");
  flags->Add("target", FlagSet::Kind::kString, absl::StrCat("localhost:", kDefaultPort),
             "Server address, any gRPC target: host:port, "
             "ipv4:127.0.0.1:50051,127.0.0.1:50052 (round robin over the list), "
             "dns:///ropeserve.ns.svc:50051 (round robin over every address of a "
             "headless Service).");
  flags->Add("deadline", FlagSet::Kind::kDuration, "30s",
             retries == CallRetries::kOnUnavailable
                 ? "Deadline of the call (e.g. 500ms, 10s, 2m). Calls failing with "
                   "UNAVAILABLE are retried (5 attempts in all) within it."
                 : "Deadline of each call (e.g. 500ms, 10s, 2m), of each stream for "
                   "rotate_stream. Calls are never retried: every failure is counted.");
  flags->BeginGroup("Security flags");
  flags->Add("tls", FlagSet::Kind::kBool, "false",
             "Connect with TLS, trusting the system's CA store (implied by the other --tls_* "
             "flags).");
  flags->Add("tls_ca_file", FlagSet::Kind::kString, "",
             "PEM CA bundle the server's certificate must chain to.");
  flags->Add("tls_cert_file", FlagSet::Kind::kString, "",
             "PEM client certificate, for servers that require mutual TLS (with "
             "--tls_key_file).");
  flags->Add("tls_key_file", FlagSet::Kind::kString, "",
             "PEM private key of --tls_cert_file.");
  flags->Add("tls_server_name", FlagSet::Kind::kString, "",
             "Name the server's certificate must carry, when it is not the target's host "
             "(e.g. when connecting by IP address).");
  flags->Add("token_file", FlagSet::Kind::kString, "",
             "File whose first line (after '#' comments) is a bearer token, sent as "
             "\"authorization: Bearer <token>\"; needs TLS.");
}

ChannelSecurityFiles ChannelSecurityFromFlags(const FlagSet& flags) {
  ChannelSecurityFiles files;
  files.tls = flags.Bool("tls");
  files.tls_ca_file = flags.String("tls_ca_file");
  files.tls_cert_file = flags.String("tls_cert_file");
  files.tls_key_file = flags.String("tls_key_file");
  files.tls_server_name = flags.String("tls_server_name");
  files.token_file = flags.String("token_file");
  return files;
}

void AddRopeConfigFlags(FlagSet* flags) {
  flags->BeginGroup("RoPE config flags");
  flags->Add("theta", FlagSet::Kind::kDouble, "10000",
             "Frequency base: inv_freq[i] = theta^(-2i/rotary_dim). Llama 3 uses 500000.");
  flags->Add("head_dim", FlagSet::Kind::kInt, "0",
             "Features per head (D). 0: the last dim of q (rotate, scores); "
             "table needs it given.");
  flags->Add("rotary_dim", FlagSet::Kind::kInt, "0",
             "Features that rotate (partial rotary); 0 means head_dim - rotary_offset.");
  flags->Add("rotary_offset", FlagSet::Kind::kInt, "0",
             "The first rotated feature (DeepSeek MLA heads rotate their last "
             "qk_rope_head_dim features: --rotary_offset=qk_nope_head_dim).");
  flags->Add("no_rope", FlagSet::Kind::kBool, "false",
             "A layer without rotary embedding (Llama 4's NoPE layers): rotate returns q and k "
             "unchanged; with --floor_scale, scores apply Llama 4's temperature tuning.");
  flags->Add("floor_scale", FlagSet::Kind::kDouble, "0",
             "--no_rope: temperature tuning's floor_scale (Llama 4: 8192); 0: none.");
  flags->Add("attn_scale", FlagSet::Kind::kDouble, "0",
             "--no_rope: temperature tuning's attn_scale (Llama 4: 0.1).");
  flags->Add("max_len", FlagSet::Kind::kInt, "4096",
             "Table length: every position must be < max_len. With --hf_config the default "
             "is the config's max_position_embeddings.");
  flags->Add("layout", FlagSet::Kind::kString, "interleaved",
             "Pairing of rotated features: interleaved = (x[2i], x[2i+1]) as Meta "
             "Llama / GPT-J; half = (x[i], x[i+r/2]) as GPT-NeoX / Hugging Face "
             "rotate_half. With --hf_config the default is the layout transformers' "
             "modeling code uses for the config's model_type (half for most; interleaved for "
             "GPT-J, GLM, Cohere, DeepSeek V2/V3, Llama 4, ...).",
             ValidateLayoutName);
  flags->Add("mrope_section", FlagSet::Kind::kString, "",
             "M-RoPE (Qwen2-VL, Qwen3-VL): three comma-separated counts (t,h,w) of frequencies "
             "summing to rotary_dim/2, e.g. 16,24,24. --positions then holds 3*S or 3*B*S values "
             "ordered [axis][b][s].",
             ValidateSectionList);
  flags->Add("mrope_interleaved", FlagSet::Kind::kBool, "false",
             "M-RoPE: interleave the axes (Qwen3-VL) instead of one section per axis (Qwen2-VL).");
  flags->Add("mrope_ernie_3d", FlagSet::Kind::kBool, "false",
             "M-RoPE: Ernie 4.5-VL's 3-D layout (h and w alternate over the first h+w "
             "frequencies, t takes the last ones; h == w).");
  flags->Add("angle_precision", FlagSet::Kind::kString, "exact",
             "exact: angles in double, cos/sin rounded once (the precision contract); float32: "
             "as transformers computes them in float32, for bit-parity checks (plain RoPE, "
             "linear and llama3 scaling).",
             ValidateAnglePrecision);
  AddScalingFlags(flags);
  AddAxialFlags(flags);
  flags->BeginGroup("Hugging Face config.json");
  flags->Add("hf_config", FlagSet::Kind::kString, "",
             "A model's config.json (whole, or its rope keys), or the model's directory. The "
             "server derives theta, head_dim, rotary_dim, scaling and M-RoPE from it with "
             "transformers' rules; --theta, --rotary_dim, --mrope_* and the scaling flags must "
             "then be left out. --layout and --max_len default to the model's (see their "
             "help). `ropectl resolve` shows what it becomes.");
  flags->Add("hf_layer_type", FlagSet::Kind::kString, "",
             "With --hf_config: full_attention (default) or sliding_attention (Gemma 3's local "
             "layers: rope_local_base_freq, no scaling), a key of a per-layer rope_parameters, "
             "or DeepSeek-V4's rope group (main, compress).");
  flags->Add("hf_layer_index", FlagSet::Kind::kInt, "-1",
             "With --hf_config: the decoder layer (from 0) whose rope is meant: its layer type, "
             "whether it is a NoPE layer (Llama 4), its rope group. -1: unset.");
}

void AddDTypeFlag(FlagSet* flags) {
  flags->Add("dtype", FlagSet::Kind::kString, "",
             "float32 | float16 | bfloat16: dtype of the tensors sent. Default: the "
             "dtype of the .npy input ('<f4' float32, '<f2' float16), float32 for "
             "random inputs. A '<u2' .npy input is read as raw bfloat16 bits and "
             "needs --dtype=bfloat16; other inputs are converted (rounding to "
             "nearest even).",
             ValidateDTypeName);
}

void AddRandomFlags(FlagSet* flags) {
  flags->Add("seed", FlagSet::Kind::kInt, "0",
             "Seed of random inputs (std::mt19937_64); k uses seed+1, v seed+2.");
  flags->Add("distribution", FlagSet::Kind::kString, "normal",
             "Random values: normal (mean 0, stddev 1) or uniform on [-1, 1).",
             ValidateDistribution);
}

absl::Status ApplySecurityFlags(const ChannelSecurityFiles& files, ClientOptions* options) {
  absl::Status status = ApplyChannelSecurity(files, options);
  if (status.code() == absl::StatusCode::kInvalidArgument) return UsageError(status.message());
  return status;
}

absl::StatusOr<std::unique_ptr<RopeClient>> ClientFromFlags(const FlagSet& flags,
                                                           bool health_check) {
  ClientOptions options;
  options.health_check = health_check;
  options.deadline = flags.Duration("deadline");
  if (options.deadline <= absl::ZeroDuration()) {
    return UsageError(absl::StrCat("--deadline=", absl::FormatDuration(options.deadline),
                                   ": must be > 0"));
  }
  if (flags.String("target").empty()) return UsageError("--target is empty");
  ROPE_RETURN_IF_ERROR(ApplySecurityFlags(ChannelSecurityFromFlags(flags), &options));
  return RopeClient::Create(flags.String("target"), options);
}

absl::StatusOr<v1::RopeConfig> RopeConfigFromFlags(const FlagSet& flags,
                                                   int64_t inferred_head_dim) {
  v1::RopeConfig config;
  const std::string& hf_config = flags.String("hf_config");
  if (!hf_config.empty()) {
    std::vector<std::string> exclusive = {"theta",   "rotary_dim",  "rotary_offset",
                                          "mrope_section", "mrope_interleaved",
                                          "mrope_ernie_3d", "no_rope",
                                          "floor_scale", "attn_scale"};
    for (const std::string& name : ScalingFlagNames()) exclusive.push_back(name);
    for (const std::string& name : AxialFlagNames()) exclusive.push_back(name);
    for (const std::string& name : exclusive) {
      if (flags.IsSet(name)) {
        return UsageError(absl::StrCat("--", name,
                                       " does not go with --hf_config (the config.json gives it)"));
      }
    }
    absl::StatusOr<std::string> json = ReadHfConfigFile(hf_config, "--hf_config");
    if (!json.ok()) return json.status();
    return HfRopeConfigFromFlags(flags, *std::move(json), inferred_head_dim);
  } else {
    if (flags.IsSet("hf_layer_type")) return UsageError("--hf_layer_type needs --hf_config");
    if (flags.IsSet("hf_layer_index")) return UsageError("--hf_layer_index needs --hf_config");
    config.set_theta(flags.Double("theta"));
  }
  int64_t head_dim = flags.Int("head_dim");
  if (head_dim == 0) head_dim = inferred_head_dim;
  if (head_dim == 0) return UsageError("--head_dim is required");
  absl::StatusOr<uint32_t> v = Uint32Flag("head_dim", head_dim);
  if (!v.ok()) return v.status();
  config.set_head_dim(*v);
  v = Uint32Flag("rotary_dim", flags.Int("rotary_dim"));
  if (!v.ok()) return v.status();
  config.set_rotary_dim(*v);
  v = Uint32Flag("rotary_offset", flags.Int("rotary_offset"));
  if (!v.ok()) return v.status();
  config.set_rotary_offset(*v);
  if (flags.Bool("no_rope")) {
    config.mutable_no_rope()->set_floor_scale(flags.Double("floor_scale"));
    config.mutable_no_rope()->set_attn_scale(flags.Double("attn_scale"));
  } else if (flags.IsSet("floor_scale") || flags.IsSet("attn_scale")) {
    return UsageError("--floor_scale and --attn_scale need --no_rope");
  }
  v = Uint32Flag("max_len", flags.Int("max_len"));
  if (!v.ok()) return v.status();
  config.set_max_len(*v);
  absl::StatusOr<v1::Layout> layout = ParseLayout(flags.String("layout"));
  if (!layout.ok()) return UsageError(layout.status().message());
  config.set_layout(*layout);
  config.set_angle_precision(AnglePrecisionOfFlags(flags));
  ROPE_RETURN_IF_ERROR(ApplyScalingFlags(flags, &config));
  if (!flags.String("mrope_section").empty()) {
    absl::StatusOr<std::vector<int64_t>> section = ParseInt64List(flags.String("mrope_section"));
    if (!section.ok()) return UsageError(section.status().message());
    for (int64_t s : *section) {
      ROPE_ASSIGN_OR_RETURN(uint32_t count, Uint32Flag("mrope_section", s));
      config.mutable_mrope()->add_section(count);
    }
    config.mutable_mrope()->set_interleaved(flags.Bool("mrope_interleaved"));
    config.set_mrope_ernie_3d(flags.Bool("mrope_ernie_3d"));
  } else if (flags.IsSet("mrope_interleaved")) {
    return UsageError("--mrope_interleaved needs --mrope_section");
  } else if (flags.IsSet("mrope_ernie_3d")) {
    return UsageError("--mrope_ernie_3d needs --mrope_section");
  }
  ROPE_RETURN_IF_ERROR(ApplyAxialFlags(flags, &config));
  return config;
}

std::string ConfigAsFlags(const v1::RopeConfig& config) {
  std::string out = absl::StrFormat(
      "--theta=%s --head_dim=%u --rotary_dim=%u --max_len=%u --layout=%s",
      ExactDecimal(config.theta()), config.head_dim(), config.rotary_dim(), config.max_len(),
      LayoutName(config.layout()));
  if (config.rotary_offset() != 0) absl::StrAppend(&out, " --rotary_offset=", config.rotary_offset());
  if (config.has_no_rope()) {
    absl::StrAppend(&out, " --no_rope");
    if (config.no_rope().floor_scale() != 0) {
      absl::StrAppend(&out, " --floor_scale=", ExactDecimal(config.no_rope().floor_scale()),
                      " --attn_scale=", ExactDecimal(config.no_rope().attn_scale()));
    }
  }
  const std::string scaling = ScalingAsFlags(config);
  if (!scaling.empty()) absl::StrAppend(&out, " ", scaling);
  if (config.has_mrope()) {
    absl::StrAppend(&out, " --mrope_section=", absl::StrJoin(config.mrope().section(), ","));
    if (config.mrope().interleaved()) absl::StrAppend(&out, " --mrope_interleaved");
    if (config.mrope_ernie_3d()) absl::StrAppend(&out, " --mrope_ernie_3d");
  }
  if (config.has_axial()) absl::StrAppend(&out, " ", AxialAsFlags(config));
  if (config.angle_precision() == v1::ANGLE_FLOAT32) {
    absl::StrAppend(&out, " --angle_precision=float32");
  }
  return out;
}

absl::Status CompleteHfConfigFromFlags(RopeClient& client, const FlagSet& flags,
                                       v1::RopeConfig* config, std::string* defaults_note) {
  const bool layout_given = config->layout() != v1::LAYOUT_UNSPECIFIED;
  const bool max_len_given = config->max_len() != 0;
  if (config->hf_config_json().empty() || (layout_given && max_len_given)) {
    if (defaults_note != nullptr && !config->hf_config_json().empty()) {
      *defaults_note = absl::StrCat("layout=", LayoutName(config->layout()),
                                    " (--layout) max_len=", config->max_len(), " (--max_len)");
    }
    return absl::OkStatus();
  }
  absl::StatusOr<HfConfigDefaults> defaults = HfConfigDefaultsFromServer(client, *config);
  if (defaults.status().code() == absl::StatusCode::kFailedPrecondition) {
    return absl::FailedPreconditionError(absl::StrCat("--hf_config=", flags.String("hf_config"),
                                                      ": ", defaults.status().message()));
  }
  if (!defaults.ok()) return defaults.status();
  if (!max_len_given) {
    if (!defaults->max_position_embeddings.has_value()) {
      return UsageError(absl::StrCat("--hf_config=", flags.String("hf_config"),
                                     " has no max_position_embeddings: give --max_len"));
    }
    config->set_max_len(*defaults->max_position_embeddings);
  }
  if (!layout_given) config->set_layout(defaults->layout);
  if (defaults_note != nullptr) {
    *defaults_note = absl::StrCat(
        "layout=", LayoutName(config->layout()), " (",
        layout_given ? std::string("--layout") : defaults->layout_reason, ") max_len=",
        config->max_len(), " (",
        max_len_given ? std::string("--max_len") : defaults->max_len_reason, ")");
  }
  return absl::OkStatus();
}

std::string DescribeConfig(const v1::RopeConfig& config) {
  if (!config.hf_config_json().empty()) {
    return absl::StrFormat("hf_config (%d bytes, %s) head_dim=%s max_len=%u layout=%s",
                           config.hf_config_json().size(),
                           config.hf_layer_type().empty() ? "full_attention"
                                                          : config.hf_layer_type(),
                           config.head_dim() == 0 ? std::string("derived")
                                                  : absl::StrCat(config.head_dim()),
                           config.max_len(), LayoutName(config.layout()));
  }
  std::string out = absl::StrFormat(
      "theta=%g head_dim=%u rotary_dim=%u max_len=%u layout=%s", config.theta(),
      config.head_dim(), config.rotary_dim() == 0 ? config.head_dim() : config.rotary_dim(),
      config.max_len(), LayoutName(config.layout()));
  if (config.scaling_case() != v1::RopeConfig::SCALING_NOT_SET) {
    absl::StrAppend(&out, " scaling=", DescribeScaling(config));
  }
  if (config.rotary_offset() != 0) absl::StrAppend(&out, " rotary_offset=", config.rotary_offset());
  if (config.has_no_rope()) {
    absl::StrAppend(&out, " no_rope");
    if (config.no_rope().floor_scale() != 0) {
      absl::StrAppend(&out, "(floor_scale=", config.no_rope().floor_scale(),
                      " attn_scale=", config.no_rope().attn_scale(), ")");
    }
  }
  if (config.has_mrope()) {
    absl::StrAppend(&out, " mrope=",
                    config.mrope_ernie_3d()        ? "ernie_3d["
                    : config.mrope().interleaved() ? "interleaved["
                                                   : "chunked[",
                    absl::StrJoin(config.mrope().section(), ","), "]");
  }
  if (config.has_axial()) absl::StrAppend(&out, " ", DescribeAxial(config));
  if (config.angle_precision() == v1::ANGLE_FLOAT32) absl::StrAppend(&out, " angles=float32");
  return out;
}

std::string DescribeEffectiveConfig(RopeClient& client, const v1::RopeConfig& config) {
  const bool derived = !config.hf_config_json().empty() ||
                       config.scaling_case() != v1::RopeConfig::SCALING_NOT_SET;
  if (!derived) return DescribeConfig(config);
  absl::StatusOr<v1::ResolvedConfig> resolved = client.ResolveConfig(config);
  if (!resolved.ok()) return DescribeConfig(config);
  const std::string effective = DescribeConfig(resolved->config());
  if (config.hf_config_json().empty()) return effective;
  return absl::StrCat(DescribeConfig(config), " -> ", effective);
}

absl::StatusOr<std::optional<InputTensor>> LoadInputTensor(const FlagSet& flags,
                                                           absl::string_view file_flag,
                                                           absl::string_view shape_flag,
                                                           uint64_t seed_offset) {
  const std::string& path = flags.String(file_flag);
  const std::string& shape_text = flags.String(shape_flag);
  if (!path.empty() && !shape_text.empty()) {
    return UsageError(absl::StrCat("give --", file_flag, " or --", shape_flag, ", not both"));
  }
  std::optional<v1::DType> dtype;
  if (!flags.String("dtype").empty()) {
    absl::StatusOr<v1::DType> parsed = ParseDType(flags.String("dtype"));
    if (!parsed.ok()) return UsageError(parsed.status().message());
    dtype = *parsed;
  }
  InputTensor input;
  if (!path.empty()) {
    ROPE_ASSIGN_OR_RETURN(NpyArray array, ReadNpyFile(path));
    if (!dtype.has_value()) {
      switch (array.dtype) {
        case NpyDType::kFloat32: dtype = v1::FLOAT32; break;
        case NpyDType::kFloat16: dtype = v1::FLOAT16; break;
        case NpyDType::kFloat64: dtype = v1::FLOAT32; break;  // ropeserve has no float64
        case NpyDType::kUInt16:
        case NpyDType::kInt16:
          return UsageError(absl::StrCat(path, ": dtype '", NpyDTypeDescr(array.dtype),
                                         "' holds raw bfloat16 bits: pass --dtype=bfloat16"));
        case NpyDType::kInt32:
          return UsageError(absl::StrCat(path, ": dtype '<i4' (int32) is a reply type (top-k "
                                         "indices), not an input tensor's"));
      }
    }
    absl::StatusOr<v1::Tensor> tensor = TensorFromNpy(array, *dtype, path);
    if (!tensor.ok()) return tensor.status();
    input.tensor = *std::move(tensor);
    input.source = absl::StrCat(path, " (", NpyDTypeDescr(array.dtype), ")");
    return std::optional<InputTensor>(std::move(input));
  }
  if (shape_text.empty()) return std::optional<InputTensor>();
  absl::StatusOr<std::vector<int64_t>> shape = ParseShape(shape_text);
  if (!shape.ok()) {
    return UsageError(absl::StrCat("--", shape_flag, "=", shape_text, ": ",
                                   shape.status().message()));
  }
  absl::StatusOr<Distribution> distribution = ParseDistribution(flags.String("distribution"));
  if (!distribution.ok()) return UsageError(distribution.status().message());
  const uint64_t seed = static_cast<uint64_t>(flags.Int("seed")) + seed_offset;
  ROPE_ASSIGN_OR_RETURN(v1::Tensor tensor,
                        RandomTensor(*shape, dtype.value_or(v1::FLOAT32), seed, *distribution));
  input.tensor = std::move(tensor);
  input.source = absl::StrCat("random ", flags.String("distribution"), ", seed ", seed);
  return std::optional<InputTensor>(std::move(input));
}

void AddSaveInputsFlag(FlagSet* flags) {
  flags->Add("save_inputs", FlagSet::Kind::kString, "",
             "Write the inputs as sent (random or read, in the dtype sent) to DIR/q.npy, "
             "DIR/k.npy (and DIR/v.npy), to send them again with --q, --k (--v). DIR is "
             "created when missing.");
}

absl::Status SaveInputsIfAsked(const FlagSet& flags, const std::optional<InputTensor>& q,
                               const std::optional<InputTensor>& k,
                               const std::optional<InputTensor>& v, std::ostream& out) {
  std::string dir = flags.String("save_inputs");
  if (dir.empty()) return absl::OkStatus();
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) {
    return UsageError(absl::StrCat("--save_inputs=", dir, ": cannot create the directory: ",
                                   std::strerror(errno)));
  }
  for (const auto& [name, input] : {std::pair<const char*, const std::optional<InputTensor>*>{
                                        "q", &q},
                                    {"k", &k},
                                    {"v", &v}}) {
    if (!input->has_value()) continue;
    const std::string path = absl::StrCat(dir, "/", name, ".npy");
    ROPE_ASSIGN_OR_RETURN(NpyArray array, TensorToNpy((*input)->tensor, name));
    ROPE_RETURN_IF_ERROR(WriteNpyFile(path, array));
    out << "  saved " << name << " to " << path << " (" << NpyDTypeDescr(array.dtype) << ")\n";
  }
  return absl::OkStatus();
}

absl::Status WriteOutputIfAsked(const FlagSet& flags, absl::string_view flag,
                                const v1::Tensor& tensor, std::ostream& out) {
  const std::string& path = flags.String(flag);
  if (path.empty()) return absl::OkStatus();
  ROPE_ASSIGN_OR_RETURN(NpyArray array, TensorToNpy(tensor, flag));
  ROPE_RETURN_IF_ERROR(WriteNpyFile(path, array));
  out << "  wrote " << path << " (" << NpyDTypeDescr(array.dtype) << ")\n";
  return absl::OkStatus();
}

int64_t InputBytesBeforeLoading(const FlagSet& flags, absl::string_view file_flag,
                                absl::string_view shape_flag) {
  const std::string& path = flags.String(file_flag);
  if (!path.empty()) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    return in ? static_cast<int64_t>(in.tellg()) : 0;
  }
  const std::string& shape_text = flags.String(shape_flag);
  if (shape_text.empty()) return 0;
  absl::StatusOr<std::vector<int64_t>> shape = ParseShape(shape_text);
  if (!shape.ok()) return 0;
  int64_t bytes = 4;
  const std::string& dtype = flags.String("dtype");
  if (dtype == "float16" || dtype == "bfloat16") bytes = 2;
  for (int64_t dim : *shape) {
    if (dim > 0 && bytes > std::numeric_limits<int64_t>::max() / dim) {
      return std::numeric_limits<int64_t>::max();
    }
    bytes *= dim;
  }
  return bytes;
}

absl::Status CheckMessageFits(absl::string_view what, int64_t bytes) {
  if (bytes <= kDefaultMaxMessageBytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      what, " would be ", bytes, " bytes, over the ", kDefaultMaxMessageBytes,
      " bytes (512 MiB) one gRPC message may carry (ropectl's limit, and ropeserve's default "
      "--max_message_bytes): use smaller shapes, or split the work over several calls"));
}

absl::Status CheckOutputsWritable(const FlagSet& flags,
                                  std::initializer_list<absl::string_view> output_flags) {
  for (absl::string_view flag : output_flags) {
    const std::string& path = flags.String(flag);
    if (path.empty()) continue;
    if (access(path.c_str(), F_OK) == 0) {
      if (access(path.c_str(), W_OK) != 0) {
        return UsageError(absl::StrCat("--", flag, "=", path, ": the file is not writable"));
      }
      continue;
    }
    const size_t slash = path.rfind('/');
    const std::string dir =
        slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
    if (access(dir.c_str(), F_OK) != 0) {
      return UsageError(absl::StrCat("--", flag, "=", path, ": the directory ", dir,
                                     " does not exist"));
    }
    if (access(dir.c_str(), W_OK) != 0) {
      return UsageError(absl::StrCat("--", flag, "=", path, ": the directory ", dir,
                                     " is not writable"));
    }
  }
  return absl::OkStatus();
}

absl::Status ExplainHfHeadDimMismatch(const absl::Status& status, const FlagSet& flags,
                                      int64_t q_last_dim) {
  if (status.code() != absl::StatusCode::kInvalidArgument || flags.IsSet("head_dim") ||
      flags.String("hf_config").empty()) {
    return status;
  }
  absl::string_view message = status.message();
  constexpr absl::string_view kGives = "but hf_config_json gives head_dim ";
  const size_t at = message.find(kGives);
  if (at == absl::string_view::npos) return status;
  absl::string_view rest = message.substr(at + kGives.size());
  const std::string head_dim(rest.substr(0, rest.find_first_not_of("0123456789")));
  return absl::InvalidArgumentError(absl::StrCat(
      "q's last dimension is ", q_last_dim, " but --hf_config=", flags.String("hf_config"),
      " gives head_dim ", head_dim, ": send q (and k) with last dimension ", head_dim,
      " (--random_q_shape=...,", head_dim, " or a --q file of that shape)"));
}

}  // namespace client
}  // namespace rope
