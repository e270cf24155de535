// Engine: the transport-free core of ropeserve. Validates requests, resolves
// tables through the TableCache, and dispatches to a Backend.
//
// Thread-safe: one Engine serves every concurrent call. No gRPC or protobuf
// type appears here; the service converts messages to these structs.
#ifndef ROPE_ENGINE_ENGINE_H_
#define ROPE_ENGINE_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/engine/backend.h"
#include "core/engine/hf_config_cache.h"
#include "core/engine/position_builder.h"
#include "core/engine/request_rows.h"
#include "core/engine/rope_config.h"
#include "core/engine/table_blocks_touched.h"
#include "core/engine/table_cache.h"
#include "core/engine/tensor.h"

namespace rope {

struct EngineLimits {
  uint32_t max_len_cap = 1u << 24;          // largest RopeConfig.max_len accepted
  int64_t table_cache_bytes = 1ll << 30;    // budget of the table cache
  // Most distinct table blocks (table_block.h: 4096 rows) one call's
  // positions may touch; 256 blocks are 1,048,576 rows.
  int64_t max_table_blocks_per_call = 256;
  int64_t max_elements_per_request = 1ll << 28;  // q + k + v (+ scores) elements
  int64_t max_hf_config_json_bytes = 4ll << 20;  // RopeConfig.hf_config_json
  int64_t hf_config_cache_bytes = 16ll << 20;    // parsed config.json texts kept
  int64_t hf_config_cache_entries = 1024;
};

// Rotate q (and optionally k), in place, into q_out (k_out), or into float8
// outputs. Every tensor of one call is in the same memory
// (TensorView::memory).
struct RotateParams {
  RopeConfig config;
  TensorView q;                      // [B,S,Hq,D] or [S,Hq,D] (B = 1)
  TensorView k;                      // same rank/B/S/D, its own head count; data == nullptr: absent
  // Where rotated q (k) go instead of q (k) itself, which is then only read:
  // q's byte size, never partly overlapping an input (the caller's
  // contract: core/proto_engine/tensor_resolver.h checks references).
  // data == nullptr: rotated in place.
  TensorView q_out;
  TensorView k_out;
  int64_t start_pos = 0;             // positions start_pos + s when `positions` is empty
  // S or B*S explicit positions (start_pos must then be 0). With
  // config.mrope: 3*S or 3*B*S, ordered [axis][b][s] (axes t, h, w); with
  // config.axial: n*S or n*B*S for its n axes, [axis][b][s].
  std::vector<int64_t> positions;
  // Instead of `positions` (the same layout): positions that need not be
  // integers; cos and sin are computed from them directly, in double.
  std::vector<double> fractional_positions;
  // Instead of either: the positions to build (position_builder.h), Qwen
  // form (hf_config_json empty: config.hf_config_json's) or grids.
  std::optional<PositionsRequest> build_positions;
  bool inverse = false;
  // Float8 outputs (FlashInfer's rope_quantize_fp8): with output_dtype a
  // float8 type, q and k are left as they are, and the rotated values times
  // q_output_scale (k_output_scale) are rounded to it and written to
  // *q_float8_out (*k_float8_out, when k is given), which the engine resizes
  // to one byte per element. Host memory only, never with q_out (k_out).
  // Unset or q's own dtype: as without it.
  std::optional<DType> output_dtype;
  double q_output_scale = 1.0;
  double k_output_scale = 1.0;
  std::string* q_float8_out = nullptr;
  std::string* k_float8_out = nullptr;
  // Optional: polled while the config is derived (hf_config_json), so a
  // cancelled or late call stops there. Must outlive the call.
  const Interrupt* interrupt = nullptr;
};

// What AttentionScores computes (the numbers of rope.v1.AttentionResult).
enum class AttentionResult : int {
  kScores = 1,     // [B,Hq,Sq,Sk]: probabilities with `softmax`, else logits
  kOutput = 2,     // [B,Sq,Hq,Dv]: P v (needs v)
  kLse = 3,        // [B,Hq,Sq]: natural log of each row's softmax denominator
  kTopK = 4,       // [B,Hq,Sq,top_k]: indices (int32) and probabilities
  kKeyMass = 5,    // [B,Hq,Sk]: each key's probability summed over queries
  kScoreRows = 6,  // [B,Hq,count,Sk]: rows of what kScores would hold
};
absl::string_view AttentionResultName(AttentionResult result);
// The mask rules (causal, window_left, window_right, chunk_size) and the
// logit transforms (softcap, alibi_slopes, sinks) AttentionScores applies,
// by their AttentionParams (and request) field names, in the order
// ResolveAttention reads them.
const std::vector<std::string>& AttentionMaskRules();
const std::vector<std::string>& AttentionLogitTransforms();

// AttentionScores: logits, masks and transforms as backend.h's AttentionArgs
// documents; everything in positions (explicit or start-based).
struct AttentionParams {
  RopeConfig config;
  ConstTensorView q;                 // [B,Sq,Hq,D] (rank 3: B = 1), unrotated
  ConstTensorView k;                 // [B,Sk,Hkv,D], unrotated
  ConstTensorView v;                 // [B,Sk,Hkv,Dv]; data == nullptr: absent
  int64_t q_start_pos = 0;
  int64_t k_start_pos = 0;
  // Instead of q_start_pos (k_start_pos): Sq or B*Sq values (times the
  // config's position axes, [axis][b][s], as RotateParams::positions), not
  // necessarily integers. Beside them q_start_pos (k_start_pos) only gives
  // the tokens' sequence indices for `causal`, which masks by sequence
  // index (key j hidden when k_start_pos + j > q_start_pos + i); without
  // causal a start position beside them is refused.
  std::vector<double> q_fractional_positions;
  std::vector<double> k_fractional_positions;
  bool causal = false;
  bool softmax = false;
  // 0 -> the model's softmax scale when config.hf_config_json gives one
  // (RopeConfig::model_softmax_scale), else 1/sqrt(D).
  double scale = 0;
  // Empty: SCORES, and OUTPUT when v is given (the reply of every client
  // that predates the list). Each result at most once.
  std::vector<AttentionResult> results;
  // Sliding window in positions (FlashAttention's window_size); unset: no
  // limit on that side. >= 0.
  std::optional<int64_t> window_left;
  std::optional<int64_t> window_right;
  int64_t chunk_size = 0;            // 0: none; else >= 1 (Llama 4's chunked attention)
  // Explicit positions, S or B*S values each (as RotateParams::positions);
  // the matching start_pos must then be 0. Masks and RoPE use them.
  std::vector<int64_t> q_positions;
  std::vector<int64_t> k_positions;
  double softcap = 0;                // 0: none; else finite > 0
  std::vector<float> sinks;          // empty or Hq finite values
  std::vector<float> alibi_slopes;   // empty or Hq finite values
  int64_t top_k = 0;                 // TOP_K: 1 .. Sk
  int64_t score_rows_start = 0;      // SCORE_ROWS: rows [start, start + count) of Sq
  int64_t score_rows_count = 0;      // 0: to the last query
  // Optional: lets the backend stop early (CANCELLED / DEADLINE_EXCEEDED)
  // when the caller has gone. Must outlive the call.
  const Interrupt* interrupt = nullptr;
};

// Where one result of a call goes (a float32 tensor whose shape the engine
// computes and sets in `shape`):
//  - `bytes` (a reply's bytes field): the engine resizes it to the result
//    and writes it there, so that a reply carries the result without a
//    copy (host memory; not for a call on device memory); or, when `bytes`
//    is null,
//  - `view`: memory the caller provides (a shared-memory region, host or
//    device, in the call's memory) of exactly the result's byte size:
//    INVALID_ARGUMENT naming `name`.byte_size otherwise, before any work.
// Neither: the result is not asked for.
struct ResultBuffer {
  std::string* bytes = nullptr;
  TensorView view;
  const char* name = "";  // the field a message names, e.g. "scores_out"
  std::vector<int64_t> shape;
  bool requested() const { return bytes != nullptr || view.data != nullptr; }
};

// Result buffers for AttentionScores (top_k_indices int32, the others
// float32). With AttentionParams::results empty, scores is required and
// output is required exactly when v is given; otherwise each requested
// result needs its buffer (TOP_K both of its buffers), and the others are
// left untouched.
struct AttentionOutputs {
  ResultBuffer scores;         // [B,Hq,Sq,Sk]
  ResultBuffer output;         // [B,Sq,Hq,Dv]
  ResultBuffer lse;            // [B,Hq,Sq]
  ResultBuffer top_k_indices;  // [B,Hq,Sq,top_k] int32
  ResultBuffer top_k_probs;    // [B,Hq,Sq,top_k]
  ResultBuffer key_mass;       // [B,Hq,Sk]
  ResultBuffer score_rows;     // [B,Hq,count,Sk]
};

// A slice of a table for GetTable: rows [start, start + count) of cos and sin.
struct TableSlice {
  std::shared_ptr<const RopeTable> table;
  int64_t start = 0;
  int64_t count = 0;
};

// What a config resolves to (ResolveConfig): the explicit config (its
// hf_config_json resolved, defaults filled in), and the key, inverse
// frequencies and attention factor of the table a request at position 0
// uses (for LongRoPE with max_position_embeddings and for dynamic NTK,
// longer requests use other tables; see scaling.h). A NoPE layer
// (config.no_rope) has no table: has_table is false and inv_freq empty.
//
// softmax_scale is what AttentionScores multiplies q . k by when its scale is
// 0: the model's (RopeConfig::model_softmax_scale, from hf_config_json), else
// head_dim^-0.5 (of the whole head for an MLA config).
struct ResolvedConfig {
  RopeConfig config;
  bool has_table = true;
  TableKey key;
  // Axial configs: the table of each axis (key is then the first axis').
  std::vector<TableKey> axis_keys;
  std::vector<double> inv_freq;
  double attention_factor = 1;
  double softmax_scale = 0;
  // With a config.json: the layout its model_type's transformers code
  // pairs features in, its max_position_embeddings (0: none), the layer
  // type (or rope group) the rope is for, and a DeepSeek MLA head's whole
  // width (0 unless config describes the rope part of one).
  std::optional<Layout> hf_layout;
  uint32_t max_position_embeddings = 0;
  std::string layer_type;
  uint32_t whole_head_dim = 0;
};

class Engine {
 public:
  // Axial and fractional-position calls on a backend that computes on this
  // host rotate at most this many tokens at a time, each chunk by rows
  // made just before (2 MiB at rotary_dim 128: they stay in cache).
  static constexpr int64_t kRequestRowsChunk = 4096;

  Engine(std::unique_ptr<Backend> backend, EngineLimits limits);
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // OK: q (and k) hold the rotated values, in their own dtype.
  // INVALID_ARGUMENT / OUT_OF_RANGE / RESOURCE_EXHAUSTED naming the field and
  // value on bad input; q and k are untouched then.
  absl::Status Rotate(const RotateParams& params);

  // OK: outputs filled as documented on AttentionOutputs. INVALID_ARGUMENT
  // / OUT_OF_RANGE naming the field and value on bad input;
  // RESOURCE_EXHAUSTED when the requested results (and inputs) exceed
  // max_elements_per_request (for SCORES, the message says that OUTPUT and
  // LSE need no Sq x Sk memory) or memory runs out.
  absl::Status AttentionScores(const AttentionParams& params, AttentionOutputs* outputs);

  // Validates `config` and returns its table (building it if needed) with the
  // requested row range checked against max_len. count == 0 means up to the
  // end of the table. For dynamic NTK the sequence length is start + count.
  // `interrupt` (may be null) stops the parse of an hf_config_json.
  absl::StatusOr<TableSlice> GetTable(const RopeConfig& config, int64_t start, int64_t count,
                                      const Interrupt* interrupt = nullptr);

  // Resolves and validates `config` without building a table; `interrupt`
  // as GetTable's.
  absl::StatusOr<ResolvedConfig> ResolveConfig(const RopeConfig& config,
                                               const Interrupt* interrupt = nullptr);

  // The positions `request` describes (position_builder.h), at most
  // max_values (and limits.max_elements_per_request) values; its
  // hf_config_json is held to limits.max_hf_config_json_bytes
  // (RESOURCE_EXHAUSTED); `interrupt` (may be null) stops its parse.
  absl::StatusOr<BuiltPositions> BuildPositions(const PositionsRequest& request,
                                                int64_t max_values,
                                                const Interrupt* interrupt = nullptr);

  // The explicit config `config` stands for: itself when hf_config_json is
  // empty, else the JSON's derivation (hf_config.h; cached by content) with
  // the request's max_len and layout. Not yet validated against limits.
  // INVALID_ARGUMENT for an unusable JSON or a conflicting field;
  // RESOURCE_EXHAUSTED for a JSON over limits.max_hf_config_json_bytes;
  // CANCELLED or DEADLINE_EXCEEDED when `interrupt` (may be null) stops the
  // parse.
  absl::StatusOr<RopeConfig> ExplicitConfig(const RopeConfig& config,
                                            const Interrupt* interrupt = nullptr);

  // The backend's device memory for `field` (e.g. "cuda_ipc_handle"), or
  // FAILED_PRECONDITION naming it on a backend without any (the CPU's):
  // the one place where device memory is refused.
  absl::StatusOr<DeviceMemory*> DeviceMemoryFor(absl::string_view field);

  const EngineLimits& limits() const { return limits_; }
  BackendInfo backend_info() const { return backend_->info(); }
  // Backend::CallsNeverWait of this engine's backend.
  bool backend_calls_never_wait() const { return backend_->CallsNeverWait(); }
  TableCacheStats cache_stats() const { return cache_.stats(); }
  HfConfigCache::Stats hf_config_cache_stats() const { return hf_configs_.stats(); }

 private:
  // OK for host memory, and for device memory of the backend's device;
  // FAILED_PRECONDITION (no device memory) or INVALID_ARGUMENT (another
  // device) naming `field` otherwise.
  absl::Status CheckMemory(const TensorMemory& memory, absl::string_view field);

  // The rows of the table for a validated config and the largest position
  // the request uses (dynamic NTK's base depends on it) that `touch` adds:
  // the blocks they fall in, built if missing, held by the returned view.
  absl::StatusOr<std::shared_ptr<const RopeTable>> TableFor(
      const RopeConfig& config, int64_t max_position,
      const std::function<void(BlocksTouched&)>& touch);
  // The blocks of `key`'s table that `touch` adds, built if missing.
  absl::StatusOr<std::shared_ptr<const RopeTable>> BlocksOf(
      const TableKey& key, const std::function<void(BlocksTouched&)>& touch);
  // Axial configs: the view of each axis' table holding the rows that
  // touch(axis, blocks) adds.
  absl::StatusOr<std::vector<std::shared_ptr<const RopeTable>>> AxisTables(
      const RopeConfig& config, const std::function<void(int, BlocksTouched&)>& touch);
  // Rotate with build_positions: the positions built, then Rotate.
  absl::Status RotateBuilt(const RotateParams& params);
  // What exact rows for fractional positions are computed from: the
  // config's inverse frequencies (at the request's largest position, for
  // the variants that depend on it), its attention factor and the axis of
  // each pair.
  struct ExactLadder {
    RequestTableInfo info;
    std::vector<uint8_t> axis_of_pair;
  };
  ExactLadder FractionalLadder(const RopeConfig& config, int64_t max_position);
  // A per-request table of exact rows for fractional positions (of
  // `rows` rows, PositionAxes() values per row at values[axis * rows + row]).
  std::shared_ptr<const RopeTable> FractionalRows(const RopeConfig& config, int64_t max_position,
                                                  const double* values, int64_t rows);
  // Rotates `args` (positions unset) by a per-request table of `rows` rows
  // (S shared by every batch row, or B*S) that fill(first, count, cos, sin)
  // makes, rows [first, first + count) at a time. On a backend that
  // computes on this host (CallsNeverWait) tokens are rotated in chunks of
  // kRequestRowsChunk, each by its rows made just before.
  using RowFill = std::function<void(int64_t first, int64_t count, float* cos, float* sin)>;
  absl::Status RotateRequestRows(const RotateArgs& args, int64_t rows,
                                 const RequestTableInfo& info, const RowFill& fill);
  TableBlock::ParallelFill ParallelFill();

  // The fewest rows one thread of a parallel fill makes.
  static constexpr int64_t kMinParallelFillRows = 1024;

  // ExplicitConfig, and the config.json derivation it came from (null
  // without hf_config_json).
  absl::StatusOr<RopeConfig> ExplicitConfig(const RopeConfig& config, const Interrupt* interrupt,
                                            std::shared_ptr<const HfConfigCache::Result>* derived);

  std::unique_ptr<Backend> backend_;
  const EngineLimits limits_;
  TableCache cache_;
  HfConfigCache hf_configs_;
};

}  // namespace rope

#endif  // ROPE_ENGINE_ENGINE_H_
