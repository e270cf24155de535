#include "core/engine/engine.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <new>
#include <string>
#include <vector>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "core/engine/hf_config.h"
#include "core/engine/table_blocks_touched.h"
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

absl::StatusOr<RopeConfig> Engine::ExplicitConfig(const RopeConfig& config) {
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
      hf_configs_.Get(config.hf_config_json, config.hf_layer_type);
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
  BlocksTouched touched(TableBlockShift(key), limits_.max_table_blocks_per_call);
  touch(touched);
  ROPE_ASSIGN_OR_RETURN(const std::vector<int64_t> blocks, touched.Sorted());
  return cache_.Get(key, blocks);
}

absl::Status Engine::Rotate(const RotateParams& params) {
  ROPE_ASSIGN_OR_RETURN(const RopeConfig config, ExplicitConfig(params.config));
  ROPE_ASSIGN_OR_RETURN(ResolvedRotate resolved, ResolveRotate(params, config, limits_));
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

namespace {

// One result's destination for AttentionScores: its buffer field name (for
// messages), host string or device range, and where its shape goes.
struct ResultSlot {
  AttentionResult result;
  const char* buffer;  // "scores", "lse", ... (outputs.<buffer>, <buffer>_out)
  std::string* host;
  void* device;
  uint64_t device_bytes;
  std::vector<int64_t>* shape_out;
  const std::vector<int64_t>* shape;
  size_t element_bytes;
  void** arg;  // where the backend reads the pointer
};

uint64_t Bytes(const std::vector<int64_t>& shape, size_t element_bytes) {
  uint64_t n = element_bytes;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

}  // namespace

absl::Status Engine::AttentionScores(const AttentionParams& params, AttentionOutputs* outputs) {
  if (outputs == nullptr) {
    return absl::InvalidArgumentError("AttentionScores needs an outputs.scores buffer");
  }
  ROPE_ASSIGN_OR_RETURN(const RopeConfig config, ExplicitConfig(params.config));
  ROPE_ASSIGN_OR_RETURN(ResolvedAttention resolved, ResolveAttention(params, config, limits_));
  AttentionArgs& args = resolved.args;
  args.interrupt = params.interrupt;
  args.on_device = params.on_device;

  // Every computed result and its destination; shapes are already checked
  // against the element limit, so no byte size overflows.
  std::vector<ResultSlot> slots;
  auto add = [&](AttentionResult result, const char* buffer, std::string* host, void* device,
                 uint64_t device_bytes, std::vector<int64_t>* shape_out,
                 const std::vector<int64_t>& shape, size_t element_bytes, void** arg) {
    if (resolved.Wants(result)) {
      slots.push_back({result, buffer, host, device, device_bytes, shape_out, &shape,
                       element_bytes, arg});
    }
  };
  add(AttentionResult::kScores, "scores", outputs->scores, outputs->device_scores,
      outputs->device_scores_bytes, &outputs->scores_shape, resolved.scores_shape, sizeof(float),
      reinterpret_cast<void**>(&args.scores));
  add(AttentionResult::kOutput, "output", outputs->output, outputs->device_output,
      outputs->device_output_bytes, &outputs->output_shape, resolved.output_shape, sizeof(float),
      reinterpret_cast<void**>(&args.output));
  const auto add_buffer = [&](AttentionResult result, const char* name, AttentionResultBuffer& b,
                              const std::vector<int64_t>& shape, size_t element_bytes,
                              void** arg) {
    add(result, name, b.bytes, b.device, b.device_bytes, &b.shape, shape, element_bytes, arg);
  };
  add_buffer(AttentionResult::kLse, "lse", outputs->lse, resolved.lse_shape, sizeof(float),
             reinterpret_cast<void**>(&args.lse));
  add_buffer(AttentionResult::kTopK, "top_k_indices", outputs->top_k_indices,
             resolved.top_k_shape, sizeof(int32_t), reinterpret_cast<void**>(&args.top_k_indices));
  add_buffer(AttentionResult::kTopK, "top_k_probs", outputs->top_k_probs, resolved.top_k_shape,
             sizeof(float), reinterpret_cast<void**>(&args.top_k_probs));
  add_buffer(AttentionResult::kKeyMass, "key_mass", outputs->key_mass, resolved.key_mass_shape,
             sizeof(float), reinterpret_cast<void**>(&args.key_mass));
  add_buffer(AttentionResult::kScoreRows, "score_rows", outputs->score_rows,
             resolved.score_rows_shape, sizeof(float),
             reinterpret_cast<void**>(&args.score_rows));

  // Every destination present (and, on the device, of exactly the result's
  // size) before any work.
  for (const ResultSlot& slot : slots) {
    const uint64_t bytes = Bytes(*slot.shape, slot.element_bytes);
    if (args.on_device) {
      if (slot.device == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            AttentionResultName(slot.result), " is computed on the device but ", slot.buffer,
            "_out is not set"));
      }
      if (slot.device_bytes != bytes) {
        return absl::InvalidArgumentError(absl::StrCat(slot.buffer, "_out.byte_size is ",
                                                       slot.device_bytes, ": the ", slot.buffer,
                                                       slot.result == AttentionResult::kOutput
                                                           ? " is "
                                                           : " are ",
                                                       bytes, " bytes"));
      }
    } else if (slot.host == nullptr) {
      if (params.results.empty() && slot.result == AttentionResult::kOutput) {
        return absl::InvalidArgumentError("v is given but outputs.output is null");
      }
      return absl::InvalidArgumentError(
          absl::StrCat("AttentionScores needs an outputs.", slot.buffer, " buffer"));
    }
  }
  ROPE_ASSIGN_OR_RETURN(const std::shared_ptr<const RopeTable> table,
                        TableFor(config, resolved.max_position, [&args](BlocksTouched& touched) {
                          touched.AddPositions(args.q_positions);
                          touched.AddPositions(args.k_positions);
                        }));

  for (const ResultSlot& slot : slots) {
    *slot.shape_out = *slot.shape;
    if (args.on_device) {
      *slot.arg = slot.device;
      continue;
    }
    try {
      slot.host->resize(Bytes(*slot.shape, slot.element_bytes));
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "out of memory allocating the ", slot.buffer, " (",
          Bytes(*slot.shape, slot.element_bytes), " bytes)"));
    }
    *slot.arg = slot.host->data();
  }
  return backend_->AttentionScores(*table, args);
}

absl::StatusOr<TableSlice> Engine::GetTable(const RopeConfig& requested, int64_t start,
                                           int64_t count) {
  ROPE_ASSIGN_OR_RETURN(const RopeConfig config, ExplicitConfig(requested));
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

absl::StatusOr<ResolvedConfig> Engine::ResolveConfig(const RopeConfig& requested) {
  ROPE_ASSIGN_OR_RETURN(RopeConfig config, ExplicitConfig(requested));
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
