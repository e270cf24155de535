// InferReply: a successful ModelInfer's results, held as the parts of its
// ModelInferResponse rather than as the message, so that the service can
// write the reply's wire bytes itself (kserve_reply_wire.h: the output
// tensors' bytes handed to gRPC as they are, never copied) while tests, the
// fuzz target and the conversion benchmark build the published message from
// the same parts (ToResponse).
//
// Not thread-safe; moved from one owner to the next.
#ifndef ROPE_SERVER_KSERVE_KSERVE_REPLY_H_
#define ROPE_SERVER_KSERVE_KSERVE_REPLY_H_

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "google/protobuf/repeated_field.h"
#include "inference/grpc_service.pb.h"

namespace rope {
namespace kserve {

// The most outputs a model has: an attention model's scores, output, lse,
// top_k_indices, top_k_probs, key_mass and score_rows. Every per-output
// array on the reply's path is this long; a plan never names more outputs
// (each name at most once).
inline constexpr int kMaxInferOutputs = 7;

struct InferReply {
  // One InferOutputTensor of the reply.
  struct Output {
    absl::string_view name;      // a model's output name (static)
    absl::string_view datatype;  // "FP32", "UINT8", ... (static)
    google::protobuf::RepeatedField<int64_t> shape;
    // The output's parameters (float8 format, shared-memory region), in
    // the order written; most outputs have none.
    std::vector<std::pair<std::string, inference::InferParameter>> parameters;
  };

  absl::string_view model_name;     // the model's (outlives the reply)
  absl::string_view model_version;  // static
  std::string id;
  std::array<Output, kMaxInferOutputs> outputs;
  // raw_output_contents, one per output ("" for an output written to a
  // shared-memory region, as Triton leaves it).
  std::array<std::string, kMaxInferOutputs> raw;
  int output_count = 0;
};

// Moves `reply`'s parts into `response` (cleared first): the
// ModelInferResponse the reply's wire bytes stand for.
void ToResponse(InferReply* reply, inference::ModelInferResponse* response);

}  // namespace kserve
}  // namespace rope

#endif  // ROPE_SERVER_KSERVE_KSERVE_REPLY_H_
