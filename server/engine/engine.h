// Engine: the transport-free core of ropeserve. Validates requests, resolves
// tables through the TableCache, and dispatches to a Backend.
//
// Thread-safe: one Engine serves every concurrent call. No gRPC or protobuf
// type appears here; the service converts messages to these structs.
#ifndef ROPE_ENGINE_ENGINE_H_
#define ROPE_ENGINE_ENGINE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/engine/backend.h"
#include "server/engine/rope_config.h"
#include "server/engine/table_cache.h"
#include "server/engine/tensor.h"

namespace rope {

struct EngineLimits {
  uint32_t max_len_cap = 1u << 20;          // largest RopeConfig.max_len accepted
  int64_t table_cache_bytes = 1ll << 30;    // budget of the table cache
  int64_t max_elements_per_request = 1ll << 28;  // q + k + v (+ scores) elements
};

// Rotate q (and optionally k) in place.
struct RotateParams {
  RopeConfig config;
  TensorView q;                      // [B,S,Hq,D] or [S,Hq,D] (B = 1)
  TensorView k;                      // same rank/B/S/D, its own head count; data == nullptr: absent
  int64_t start_pos = 0;             // positions start_pos + s when `positions` is empty
  std::vector<int64_t> positions;    // S or B*S explicit positions; start_pos must then be 0
  bool inverse = false;
};

struct AttentionParams {
  RopeConfig config;
  ConstTensorView q;                 // [B,Sq,Hq,D] (rank 3: B = 1), unrotated
  ConstTensorView k;                 // [B,Sk,Hkv,D], unrotated
  ConstTensorView v;                 // [B,Sk,Hkv,Dv]; data == nullptr: absent
  int64_t q_start_pos = 0;
  int64_t k_start_pos = 0;
  bool causal = false;
  bool softmax = false;
  double scale = 0;                  // 0 -> 1/sqrt(D)
  // Optional: lets the backend stop early (CANCELLED / DEADLINE_EXCEEDED)
  // when the caller has gone. Must outlive the call.
  const Interrupt* interrupt = nullptr;
};

// Result buffers for AttentionScores. The engine resizes each string to the
// result's byte size and writes little-endian float32 into it, so a caller
// can hand it the bytes field of a reply and avoid a copy.
struct AttentionOutputs {
  std::string* scores = nullptr;     // required: [B,Hq,Sq,Sk]
  std::vector<int64_t> scores_shape;
  std::string* output = nullptr;     // required when v is present: [B,Sq,Hq,Dv]
  std::vector<int64_t> output_shape;
};

// A slice of a table for GetTable: rows [start, start + count) of cos and sin.
struct TableSlice {
  std::shared_ptr<const RopeTable> table;
  int64_t start = 0;
  int64_t count = 0;
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

  // OK: outputs filled as documented on AttentionOutputs.
  absl::Status AttentionScores(const AttentionParams& params, AttentionOutputs* outputs);

  // Validates `config` and returns its table (building it if needed) with the
  // requested row range checked against max_len. count == 0 means up to the
  // end of the table. For dynamic NTK the sequence length is start + count.
  absl::StatusOr<TableSlice> GetTable(const RopeConfig& config, int64_t start, int64_t count);

  const EngineLimits& limits() const { return limits_; }
  BackendInfo backend_info() const { return backend_->info(); }
  TableCacheStats cache_stats() const { return cache_.stats(); }

 private:
  // The table for a validated config and the largest position the request
  // uses (dynamic NTK's base depends on it).
  absl::StatusOr<std::shared_ptr<const RopeTable>> TableFor(const RopeConfig& config,
                                                           int64_t max_position);

  std::unique_ptr<Backend> backend_;
  const EngineLimits limits_;
  TableCache cache_;
};

}  // namespace rope

#endif  // ROPE_ENGINE_ENGINE_H_
