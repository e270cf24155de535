// ModelInfer as the rope.v1 call it stands for.
//
// PlanModelInfer turns a ModelInferRequest for a model into the rope.v1
// RotateRequest or AttentionScoresRequest with the same tensors,
// parameters and RoPE configuration, moving the request's raw bytes into it
// (never copying them); RunModelInfer runs that request through the rope.v1
// entries (core/proto_engine/rope_calls.h: AnswerRotate,
// AnswerAttentionScores, with the call's CallContext), the very code the
// rope.v1 service runs, and moves the reply's bytes into the
// ModelInferResponse. So a ModelInfer gives the bits the rope.v1 call gives,
// and PlanEstimate is the rope.v1 call's Estimate* (what admission charges).
//
// The mapping (docs/design.md, "KServe v2 / Triton protocol"):
//   rotate models     inputs q, k (optional), positions (optional, INT64 or
//                     INT32, any shape holding the rope.v1 positions list;
//                     FP64: fractional_positions);
//                     parameters start_pos (int64), inverse (bool),
//                     output_dtype ("FLOAT8_E4M3FN" / "FLOAT8_E5M2"),
//                     output_scale, k_output_scale (numbers);
//                     outputs q_out, k_out (UINT8 float8 codes with an
//                     output_dtype, the output parameter output_dtype
//                     naming the format: KServe v2 has no float8 type).
//   attention models  inputs q, k, v (optional), sinks and alibi_slopes
//                     (optional, FP32, Hq values), q_positions and
//                     k_positions (optional, INT64 or INT32; FP64: the
//                     q_ / k_fractional_positions); parameters
//                     q_start_pos, k_start_pos, window_left, window_right,
//                     chunk_size, top_k, score_rows_start, score_rows_count
//                     (int64), causal, softmax (bool), scale, softcap
//                     (numbers); outputs scores, output (needs v), lse,
//                     top_k_indices (INT32), top_k_probs, key_mass,
//                     score_rows. Outputs asked for beyond scores and
//                     output are rope.v1's `results`, with the others named
//                     (top_k_indices and top_k_probs both TOP_K); otherwise
//                     results is empty (scores, and output with v: today's
//                     reply), of which the outputs named are sent.
//                     Each rope.v1 field has the KServe name of its own.
//   built-in models   also the RoPE configuration: theta (a number; a string
//                     such as "500000" keeps every digit), head_dim,
//                     rotary_dim, max_len (int64), layout ("interleaved" /
//                     "half"), rope_scaling (a config.json's rope_scaling
//                     object as JSON text), or hf_config_json (a whole
//                     config.json) with hf_layer_type and hf_layer_index
//                     (int64); rotary_offset (int64); no_rope (bool) with
//                     floor_scale and attn_scale (numbers): rope.v1's
//                     RopeConfig fields and NoRope of the same names.
// q, k and v are "FP32", "FP16" or "BF16". Tensor bytes come from
// raw_input_contents (one entry per input that is not in shared memory, in
// order), typed contents (fp32_contents, int64_contents, int_contents), or a
// registered region (the input parameters shared_memory_region,
// shared_memory_offset, shared_memory_byte_size); an output with those
// parameters is written to its region, the others travel in
// raw_output_contents. Inputs are never modified: an input in shared memory
// whose output does not go to shared memory is read into the request first.
//
// Errors are Triton's: INVALID_ARGUMENT naming the input, output or
// parameter (an unknown one, a wrong datatype, a byte size that does not
// match the shape), and the engine's own statuses for the rope.v1 request,
// whose field names are the tensors' names (q, k, v, positions).
//
// No gRPC: the service supplies the caller's regions and interrupt
// (CallContext).
#ifndef ROPE_SERVER_KSERVE_KSERVE_INFER_H_
#define ROPE_SERVER_KSERVE_KSERVE_INFER_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/engine/engine.h"
#include "core/proto_engine/rope_calls.h"
#include "inference/grpc_service.pb.h"
#include "rope/v1/rope.pb.h"
#include "server/kserve/kserve_models.h"
#include "server/kserve/kserve_reply.h"

namespace rope {
namespace kserve {

// A ModelInfer turned into its rope.v1 request.
struct InferPlan {
  const Model* model = nullptr;
  v1::RotateRequest rotate;  // rotate models
  // Attention models (set by PlanModelInfer; a rotate model's plan makes,
  // moves and frees no attention request).
  std::optional<v1::AttentionScoresRequest> attention;
  // The response's outputs, in order, by their index in the model's output
  // names (rotate: q_out, k_out; attention: scores, output, lse,
  // top_k_indices, top_k_probs, key_mass, score_rows); output_count of
  // them, each at most once.
  std::array<int, kMaxInferOutputs> outputs{};
  int output_count = 0;
  std::string id;                        // the request's id, echoed
  // Inputs read out of their regions when the plan runs (after the call's
  // bytes are charged): positions, and a q or k whose output does not go to
  // shared memory; an attention model's sinks, alibi_slopes, q_positions
  // and k_positions. `input` is the input's name.
  struct RegionRead {
    std::string input;
    v1::SharedMemoryRef ref;
    std::string datatype;
  };
  std::vector<RegionRead> reads;
};

// Where a ModelInfer's time went (ModelStatistics).
struct InferTimings {
  absl::Duration infer;   // the rope.v1 entry
  absl::Duration output;  // the response's tensors
};

// Builds the plan for `request` to `model`. Moves the request's raw bytes
// (and its id) into the plan: afterwards `request` holds no tensor bytes.
// Touches no region: inputs to read from regions are queued in `reads`,
// their sizes checked against their shapes and against `max_elements` (the
// engine's max_elements_per_request; RESOURCE_EXHAUSTED beyond it).
absl::StatusOr<InferPlan> PlanModelInfer(const Model& model, inference::ModelInferRequest* request,
                                         int64_t max_elements);

// What admission needs to know of the plan: its rope.v1 request's estimate
// (EstimateRotate / EstimateAttentionScores), plus the bytes of inputs to be
// read out of regions (held by the request, then by the reply and its
// serialized copy). A plan with such reads never runs inline (they look up
// regions).
CallEstimate PlanEstimate(const InferPlan& plan);

// Reads the plan's queued inputs out of the caller's regions
// (`call.regions`, through TensorResolver, with its checks), runs its
// rope.v1 request through AnswerRotate / AnswerAttentionScores with `call`
// and fills `reply` with the results (their bytes moved, never copied). On
// error `reply` is unspecified. `timings` may be null.
absl::Status RunModelInfer(Engine& engine, const CallContext& call, InferPlan* plan,
                           InferReply* reply, InferTimings* timings = nullptr);

// The same, the results as the ModelInferResponse message (ToResponse).
absl::Status RunModelInfer(Engine& engine, const CallContext& call, InferPlan* plan,
                           inference::ModelInferResponse* response,
                           InferTimings* timings = nullptr);

// "FP32", "FP16", "BF16" for a rope.v1 dtype ("" for others).
absl::string_view DatatypeName(v1::DType dtype);

}  // namespace kserve
}  // namespace rope

#endif  // ROPE_SERVER_KSERVE_KSERVE_INFER_H_
