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

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "core/engine/attention_float32_copies.h"
#include "core/engine/hf_config.h"
#include "core/engine/request_rows.h"
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

// What a per-request table of an axial config reports: the axes' inverse
// frequencies one after the other (interpolation included), factor 1.
RequestTableInfo AxialInfo(const RopeConfig& config) {
  RequestTableInfo info;
  info.key.theta = config.EffectiveTheta();
  info.key.rotary_dim = config.EffectiveRotaryDim();
  info.key.max_len = config.max_len;
  for (int a = 0; a < config.axial.count(); ++a) {
    const std::vector<double> axis = ComputeInvFreq(AxisTableKey(config, a));
    info.inv_freq.insert(info.inv_freq.end(), axis.begin(), axis.end());
  }
  return info;
}

std::vector<const RopeTable*> Pointers(const std::vector<std::shared_ptr<const RopeTable>>& all) {
  std::vector<const RopeTable*> out;
  for (const auto& table : all) out.push_back(table.get());
  return out;
}

// Token rows for a per-request table of `rows` rows: token (b, s) reads row
// s when rows == seq, else row b*seq + s (`storage` keeps the list).
math::PositionSpec TokenRows(int64_t rows, int64_t seq, int64_t first_row,
                             std::vector<int64_t>* storage) {
  math::PositionSpec spec;
  spec.seq = seq;
  if (rows == seq && first_row == 0) return spec;  // start_pos 0: row s
  storage->resize(rows);
  std::iota(storage->begin(), storage->end(), first_row);
  spec.explicit_positions = storage->data();
  spec.count = rows;
  return spec;
}

absl::Status OutOfMemory(const char* what, int64_t rows) {
  return absl::ResourceExhaustedError(
      absl::StrCat("out of memory assembling the ", what, " rows of ", rows, " tokens"));
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

TableBlock::ParallelFill Engine::ParallelFill() {
  return [b = backend_.get()](int64_t rows, const std::function<void(int64_t, int64_t)>& fill) {
    b->ParallelRows(rows, fill);
  };
}

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
  if (config.axial.enabled()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.axial (", DescribeAxial(config.axial),
        ") is set with config.hf_config_json: a config.json gives no axial rope; send one of "
        "them"));
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
  return BlocksOf(MakeTableKey(config, max_position), touch);
}

absl::StatusOr<std::shared_ptr<const RopeTable>> Engine::BlocksOf(
    const TableKey& key, const std::function<void(BlocksTouched&)>& touch) {
  ROPE_RETURN_IF_ERROR(CheckDerivedValues(key));
  BlocksTouched touched(TableBlockShift(key), limits_.max_table_blocks_per_call);
  touch(touched);
  ROPE_ASSIGN_OR_RETURN(const std::vector<int64_t> blocks, touched.Sorted());
  return cache_.Get(key, blocks);
}

absl::StatusOr<std::vector<std::shared_ptr<const RopeTable>>> Engine::AxisTables(
    const RopeConfig& config, const std::function<void(int, BlocksTouched&)>& touch) {
  // The call holds every axis' blocks at once: together they must fit the
  // budget, as one table's blocks must (TableCache::Get).
  std::vector<TableKey> keys;
  std::vector<std::vector<int64_t>> blocks;
  int64_t bytes = 0;
  for (int a = 0; a < config.axial.count(); ++a) {
    keys.push_back(AxisTableKey(config, a));
    ROPE_RETURN_IF_ERROR(CheckDerivedValues(keys.back()));
    BlocksTouched touched(TableBlockShift(keys.back()), limits_.max_table_blocks_per_call);
    touch(a, touched);
    ROPE_ASSIGN_OR_RETURN(std::vector<int64_t> sorted, touched.Sorted());
    for (int64_t b : sorted) bytes += TableBlockBytes(keys.back(), b);
    blocks.push_back(std::move(sorted));
  }
  if (bytes > limits_.table_cache_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the axes' tables (", DescribeAxial(config.axial), "): the blocks of rows this call "
        "touches need ", bytes, " bytes together: over the table-cache budget of ",
        limits_.table_cache_bytes, " bytes"));
  }
  std::vector<std::shared_ptr<const RopeTable>> tables;
  for (size_t a = 0; a < keys.size(); ++a) {
    ROPE_ASSIGN_OR_RETURN(std::shared_ptr<const RopeTable> table, cache_.Get(keys[a], blocks[a]));
    tables.push_back(std::move(table));
  }
  return tables;
}

Engine::ExactLadder Engine::FractionalLadder(const RopeConfig& config, int64_t max_position) {
  ExactLadder ladder;
  const int half = static_cast<int>(config.EffectiveRotaryDim() / 2);
  if (config.axial.enabled()) {
    ladder.info = AxialInfo(config);
    ladder.axis_of_pair = AxialPairAxes(config.axial);
  } else {
    ladder.info.key = MakeTableKey(config, max_position);
    ladder.info.inv_freq = ComputeInvFreq(ladder.info.key);
    ladder.info.attention_factor = ComputeAttentionFactor(ladder.info.key);
    ladder.axis_of_pair = MropeFrequencyAxes(config.mrope, half);  // all 0 without M-RoPE
  }
  return ladder;
}

std::shared_ptr<const RopeTable> Engine::FractionalRows(const RopeConfig& config,
                                                        int64_t max_position,
                                                        const double* values, int64_t rows) {
  const ExactLadder ladder = FractionalLadder(config, max_position);
  std::vector<const double*> axes;
  for (int a = 0; a < config.PositionAxes(); ++a) axes.push_back(values + a * rows);
  return ExactRows(ladder.info, ladder.axis_of_pair, rows, axes, ParallelFill());
}

absl::Status Engine::RotateRequestRows(const RotateArgs& args, int64_t rows,
                                       const RequestTableInfo& info, const RowFill& fill) {
  const int half = static_cast<int>(info.key.rotary_dim / 2);
  const TableBlock::ParallelFill parallel = ParallelFill();
  // Rows [first, first + count) into cos / sin, on the backend's threads
  // when there are enough of them.
  const auto fill_rows = [&](float* cos, float* sin, int64_t first, int64_t count) {
    if (count < 2 * kMinParallelFillRows) {
      fill(first, count, cos, sin);
      return;
    }
    parallel(count, [&](int64_t begin, int64_t end) {
      fill(first + begin, end - begin, cos + begin * half, sin + begin * half);
    });
  };
  try {
    if (!backend_->CallsNeverWait() || rows <= kRequestRowsChunk) {
      const EmptyRows all = MakeEmptyRows(info, rows);
      fill_rows(all.cos, all.sin, 0, rows);
      RotateArgs whole = args;
      std::vector<int64_t> token_rows;
      whole.positions = TokenRows(rows, args.seq, 0, &token_rows);
      return backend_->Rotate(*all.table, whole);
    }
    // A backend computing on this host's threads rotates the tokens in
    // chunks, each chunk's rows made into one buffer that every chunk
    // reuses: the rows are still in cache when the kernels read them, and a
    // call of any length holds kRequestRowsChunk rows (a Wan 2.1 latent's
    // 32760 rows would be 16 MiB to allocate, fault in and stream through).
    const EmptyRows chunk = MakeEmptyRows(info, kRequestRowsChunk);
    const bool shared = rows == args.seq;  // token (b, s) reads row s, else row b*S + s
    const int64_t tokens = args.batch * args.seq;
    const int64_t elem = static_cast<int64_t>(DTypeSize(args.dtype));
    for (int64_t t0 = 0; t0 < tokens;) {
      int64_t count = std::min(kRequestRowsChunk, tokens - t0);
      if (shared) count = std::min(count, args.seq - t0 % args.seq);  // within one batch row
      fill_rows(chunk.cos, chunk.sin, shared ? t0 % args.seq : t0, count);
      // Tokens [t0, t0 + count) of q [B, S, H, D] (and k) are contiguous:
      // one batch row of `count` tokens reading rows 0 .. count - 1.
      RotateArgs part = args;
      part.batch = 1;
      part.seq = count;
      const int64_t q_offset = t0 * args.q_heads * args.head_dim * elem;
      part.q = static_cast<char*>(args.q) + q_offset;
      if (args.q_source != nullptr) part.q_source = static_cast<const char*>(args.q_source) + q_offset;
      if (args.k != nullptr) {
        const int64_t k_offset = t0 * args.k_heads * args.head_dim * elem;
        part.k = static_cast<char*>(args.k) + k_offset;
        if (args.k_source != nullptr) {
          part.k_source = static_cast<const char*>(args.k_source) + k_offset;
        }
      }
      // Float8 outputs: one byte per element, in q's (k's) token order.
      if (args.q_out != nullptr) {
        part.q_out = static_cast<char*>(args.q_out) + t0 * args.q_heads * args.head_dim;
      }
      if (args.k_out != nullptr) {
        part.k_out = static_cast<char*>(args.k_out) + t0 * args.k_heads * args.head_dim;
      }
      part.positions = math::PositionSpec{};
      part.positions.seq = count;
      ROPE_RETURN_IF_ERROR(backend_->Rotate(*chunk.table, part));
      t0 += count;
    }
    return absl::OkStatus();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "out of memory assembling the per-request table rows of ", rows, " tokens"));
  }
}

absl::Status Engine::Rotate(const RotateParams& params) {
  if (params.build_positions.has_value()) return RotateBuilt(params);
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
  RotateArgs args = resolved.args;
  std::vector<int64_t> token_rows;

  if (resolved.fractional.values != nullptr) {
    // Rows computed from the positions themselves: token r reads row r.
    const int64_t rows = resolved.fractional.rows;
    const ExactLadder ladder = FractionalLadder(config, resolved.max_position);
    std::vector<const double*> axes;
    for (int a = 0; a < config.PositionAxes(); ++a) {
      axes.push_back(resolved.fractional.values + a * rows);
    }
    return RotateRequestRows(args, rows, ladder.info,
                             [&](int64_t first, int64_t count, float* cos, float* sin) {
                               FillExactRows(ladder.info, ladder.axis_of_pair, axes, first, count,
                                             cos, sin);
                             });
  }

  if (config.axial.enabled()) {
    // Each axis' rows from its own table, joined per token: token r reads
    // row r (as M-RoPE below). Start positions put every axis at
    // start_pos + s.
    std::vector<int64_t> start_rows;
    int64_t rows = resolved.axis_rows;
    std::vector<const int64_t*> axes;
    if (resolved.axis_positions != nullptr) {
      for (int a = 0; a < config.axial.count(); ++a) {
        axes.push_back(resolved.axis_positions + a * rows);
      }
    } else {
      rows = args.seq;
      start_rows.resize(rows);
      std::iota(start_rows.begin(), start_rows.end(), args.positions.start_pos);
      axes.assign(config.axial.count(), start_rows.data());
    }
    ROPE_ASSIGN_OR_RETURN(
        const std::vector<std::shared_ptr<const RopeTable>> tables,
        AxisTables(config, [&](int axis, BlocksTouched& touched) {
          touched.AddList(axes[axis], rows);
        }));
    const std::vector<const RopeTable*> axis_tables = Pointers(tables);
    return RotateRequestRows(args, rows, AxialInfo(config),
                             [&](int64_t first, int64_t count, float* cos, float* sin) {
                               FillGatheredRows(axis_tables, axes, first, count, cos, sin);
                             });
  }

  ROPE_ASSIGN_OR_RETURN(
      const std::shared_ptr<const RopeTable> table,
      TableFor(config, resolved.max_position, [&resolved](BlocksTouched& touched) {
        if (resolved.axis_positions != nullptr) {
          touched.AddList(resolved.axis_positions, kMropeAxes * resolved.axis_rows);
        } else {
          touched.AddPositions(resolved.args.positions);
        }
      }));
  if (resolved.axis_positions == nullptr) return backend_->Rotate(*table, args);

  // M-RoPE: a per-request table whose row r holds token r's frequencies,
  // each from its axis' position, so that the backend rotates token r by
  // row r as it would with plain RoPE (M-RoPE in rope.proto, docs/models.md).
  const int64_t rows = resolved.axis_rows;
  const std::array<const int64_t*, kMropeAxes> axes = {
      resolved.axis_positions, resolved.axis_positions + rows,
      resolved.axis_positions + 2 * rows};
  std::shared_ptr<const RopeTable> gathered;
  try {
    gathered = RopeTable::Gather(*table, rows, axes,
                                 MropeFrequencyAxes(config.mrope, table->half()));
    args.positions = TokenRows(rows, args.seq, 0, &token_rows);
  } catch (const std::bad_alloc&) {
    return OutOfMemory("M-RoPE", rows);
  }
  return backend_->Rotate(*gathered, args);
}

absl::Status Engine::RotateBuilt(const RotateParams& params) {
  const PositionsRequest& build = *params.build_positions;
  if (!params.positions.empty() || !params.fractional_positions.empty() ||
      params.start_pos != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "build_positions is set with ",
        !params.positions.empty()              ? "positions"
        : !params.fractional_positions.empty() ? "fractional_positions"
                                               : "start_pos",
        ": give the positions or what to build them from, not both"));
  }
  // The positions must fit q: at most kMaxAxialAxes per token of q, so
  // that a small request cannot make the server build more than that.
  const std::vector<int64_t>& shape = params.q.shape;
  const int64_t tokens = shape.size() == 4 && shape[0] > 0 && shape[1] > 0 &&
                                 shape[0] <= limits_.max_elements_per_request / shape[1]
                             ? shape[0] * shape[1]
                         : shape.size() == 3 && shape[0] > 0 ? shape[0]
                                                             : 0;
  const int64_t max_values =
      std::min(limits_.max_elements_per_request, tokens) * kMaxAxialAxes;
  RotateParams built = params;
  built.build_positions.reset();
  BuiltPositions positions;
  if (build.grids.empty() && build.hf_config_json.empty()) {
    // The Qwen form reads the token ids from the model's config.json: the
    // request's own, when build_positions carries none.
    PositionsRequest with_config = build;
    with_config.hf_config_json = params.config.hf_config_json;
    ROPE_ASSIGN_OR_RETURN(positions, BuildPositions(with_config, max_values, params.interrupt));
  } else {
    ROPE_ASSIGN_OR_RETURN(positions, BuildPositions(build, max_values, params.interrupt));
  }
  built.positions = std::move(positions.positions);
  built.fractional_positions = std::move(positions.fractional_positions);
  absl::Status status = Rotate(built);
  if (!status.ok() && (absl::StartsWith(status.message(), "positions has") ||
                       absl::StartsWith(status.message(), "fractional_positions has"))) {
    // Say where the list came from: the request sent none.
    return absl::Status(status.code(),
                        absl::StrCat("build_positions built ", status.message()));
  }
  return status;
}

absl::StatusOr<BuiltPositions> Engine::BuildPositions(const PositionsRequest& request,
                                                      int64_t max_values,
                                                      const Interrupt* interrupt) {
  const int64_t json_bytes = static_cast<int64_t>(request.hf_config_json.size());
  if (json_bytes > limits_.max_hf_config_json_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "hf_config_json is ", json_bytes, " bytes: over the server's limit of ",
        limits_.max_hf_config_json_bytes, " bytes"));
  }
  return rope::BuildPositions(request, std::min(max_values, limits_.max_elements_per_request),
                              interrupt);
}

absl::Status Engine::AttentionScores(const AttentionParams& params, AttentionOutputs* outputs) {
  if (outputs == nullptr || (params.results.empty() && !outputs->scores.requested())) {
    return absl::InvalidArgumentError("AttentionScores needs an outputs.scores buffer");
  }
  ROPE_ASSIGN_OR_RETURN(RopeConfig config, ExplicitConfig(params.config, params.interrupt));
  config = ForTensorWidth(config, Width(params.q.shape));
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
  std::shared_ptr<const RopeTable> table;
  std::vector<int64_t> q_rows, k_rows;  // explicit row lists of a per-request table
  AttentionFloat32Copies rotated;       // a masked call over fractional positions
  std::string scaled_q;  // a NoPE layer's tuned queries
  if (config.no_rope.enabled) {
    args.rotary_dim = 0;
    args.rotary_offset = 0;
    table = NoRotaryTable(config);
    if (config.no_rope.tuned()) {
      if (resolved.q_fractional.values != nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "config.no_rope has attention temperature tuning (floor_scale ",
            config.no_rope.floor_scale, ") with q_fractional_positions: the tuning floors "
            "integer positions, as Llama 4's cache positions are; send q_start_pos"));
      }
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
  } else if (resolved.q_fractional.values != nullptr || resolved.k_fractional.values != nullptr) {
    // One per-request table: q's rows, then k's, computed from the
    // positions themselves (start-based ones as start + s on every axis).
    const int axes = config.PositionAxes();
    const auto rows_of = [](const FractionalPositions& f, int64_t seq) {
      return f.values != nullptr ? f.rows : seq;
    };
    const int64_t q_count = rows_of(resolved.q_fractional, args.q_seq);
    const int64_t k_count = rows_of(resolved.k_fractional, args.k_seq);
    const int64_t rows = q_count + k_count;
    // The tokens' sequence indices (start + s), which the masks compare.
    const math::PositionSpec q_index = args.q_positions, k_index = args.k_positions;
    double max = 0;
    try {
      std::vector<double> values(axes * rows);
      const auto fill = [&](const FractionalPositions& f, int64_t start, int64_t count,
                            int64_t first_row) {
        for (int a = 0; a < axes; ++a) {
          for (int64_t r = 0; r < count; ++r) {
            const double p = f.values != nullptr ? f.values[a * count + r]
                                                 : static_cast<double>(start + r);
            values[a * rows + first_row + r] = p;
            max = std::max(max, p);
          }
        }
      };
      fill(resolved.q_fractional, args.q_positions.start_pos, q_count, 0);
      fill(resolved.k_fractional, args.k_positions.start_pos, k_count, q_count);
      table = FractionalRows(config, static_cast<int64_t>(std::ceil(max)), values.data(), rows);
      args.q_positions = TokenRows(q_count, args.q_seq, 0, &q_rows);
      args.k_positions = TokenRows(k_count, args.k_seq, q_count, &k_rows);
    } catch (const std::bad_alloc&) {
      return OutOfMemory("fractional-position", rows);
    }
    // Every rule that compares tokens' places (masks, ALiBi) must see the
    // sequence indices, not the table rows.
    if (args.mask.Any() || args.alibi_slopes != nullptr) {
      ROPE_RETURN_IF_ERROR(
          RotateIntoFloat32Copies(*backend_, *table, q_index, k_index, &args, &rotated));
    }
  } else if (config.axial.enabled()) {
    // Every axis at the start positions: the axes' rows joined, indexed by
    // position, so the causal mask compares positions as for any table.
    const std::vector<std::pair<int64_t, int64_t>> ranges = {
        {args.q_positions.start_pos, args.q_seq}, {args.k_positions.start_pos, args.k_seq}};
    ROPE_ASSIGN_OR_RETURN(const std::vector<std::shared_ptr<const RopeTable>> tables,
                          AxisTables(config, [&ranges](int, BlocksTouched& touched) {
                            for (const auto& [first, count] : ranges) {
                              touched.AddRange(first, count);
                            }
                          }));
    try {
      table = ConcatAxes(AxialInfo(config), Pointers(tables), ranges);
    } catch (const std::bad_alloc&) {
      return OutOfMemory("axial", args.q_seq + args.k_seq);
    }
  } else {
    ROPE_ASSIGN_OR_RETURN(table,
                          TableFor(config, resolved.max_position, [&args](BlocksTouched& touched) {
                            touched.AddPositions(args.q_positions);
                            touched.AddPositions(args.k_positions);
                          }));
  }

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
  std::shared_ptr<const RopeTable> table;
  if (config.axial.enabled()) {
    // Every axis at each row's position: the axes' rows joined.
    ROPE_ASSIGN_OR_RETURN(const std::vector<std::shared_ptr<const RopeTable>> tables,
                          AxisTables(config, [start, count](int, BlocksTouched& touched) {
                            touched.AddRange(start, count);
                          }));
    try {
      table = ConcatAxes(AxialInfo(config), Pointers(tables), {{start, count}});
    } catch (const std::bad_alloc&) {
      return OutOfMemory("axial", count);
    }
  } else {
    ROPE_ASSIGN_OR_RETURN(table,
                          TableFor(config, start + count - 1, [start, count](BlocksTouched& touched) {
                            touched.AddRange(start, count);
                          }));
  }
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
  if (config.no_rope.enabled) {
    out.key = MakeTableKey(config, /*max_position=*/0);
    out.has_table = false;
  } else if (config.axial.enabled()) {
    for (int a = 0; a < config.axial.count(); ++a) {
      out.axis_keys.push_back(AxisTableKey(config, a));
      ROPE_RETURN_IF_ERROR(CheckDerivedValues(out.axis_keys.back()));
    }
    out.key = out.axis_keys.front();
    out.inv_freq = AxialInfo(config).inv_freq;
    // Each axis' defaults spelled out, like the config's.
    for (AxialAxis& axis : config.axial.axes) {
      axis = WithAxisDefaults(axis, config.EffectiveTheta());
    }
  } else {
    out.key = MakeTableKey(config, /*max_position=*/0);
    ROPE_RETURN_IF_ERROR(CheckDerivedValues(out.key));
    out.inv_freq = ComputeInvFreq(out.key);
    out.attention_factor = ComputeAttentionFactor(out.key);
  }
  // The model's scale, else head_dim^-0.5 of the whole head (an MLA
  // config's head_dim is its rope part).
  out.softmax_scale =
      config.model_softmax_scale != 0
          ? config.model_softmax_scale
          : 1.0 / std::sqrt(static_cast<double>(out.whole_head_dim != 0 ? out.whole_head_dim
                                                                         : config.head_dim));
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
