#include "core/engine/engine.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <new>
#include <string>
#include <vector>
#include <numeric>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "core/engine/hf_config.h"
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
  if (config.hf_config_json.empty()) {
    if (!config.hf_layer_type.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.hf_layer_type is set but config.hf_config_json is empty: the layer type picks "
          "from a config.json's rope parameters"));
    }
    return config;
  }
  const int64_t json_bytes = static_cast<int64_t>(config.hf_config_json.size());
  if (json_bytes > limits_.max_hf_config_json_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "config.hf_config_json is ", json_bytes, " bytes: over the server's limit of ",
        limits_.max_hf_config_json_bytes, " bytes"));
  }
  const std::shared_ptr<const HfConfigCache::Result> parsed =
      hf_configs_.Get(config.hf_config_json, config.hf_layer_type, interrupt);
  if (!parsed->ok()) return parsed->status();
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
  ROPE_ASSIGN_OR_RETURN(const RopeConfig config, ExplicitConfig(params.config, params.interrupt));
  ROPE_ASSIGN_OR_RETURN(ResolvedRotate resolved, ResolveRotate(params, config, limits_));
  ROPE_RETURN_IF_ERROR(CheckMemory(resolved.args.memory, "q"));
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
  if (outputs == nullptr || (params.results.empty() && !outputs->scores.requested())) {
    return absl::InvalidArgumentError("AttentionScores needs an outputs.scores buffer");
  }
  ROPE_ASSIGN_OR_RETURN(const RopeConfig config, ExplicitConfig(params.config, params.interrupt));
  ROPE_ASSIGN_OR_RETURN(ResolvedAttention resolved, ResolveAttention(params, config, limits_));
  AttentionArgs& args = resolved.args;
  if (params.results.empty() && args.v != nullptr && !outputs->output.requested()) {
    return absl::InvalidArgumentError("v is given but outputs.output is null");
  }
  ROPE_RETURN_IF_ERROR(CheckMemory(args.memory, "q"));
  args.interrupt = params.interrupt;

  // Every computed result, its destination and where the backend reads its
  // pointer. Every result is 4-byte elements (float32, top_k_indices int32).
  struct Slot {
    ResultBuffer* buffer;
    const char* field;  // outputs.<field>
    const std::vector<int64_t>* shape;
    const char* what;   // "the scores are", for CheckResult's message
    void** arg;
  };
  std::vector<Slot> slots;
  const auto add = [&](AttentionResult result, ResultBuffer& buffer, const char* field,
                       const std::vector<int64_t>& shape, const char* what, void** arg) {
    if (resolved.Wants(result)) slots.push_back({&buffer, field, &shape, what, arg});
  };
  add(AttentionResult::kScores, outputs->scores, "scores", resolved.scores_shape,
      "the scores are", reinterpret_cast<void**>(&args.scores));
  add(AttentionResult::kOutput, outputs->output, "output", resolved.output_shape,
      "the output is", reinterpret_cast<void**>(&args.output));
  add(AttentionResult::kLse, outputs->lse, "lse", resolved.lse_shape, "the lse are",
      reinterpret_cast<void**>(&args.lse));
  add(AttentionResult::kTopK, outputs->top_k_indices, "top_k_indices", resolved.top_k_shape,
      "the top_k_indices are", reinterpret_cast<void**>(&args.top_k_indices));
  add(AttentionResult::kTopK, outputs->top_k_probs, "top_k_probs", resolved.top_k_shape,
      "the top_k_probs are", reinterpret_cast<void**>(&args.top_k_probs));
  add(AttentionResult::kKeyMass, outputs->key_mass, "key_mass", resolved.key_mass_shape,
      "the key_mass are", reinterpret_cast<void**>(&args.key_mass));
  add(AttentionResult::kScoreRows, outputs->score_rows, "score_rows", resolved.score_rows_shape,
      "the score_rows are", reinterpret_cast<void**>(&args.score_rows));

  // Every destination present and fitting before any work.
  for (const Slot& slot : slots) {
    if (!slot.buffer->requested()) {
      return absl::InvalidArgumentError(
          absl::StrCat("AttentionScores needs an outputs.", slot.field, " buffer"));
    }
    ROPE_RETURN_IF_ERROR(CheckResult(*slot.buffer, *slot.shape, args.memory, slot.what));
  }
  ROPE_ASSIGN_OR_RETURN(const std::shared_ptr<const RopeTable> table,
                        TableFor(config, resolved.max_position, [&args](BlocksTouched& touched) {
                          touched.AddPositions(args.q_positions);
                          touched.AddPositions(args.k_positions);
                        }));
  for (const Slot& slot : slots) {
    try {
      *slot.arg = PlaceResult(*slot.buffer, *slot.shape);
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(absl::StrCat("out of memory allocating the ",
                                                       slot.field, " (",
                                                       Float32Bytes(*slot.shape), " bytes)"));
    }
  }
  return backend_->AttentionScores(*table, args);
}

absl::StatusOr<TableSlice> Engine::GetTable(const RopeConfig& requested, int64_t start,
                                           int64_t count, const Interrupt* interrupt) {
  ROPE_ASSIGN_OR_RETURN(const RopeConfig config, ExplicitConfig(requested, interrupt));
  ROPE_RETURN_IF_ERROR(ValidateConfig(config, limits_.max_len_cap));
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
  ROPE_ASSIGN_OR_RETURN(RopeConfig config, ExplicitConfig(requested, interrupt));
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
  out.key = MakeTableKey(config, /*max_position=*/0);
  ROPE_RETURN_IF_ERROR(CheckDerivedValues(out.key));
  out.inv_freq = ComputeInvFreq(out.key);
  out.attention_factor = ComputeAttentionFactor(out.key);
  out.softmax_scale = config.model_softmax_scale != 0
                          ? config.model_softmax_scale
                          : 1.0 / std::sqrt(static_cast<double>(config.head_dim));
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
