#include "core/engine/engine.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <new>
#include <numeric>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "core/engine/hf_config.h"
#include "core/engine/rope_math.h"
#include "core/engine/scaling.h"
#include "core/engine/table_block.h"
#include "core/engine/table_blocks_touched.h"
#include "core/engine/tensor_size.h"
#include "core/engine/validation.h"

namespace rope {

Engine::Engine(std::unique_ptr<Backend> backend, EngineLimits limits)
    : backend_(std::move(backend)),
      limits_(limits),
      cache_(limits.table_cache_bytes,
             [b = backend_.get()](const TableKey& key, int64_t block) {
               return TableBlock::Build(key, block, [b](int64_t rows, const auto& fill) {
                 b->ParallelRows(rows, fill);
               });
             }),
      hf_configs_(limits.hf_config_cache_bytes, limits.hf_config_cache_entries) {}

namespace {

// INVALID_ARGUMENT naming the config's fields when the table `key` stands
// for has a non-finite inverse frequency or attention factor: finite,
// in-range parameters can still combine into one (a tiny scaling factor
// dividing a frequency, a dynamic-NTK base past double's range), and would
// give replies full of NaN or Inf. A thread's last key that passed is
// remembered, so a client sending one config call after call pays for the
// check once.
absl::Status CheckDerivedValues(const TableKey& key) {
  thread_local std::optional<TableKey> last_passed;
  if (last_passed.has_value() && *last_passed == key) return absl::OkStatus();
  const std::vector<double> inv_freq = ComputeInvFreq(key);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    if (!std::isfinite(inv_freq[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.theta ", ExactDecimal(key.theta), ", config.rotary_dim ", key.rotary_dim,
          " and config.scaling ", DescribeScaling(key.scaling), " give inv_freq[", i, "] = ",
          inv_freq[i], ": not finite; the parameters are outside what this scaling can use"));
    }
  }
  const double factor = ComputeAttentionFactor(key);
  if (!std::isfinite(factor)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.scaling ", DescribeScaling(key.scaling), " with config.max_len ", key.max_len,
        " gives an attention factor of ", factor, ": not finite"));
  }
  last_passed = key;
  return absl::OkStatus();
}

// Largest position of start-based positions (AttentionScores).
int64_t MaxPosition(const math::PositionSpec& positions) {
  return positions.start_pos + positions.seq - 1;
}

// The view a layer without rotary embedding hands a backend: no blocks, and
// arguments with rotary_dim 0, so that no kernel reads a row.
std::shared_ptr<const RopeTable> NoRotaryTable(const RopeConfig& config) {
  TableKey key = MakeTableKey(config, 0);
  return std::make_shared<const RopeTable>(key, 0,
                                           std::vector<std::shared_ptr<const TableBlock>>());
}

// The last dimension of a tensor's shape, or 0 without one.
int64_t Width(const std::vector<int64_t>& shape) { return shape.empty() ? 0 : shape.back(); }

// Llama 4's temperature tuning of a NoPE layer's queries: a copy of q whose
// token (b, i) is multiplied by the temperature of its position, each
// product rounded to q's dtype, as transformers multiplies query_states
// by attn_scales and casts back.
template <typename Tag>
void ScaleQueries(const AttentionArgs& args, const NoRopeConfig& no_rope, void* out) {
  using S = typename Tag::Storage;
  const S* in = static_cast<const S*>(args.q);
  S* dst = static_cast<S*>(out);
  const int64_t token = args.q_heads * args.head_dim;
  for (int64_t b = 0; b < args.batch; ++b) {
    for (int64_t i = 0; i < args.q_seq; ++i) {
      const float t = static_cast<float>(no_rope.Temperature(args.q_positions.At(b, i)));
      const int64_t first = (b * args.q_seq + i) * token;
      for (int64_t e = first; e < first + token; ++e) {
        math::Store<Tag>(dst + e, math::Load<Tag>(in + e) * t);
      }
    }
  }
}

// Checks where `result` (`what`: "the scores are") goes against the
// result's shape and the call's memory, before any work.
absl::Status CheckResult(const ResultBuffer& result, const std::vector<int64_t>& shape,
                         const TensorMemory& memory, const char* what) {
  if (result.bytes != nullptr) {
    if (memory.is_host()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        result.name, ": the call's tensors are in ", memory.ToString(),
        ", so its results go there too (a region of that memory), not into the reply"));
  }
  if (result.view.memory != memory) {
    return absl::InvalidArgumentError(absl::StrCat(result.name, " is in ",
                                                   result.view.memory.ToString(),
                                                   " but the call's tensors are in ",
                                                   memory.ToString(),
                                                   ": one call's tensors are all in one memory"));
  }
  const int64_t bytes = Float32Bytes(shape);
  if (result.view.byte_size != static_cast<uint64_t>(bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(result.name, ".byte_size is ",
                                                   result.view.byte_size, ": ", what, " ", bytes,
                                                   " bytes"));
  }
  return absl::OkStatus();
}

// The result's memory: the reply's bytes, resized to the result, or the
// caller's view (CheckResult passed).
float* PlaceResult(ResultBuffer& result, const std::vector<int64_t>& shape) {
  result.shape = shape;
  if (result.bytes == nullptr) return static_cast<float*>(result.view.data);
  result.bytes->resize(static_cast<size_t>(Float32Bytes(shape)));
  return reinterpret_cast<float*>(result.bytes->data());
}

}  // namespace

absl::StatusOr<DeviceMemory*> Engine::DeviceMemoryFor(absl::string_view field) {
  DeviceMemory* memory = backend_->device_memory();
  if (memory == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(field, ": this server's backend is ", backend_->info().name,
                     ", which has no device memory; CUDA shared memory needs ropeserve "
                     "--backend=cuda"));
  }
  return memory;
}

absl::Status Engine::CheckMemory(const TensorMemory& memory, absl::string_view field) {
  if (memory.is_host()) return absl::OkStatus();
  ROPE_ASSIGN_OR_RETURN(DeviceMemory* const device_memory, DeviceMemoryFor(field));
  if (memory.device != device_memory->device()) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is in ", memory.ToString(),
                                                   ": this server's backend computes on device ",
                                                   device_memory->device()));
  }
  return absl::OkStatus();
}

absl::StatusOr<RopeConfig> Engine::ExplicitConfig(const RopeConfig& config,
                                                  const Interrupt* interrupt) {
  return ExplicitConfig(config, interrupt, nullptr);
}

absl::StatusOr<RopeConfig> Engine::ExplicitConfig(
    const RopeConfig& config, const Interrupt* interrupt,
    std::shared_ptr<const HfConfigCache::Result>* derived) {
  if (config.hf_config_json.empty()) {
    if (!config.hf_layer_type.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.hf_layer_type is set but config.hf_config_json is empty: the layer type picks "
          "from a config.json's rope parameters"));
    }
    if (config.hf_layer_index.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.hf_layer_index is ", *config.hf_layer_index,
          " but config.hf_config_json is empty: the index picks a decoder layer of a "
          "config.json (without one, set config.no_rope for a layer without rotary embedding)"));
    }
    return config;
  }
  const int64_t json_bytes = static_cast<int64_t>(config.hf_config_json.size());
  if (json_bytes > limits_.max_hf_config_json_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "config.hf_config_json is ", json_bytes, " bytes: over the server's limit of ",
        limits_.max_hf_config_json_bytes, " bytes"));
  }
  HfLayerSelector selector;
  selector.layer_type = config.hf_layer_type;
  selector.layer_index = config.hf_layer_index;
  const std::shared_ptr<const HfConfigCache::Result> parsed =
      hf_configs_.Get(config.hf_config_json, selector, interrupt);
  if (!parsed->ok()) return parsed->status();
  if (derived != nullptr) *derived = parsed;
  ROPE_ASSIGN_OR_RETURN(RopeConfig explicit_config, ApplyHfRopeConfig(config, **parsed));
  // What the JSON gives is checked here, so that the message says where the
  // value came from.
  absl::Status scaling = ValidateScaling(explicit_config.scaling, explicit_config.rotary_dim);
  if (scaling.ok()) scaling = ValidateMrope(explicit_config.mrope, explicit_config.rotary_dim);
  if (!scaling.ok()) {
    return absl::Status(scaling.code(),
                        absl::StrCat("hf_config_json gives an unusable config: ", scaling.message()));
  }
  return explicit_config;
}

absl::StatusOr<std::shared_ptr<const RopeTable>> Engine::TableFor(
    const RopeConfig& config, int64_t max_position,
    const std::function<void(BlocksTouched&)>& touch) {
  const TableKey key = MakeTableKey(config, max_position);
  ROPE_RETURN_IF_ERROR(CheckDerivedValues(key));
  BlocksTouched touched(TableBlockShift(key), limits_.max_table_blocks_per_call);
  touch(touched);
  ROPE_ASSIGN_OR_RETURN(const std::vector<int64_t> blocks, touched.Sorted());
  return cache_.Get(key, blocks);
}

absl::Status Engine::Rotate(const RotateParams& params) {
  ROPE_ASSIGN_OR_RETURN(RopeConfig config, ExplicitConfig(params.config, params.interrupt));
  // A DeepSeek config.json's whole-head tensors rotate their last features.
  config = ForTensorWidth(config, Width(params.q.shape));
  ROPE_ASSIGN_OR_RETURN(ResolvedRotate resolved, ResolveRotate(params, config, limits_));
  ROPE_RETURN_IF_ERROR(CheckMemory(resolved.args.memory, "q"));
  if (IsFloat8(resolved.args.output_dtype)) {
    // Sized after validation: the element limit bounds them.
    const auto elements = [&](int64_t heads) {
      return static_cast<size_t>(resolved.args.batch * resolved.args.seq * heads *
                                 resolved.args.head_dim);
    };
    try {
      params.q_float8_out->resize(elements(resolved.args.q_heads));
      resolved.args.q_out = params.q_float8_out->data();
      if (resolved.args.k != nullptr) {
        params.k_float8_out->resize(elements(resolved.args.k_heads));
        resolved.args.k_out = params.k_float8_out->data();
      }
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError("out of memory allocating the float8 outputs");
    }
  }
  if (config.no_rope.enabled) {
    // A NoPE layer: nothing rotates. In place, q and k stay as they are; a
    // float8 output is only converted and an output reference (q_out) only
    // receives its input, both by the kernels with rotary_dim 0.
    const RotateArgs& args = resolved.args;
    if (!IsFloat8(args.output_dtype) && args.q_source == nullptr && args.k_source == nullptr) {
      return absl::OkStatus();
    }
    resolved.args.rotary_dim = 0;
    resolved.args.rotary_offset = 0;
    resolved.args.positions = math::PositionSpec{};
    resolved.args.positions.seq = resolved.args.seq;
    return backend_->Rotate(*NoRotaryTable(config), resolved.args);
  }
  ROPE_ASSIGN_OR_RETURN(
      const std::shared_ptr<const RopeTable> table,
      TableFor(config, resolved.max_position, [&resolved](BlocksTouched& touched) {
        if (resolved.mrope_positions != nullptr) {
          touched.AddList(resolved.mrope_positions, kMropeAxes * resolved.mrope_rows);
        } else {
          touched.AddPositions(resolved.args.positions);
        }
      }));
  if (resolved.mrope_positions == nullptr) return backend_->Rotate(*table, resolved.args);

  // M-RoPE: a per-request table whose row r holds token r's frequencies,
  // each from its axis' position, so that the backend rotates token r by
  // row r as it would with plain RoPE (M-RoPE in rope.proto, docs/models.md).
  const int64_t rows = resolved.mrope_rows;
  const std::array<const int64_t*, kMropeAxes> axes = {
      resolved.mrope_positions, resolved.mrope_positions + rows,
      resolved.mrope_positions + 2 * rows};
  std::shared_ptr<const RopeTable> gathered;
  std::vector<int64_t> token_rows;
  try {
    gathered = RopeTable::Gather(*table, rows, axes,
                                 MropeFrequencyAxes(config.mrope, table->half()));
    if (rows != resolved.args.seq) {  // B*S rows: token (b, s) reads row b*S + s
      token_rows.resize(rows);
      std::iota(token_rows.begin(), token_rows.end(), int64_t{0});
    }
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "out of memory assembling the M-RoPE rows of ", rows, " tokens"));
  }
  RotateArgs args = resolved.args;
  args.positions = math::PositionSpec{};
  args.positions.seq = args.seq;
  if (!token_rows.empty()) {
    args.positions.explicit_positions = token_rows.data();
    args.positions.count = rows;
  }
  return backend_->Rotate(*gathered, args);
}

absl::Status Engine::AttentionScores(const AttentionParams& params, AttentionOutputs* outputs) {
  if (outputs == nullptr || !outputs->scores.requested()) {
    return absl::InvalidArgumentError("AttentionScores needs an outputs.scores buffer");
  }
  ROPE_ASSIGN_OR_RETURN(RopeConfig config, ExplicitConfig(params.config, params.interrupt));
  config = ForTensorWidth(config, Width(params.q.shape));
  ROPE_ASSIGN_OR_RETURN(ResolvedAttention resolved, ResolveAttention(params, config, limits_));
  AttentionArgs& args = resolved.args;
  if (args.v != nullptr && !outputs->output.requested()) {
    return absl::InvalidArgumentError("v is given but outputs.output is null");
  }
  ROPE_RETURN_IF_ERROR(CheckMemory(args.memory, "q"));
  ROPE_RETURN_IF_ERROR(
      CheckResult(outputs->scores, resolved.scores_shape, args.memory, "the scores are"));
  if (args.v != nullptr) {
    ROPE_RETURN_IF_ERROR(
        CheckResult(outputs->output, resolved.output_shape, args.memory, "the output is"));
  }
  args.interrupt = params.interrupt;
  std::shared_ptr<const RopeTable> table;
  std::string scaled_q;  // a NoPE layer's tuned queries
  if (config.no_rope.enabled) {
    args.rotary_dim = 0;
    args.rotary_offset = 0;
    table = NoRotaryTable(config);
    if (config.no_rope.tuned()) {
      if (!args.memory.is_host()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "config.no_rope has attention temperature tuning, which this server applies to a "
            "copy of q in host memory: not with q in ", args.memory.ToString()));
      }
      try {
        scaled_q.resize(static_cast<size_t>(args.batch * args.q_seq * args.q_heads *
                                            args.head_dim) *
                        DTypeSize(args.dtype));
      } catch (const std::bad_alloc&) {
        return absl::ResourceExhaustedError(
            "out of memory copying q for the attention temperature tuning");
      }
      switch (args.dtype) {
        case DType::kFloat16:
          ScaleQueries<math::F16>(args, config.no_rope, scaled_q.data());
          break;
        case DType::kBFloat16:
          ScaleQueries<math::BF16>(args, config.no_rope, scaled_q.data());
          break;
        default:
          ScaleQueries<math::F32>(args, config.no_rope, scaled_q.data());
          break;
      }
      args.q = scaled_q.data();
    }
  } else {
    ROPE_ASSIGN_OR_RETURN(
        table,
        TableFor(config, std::max(MaxPosition(args.q_positions), MaxPosition(args.k_positions)),
                 [&args](BlocksTouched& touched) {
                   touched.AddPositions(args.q_positions);
                   touched.AddPositions(args.k_positions);
                 }));
  }

  args.scores = PlaceResult(outputs->scores, resolved.scores_shape);
  if (args.v != nullptr) args.output = PlaceResult(outputs->output, resolved.output_shape);
  return backend_->AttentionScores(*table, args);
}

absl::StatusOr<TableSlice> Engine::GetTable(const RopeConfig& requested, int64_t start,
                                           int64_t count, const Interrupt* interrupt) {
  ROPE_ASSIGN_OR_RETURN(const RopeConfig config, ExplicitConfig(requested, interrupt));
  ROPE_RETURN_IF_ERROR(ValidateConfig(config, limits_.max_len_cap));
  if (config.no_rope.enabled) {
    return absl::InvalidArgumentError(
        "config.no_rope is set (a layer without rotary embedding): it has no cos/sin table");
  }
  const int64_t max_len = config.max_len;
  if (start < 0) {
    return absl::InvalidArgumentError(absl::StrCat("start is ", start, ": must be >= 0"));
  }
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("count is ", count, ": must be >= 0 (0 means to the end of the table)"));
  }
  if (start >= max_len) {
    return absl::OutOfRangeError(
        absl::StrCat("start is ", start, ": must be < config.max_len ", max_len));
  }
  if (count == 0) count = max_len - start;
  if (count > max_len - start) {
    return absl::OutOfRangeError(absl::StrCat("start ", start, " + count ", count,
                                              " is past config.max_len ", max_len));
  }
  const int64_t half = config.EffectiveRotaryDim() / 2;
  if (count * half * 2 > limits_.max_elements_per_request) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "table slice of ", count, " rows x ", half, " x 2 values: over the "
        "max_elements_per_request limit of ", limits_.max_elements_per_request));
  }
  ROPE_ASSIGN_OR_RETURN(std::shared_ptr<const RopeTable> table,
                        TableFor(config, start + count - 1, [start, count](BlocksTouched& touched) {
                          touched.AddRange(start, count);
                        }));
  TableSlice slice;
  slice.table = std::move(table);
  slice.start = start;
  slice.count = count;
  return slice;
}

absl::StatusOr<ResolvedConfig> Engine::ResolveConfig(const RopeConfig& requested,
                                                     const Interrupt* interrupt) {
  std::shared_ptr<const HfConfigCache::Result> derived;
  ROPE_ASSIGN_OR_RETURN(RopeConfig config, ExplicitConfig(requested, interrupt, &derived));
  ROPE_RETURN_IF_ERROR(ValidateConfig(config, limits_.max_len_cap));
  // No tensor bounds head_dim here: the inverse frequencies (doubles, two
  // values each as GetTable counts a row) are held to the element limit
  // before anything is allocated.
  const int64_t half = config.EffectiveRotaryDim() / 2;
  if (half * 2 > limits_.max_elements_per_request) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "config.rotary_dim is ", config.EffectiveRotaryDim(), ": its ", half,
        " inverse frequencies (2 values each) are over the max_elements_per_request limit of ",
        limits_.max_elements_per_request));
  }
  ResolvedConfig out;
  if (derived != nullptr) {
    const HfRopeConfig& hf = **derived;
    out.hf_layout = hf.layout;
    out.max_position_embeddings = hf.max_position_embeddings;
    out.layer_type = hf.layer_type;
  }
  out.whole_head_dim = config.whole_head_dim;
  config.whole_head_dim = 0;  // reported above; never part of a request
  out.key = MakeTableKey(config, /*max_position=*/0);
  if (config.no_rope.enabled) {
    out.has_table = false;
  } else {
    ROPE_RETURN_IF_ERROR(CheckDerivedValues(out.key));
    out.inv_freq = ComputeInvFreq(out.key);
    out.attention_factor = ComputeAttentionFactor(out.key);
  }
  // The defaults spelled out, so that sending the result back gives the
  // same tables.
  if (config.theta == 0) config.theta = config.EffectiveTheta();
  if (config.rotary_dim == 0) config.rotary_dim = config.EffectiveRotaryDim();
  const ScalingConfig sent = config.scaling;
  config.scaling = WithScalingDefaults(sent);
  if (const auto* longrope = std::get_if<LongRopeScaling>(&sent)) {
    // Keep the rule (max_position_embeddings) as sent: resolving it here
    // would fix the per-request choice of list.
    std::get<LongRopeScaling>(config.scaling).max_position_embeddings =
        longrope->max_position_embeddings;
  }
  out.config = std::move(config);
  return out;
}

}  // namespace rope
