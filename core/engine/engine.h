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
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/engine/backend.h"
#include "core/engine/hf_config_cache.h"
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

// Rotate q (and optionally k) in place.
struct RotateParams {
  RopeConfig config;
  TensorView q;                      // [B,S,Hq,D] or [S,Hq,D] (B = 1)
  TensorView k;                      // same rank/B/S/D, its own head count; data == nullptr: absent
  int64_t start_pos = 0;             // positions start_pos + s when `positions` is empty
  // S or B*S explicit positions (start_pos must then be 0). With
  // config.mrope: 3*S or 3*B*S, ordered [axis][b][s] (axes t, h, w).
  std::vector<int64_t> positions;
  bool inverse = false;
  // q.data and k.data are device memory the backend opened
  // (OpenCudaIpcMemory), not host memory; see RotateArgs::on_device.
  bool on_device = false;
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

// AttentionScores: logits, masks and transforms as backend.h's AttentionArgs
// documents; everything in positions (explicit or start-based).
struct AttentionParams {
  RopeConfig config;
  ConstTensorView q;                 // [B,Sq,Hq,D] (rank 3: B = 1), unrotated
  ConstTensorView k;                 // [B,Sk,Hkv,D], unrotated
  ConstTensorView v;                 // [B,Sk,Hkv,Dv]; data == nullptr: absent
  int64_t q_start_pos = 0;
  int64_t k_start_pos = 0;
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
  // q, k and v are device memory the backend opened (OpenCudaIpcMemory);
  // the results then go to AttentionOutputs' device ranges.
  bool on_device = false;
};

// Result buffers for AttentionScores. The engine resizes each string to the
// result's byte size and writes little-endian float32 into it, so a caller
// can hand it the bytes field of a reply and avoid a copy.
//
// With AttentionParams::on_device the results go instead to device memory
// the backend opened: device_scores (and device_output when v is present),
// whose byte sizes must be exactly the results' (INVALID_ARGUMENT naming
// scores_out / output_out otherwise, before any work).
//
// The results beyond scores and output (AttentionParams::results) each have
// an AttentionResultBuffer: `bytes` for a host result (resized and filled:
// float32, top_k_indices int32, little-endian), or `device` /
// `device_bytes` with on_device. The engine sets every computed result's
// shape. A requested result without its buffer is INVALID_ARGUMENT.
struct AttentionResultBuffer {
  std::string* bytes = nullptr;
  void* device = nullptr;
  uint64_t device_bytes = 0;
  std::vector<int64_t> shape;
};

struct AttentionOutputs {
  std::string* scores = nullptr;     // when SCORES is computed: [B,Hq,Sq,Sk]
  std::vector<int64_t> scores_shape;
  std::string* output = nullptr;     // when OUTPUT is computed: [B,Sq,Hq,Dv]
  std::vector<int64_t> output_shape;
  float* device_scores = nullptr;
  uint64_t device_scores_bytes = 0;
  float* device_output = nullptr;
  uint64_t device_output_bytes = 0;
  AttentionResultBuffer lse;            // [B,Hq,Sq]
  AttentionResultBuffer top_k_indices;  // [B,Hq,Sq,top_k] int32
  AttentionResultBuffer top_k_probs;    // [B,Hq,Sq,top_k]
  AttentionResultBuffer key_mass;       // [B,Hq,Sk]
  AttentionResultBuffer score_rows;     // [B,Hq,count,Sk]
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
// longer requests use other tables; see scaling.h).
//
// softmax_scale is what AttentionScores multiplies q . k by when its scale is
// 0: the model's (RopeConfig::model_softmax_scale, from hf_config_json), else
// head_dim^-0.5.
struct ResolvedConfig {
  RopeConfig config;
  TableKey key;
  std::vector<double> inv_freq;
  double attention_factor = 1;
  double softmax_scale = 0;
};

class Engine {
 public:
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
  absl::StatusOr<TableSlice> GetTable(const RopeConfig& config, int64_t start, int64_t count);

  // Resolves and validates `config` without building a table.
  absl::StatusOr<ResolvedConfig> ResolveConfig(const RopeConfig& config);

  // The explicit config `config` stands for: itself when hf_config_json is
  // empty, else the JSON's derivation (hf_config.h; cached by content) with
  // the request's max_len and layout. Not yet validated against limits.
  // INVALID_ARGUMENT for an unusable JSON or a conflicting field;
  // RESOURCE_EXHAUSTED for a JSON over limits.max_hf_config_json_bytes.
  absl::StatusOr<RopeConfig> ExplicitConfig(const RopeConfig& config);

  // The backend's Backend::OpenCudaIpcMemory and CopyOnDevice (CUDA shared
  // memory; FAILED_PRECONDITION on a backend without device memory).
  absl::StatusOr<std::shared_ptr<DeviceMemoryLease>> OpenCudaIpcMemory(std::string_view handle,
                                                                       int device,
                                                                       uint64_t byte_size) {
    return backend_->OpenCudaIpcMemory(handle, device, byte_size);
  }
  absl::Status CopyOnDevice(void* destination, const void* source, uint64_t bytes) {
    return backend_->CopyOnDevice(destination, source, bytes);
  }

  const EngineLimits& limits() const { return limits_; }
  BackendInfo backend_info() const { return backend_->info(); }
  // Backend::CallsNeverWait of this engine's backend.
  bool backend_calls_never_wait() const { return backend_->CallsNeverWait(); }
  TableCacheStats cache_stats() const { return cache_.stats(); }
  HfConfigCache::Stats hf_config_cache_stats() const { return hf_configs_.stats(); }

 private:
  // The rows of the table for a validated config and the largest position
  // the request uses (dynamic NTK's base depends on it) that `touch` adds:
  // the blocks they fall in, built if missing, held by the returned view.
  absl::StatusOr<std::shared_ptr<const RopeTable>> TableFor(
      const RopeConfig& config, int64_t max_position,
      const std::function<void(BlocksTouched&)>& touch);

  std::unique_ptr<Backend> backend_;
  const EngineLimits limits_;
  TableCache cache_;
  HfConfigCache hf_configs_;
};

}  // namespace rope

#endif  // ROPE_ENGINE_ENGINE_H_
