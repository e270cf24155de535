#include "core/proto_engine/rope_calls.h"

#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "core/engine/tensor_size.h"
#include "core/proto_engine/request_conversion.h"

namespace rope {
namespace {

using v1::AttentionScoresRequest;
using v1::AttentionScoresResponse;
using v1::RotateRequest;
using v1::RotateResponse;

// ---- The tensors of each RPC, one entry each --------------------------------------

// A tensor of Rotate: rotated in place (in the request's bytes or in its
// region), or into its output reference; returned as bytes or as the
// reference it was written to.
struct RotateTensor {
  const char* name;      // "q"
  const char* out_name;  // "q_out"
  const char* is;        // "q is", for messages on the output's size
  bool required;         // RotateParamsFromProto refuses it missing
  bool (RotateRequest::*has)() const;
  const v1::Tensor& (RotateRequest::*tensor)() const;
  v1::Tensor* (RotateRequest::*mutable_tensor)();
  bool (RotateRequest::*has_out)() const;
  const v1::SharedMemoryRef& (RotateRequest::*out)() const;
  v1::Tensor* (RotateResponse::*reply)();
  TensorView RotateParams::*view;
  TensorView RotateParams::*out_view;
};

const RotateTensor kRotateTensors[] = {
    {"q", "q_out", "q is", true, &RotateRequest::has_q, &RotateRequest::q,
     &RotateRequest::mutable_q, &RotateRequest::has_q_out, &RotateRequest::q_out,
     &RotateResponse::mutable_q, &RotateParams::q, &RotateParams::q_out},
    {"k", "k_out", "k is", false, &RotateRequest::has_k, &RotateRequest::k,
     &RotateRequest::mutable_k, &RotateRequest::has_k_out, &RotateRequest::k_out,
     &RotateResponse::mutable_k, &RotateParams::k, &RotateParams::k_out},
};

// An input of AttentionScores, read where it lies.
struct AttentionInput {
  const char* name;
  bool (AttentionScoresRequest::*has)() const;
  const v1::Tensor& (AttentionScoresRequest::*tensor)() const;
  ConstTensorView AttentionParams::*view;
};

const AttentionInput kAttentionInputs[] = {
    {"q", &AttentionScoresRequest::has_q, &AttentionScoresRequest::q, &AttentionParams::q},
    {"k", &AttentionScoresRequest::has_k, &AttentionScoresRequest::k, &AttentionParams::k},
    {"v", &AttentionScoresRequest::has_v, &AttentionScoresRequest::v, &AttentionParams::v},
};

// A result of AttentionScores (float32): into the reply's bytes, or into its
// output reference.
struct AttentionResult {
  const char* name;      // "scores"
  const char* out_name;  // "scores_out"
  // Whether the request asks for this result (null: always), and why it
  // does not, for "<out_name> is set but <unmade>".
  bool (*made)(const AttentionScoresRequest&);
  const char* unmade;
  // The result's bytes from the request's shapes (an estimate: validation
  // comes later), for the byte budget.
  int64_t (*estimate_bytes)(const AttentionScoresRequest&);
  bool (AttentionScoresRequest::*has_out)() const;
  const v1::SharedMemoryRef& (AttentionScoresRequest::*out)() const;
  v1::Tensor* (AttentionScoresResponse::*reply)();
  ResultBuffer AttentionOutputs::*buffer;
};

// Dimension `i` counted from the end (1: last) of a [B, S, H, D] or [S, H, D]
// shape; 1 when missing.
int64_t DimFromEnd(const v1::Tensor& tensor, int i) {
  const int rank = tensor.shape_size();
  return rank >= i ? tensor.shape(rank - i) : 1;
}

int64_t Batch(const v1::Tensor& tensor) {
  return tensor.shape_size() >= 4 ? tensor.shape(tensor.shape_size() - 4) : 1;
}

int64_t EstimatedElements(const v1::Tensor& tensor) {
  return SaturatingProduct(std::vector<int64_t>(tensor.shape().begin(), tensor.shape().end()));
}

// Whether `tensor`'s shape matches its bytes (its reference's byte_size for
// a tensor sent by reference): shapes that do not are refused by
// validation, and must not be mistaken for a huge result (which would turn
// INVALID_ARGUMENT into RESOURCE_EXHAUSTED).
bool ShapeMatchesBytes(const v1::Tensor& tensor) {
  const int64_t element_bytes = tensor.dtype() == v1::FLOAT32 ? 4 : 2;
  const uint64_t bytes = tensor.has_shm() ? tensor.shm().byte_size() : tensor.data().size();
  return tensor.shape_size() > 0 && bytes <= static_cast<uint64_t>(kInt64Max) &&
         SaturatingMul(EstimatedElements(tensor), element_bytes) == static_cast<int64_t>(bytes);
}

// Scores [B, Hq, Sq, Sk] and output [B, Sq, Hq, Dv], float32.
int64_t EstimatedScoresBytes(const AttentionScoresRequest& r) {
  return SaturatingProduct({Batch(r.q()), DimFromEnd(r.q(), 2), DimFromEnd(r.q(), 3),
                            DimFromEnd(r.k(), 3), sizeof(float)});
}

int64_t EstimatedOutputBytes(const AttentionScoresRequest& r) {
  if (!ShapeMatchesBytes(r.v())) return 0;
  return SaturatingProduct({Batch(r.q()), DimFromEnd(r.q(), 3), DimFromEnd(r.q(), 2),
                            DimFromEnd(r.v(), 1), sizeof(float)});
}

const AttentionResult kAttentionResults[] = {
    {"scores", "scores_out", nullptr, "", &EstimatedScoresBytes,
     &AttentionScoresRequest::has_scores_out, &AttentionScoresRequest::scores_out,
     &AttentionScoresResponse::mutable_scores, &AttentionOutputs::scores},
    {"output", "output_out", [](const AttentionScoresRequest& r) { return r.has_v(); },
     "v is missing (no output to write)", &EstimatedOutputBytes,
     &AttentionScoresRequest::has_output_out, &AttentionScoresRequest::output_out,
     &AttentionScoresResponse::mutable_output, &AttentionOutputs::output},
};

bool Made(const AttentionResult& result, const AttentionScoresRequest& request) {
  return result.made == nullptr || result.made(request);
}

// ---- Replies ------------------------------------------------------------------------

// Moves a tensor's fields from `from` into `to` without copying its bytes.
void MoveTensor(v1::Tensor* from, v1::Tensor* to) {
  to->set_dtype(from->dtype());
  to->mutable_shape()->Swap(from->mutable_shape());
  to->mutable_data()->swap(*from->mutable_data());
}

// A reply tensor whose values are in shared memory: its dtype and shape, and
// the reference, no bytes.
void SetReference(v1::DType dtype, const v1::Tensor& shape_of, const v1::SharedMemoryRef& ref,
                  v1::Tensor* out) {
  out->set_dtype(dtype);
  out->mutable_shape()->CopyFrom(shape_of.shape());
  out->clear_data();
  *out->mutable_shm() = ref;
}

void SetFloatShape(const std::vector<int64_t>& shape, v1::Tensor* tensor) {
  tensor->set_dtype(v1::FLOAT32);
  tensor->mutable_shape()->Assign(shape.begin(), shape.end());
}

// The payload of a reply and the serialized copy gRPC makes of it (held
// until it is sent), saturating.
int64_t WithSerializedCopy(int64_t reply_bytes) { return SaturatingMul(reply_bytes, 2); }

}  // namespace

// ---- Rotate -------------------------------------------------------------------------

absl::Status AnswerRotate(Engine& engine, RotateRequest* request, RotateResponse* reply,
                          const CallContext& call) {
  for (const RotateTensor& t : kRotateTensors) {
    ROPE_RETURN_IF_ERROR(TensorResolver::CheckForm((request->*t.tensor)(), t.name));
  }
  for (const RotateTensor& t : kRotateTensors) {
    if (!t.required && (request->*t.has_out)() && !(request->*t.has)()) {
      return absl::InvalidArgumentError(
          absl::StrCat(t.out_name, " is set but ", t.name, " is missing"));
    }
  }
  ROPE_ASSIGN_OR_RETURN(RotateParams params, RotateParamsFromProto(request));
  params.interrupt = call.interrupt;
  TensorResolver tensors(call.regions);
  for (int i = 0; i < static_cast<int>(std::size(kRotateTensors)); ++i) {
    const RotateTensor& t = kRotateTensors[i];
    if (!(request->*t.has)()) continue;
    ROPE_RETURN_IF_ERROR(
        tensors.ResolveInput((request->*t.tensor)(), t.name, i, &(params.*t.view)));
  }
  for (int i = 0; i < static_cast<int>(std::size(kRotateTensors)); ++i) {
    const RotateTensor& t = kRotateTensors[i];
    if (!(request->*t.has)()) continue;
    const TensorView& input = params.*t.view;
    if ((request->*t.has_out)()) {
      TensorView& output = params.*t.out_view;
      output.shape = input.shape;
      ROPE_RETURN_IF_ERROR(tensors.ResolveOutput((request->*t.out)(), t.out_name, i, input.dtype,
                                                 static_cast<int64_t>(input.byte_size), t.is,
                                                 &output));
    } else if ((request->*t.tensor)().has_shm()) {
      tensors.AlsoWritten(t.name);
    }
  }
  ROPE_RETURN_IF_ERROR(tensors.CheckCall());
  ROPE_RETURN_IF_ERROR(engine.Rotate(params));
  ROPE_RETURN_IF_ERROR(tensors.CheckAfter());

  for (const RotateTensor& t : kRotateTensors) {
    if (!(request->*t.has)()) continue;
    v1::Tensor* input = (request->*t.mutable_tensor)();
    v1::Tensor* answer = (reply->*t.reply)();
    if ((request->*t.has_out)()) {
      SetReference(input->dtype(), *input, (request->*t.out)(), answer);
    } else if (input->has_shm()) {
      SetReference(input->dtype(), *input, input->shm(), answer);
    } else {
      MoveTensor(input, answer);
    }
  }
  return absl::OkStatus();
}

CallEstimate EstimateRotate(const RotateRequest& request) {
  CallEstimate estimate;
  bool references = false;
  for (const RotateTensor& t : kRotateTensors) {
    const v1::Tensor& tensor = (request.*t.tensor)();
    const bool to_reference = (request.*t.has_out)();
    references = references || tensor.has_shm() || to_reference;
    // Bytes rotated in place come back in the reply, which takes them over
    // from the request: only gRPC's serialized copy is new.
    if (!to_reference) {
      estimate.more_bytes =
          SaturatingAdd(estimate.more_bytes, static_cast<int64_t>(tensor.data().size()));
    }
  }
  estimate.may_run_inline = !references && request.config().hf_config_json().empty() &&
                            request.config().max_len() <= kInlineMaxLen;
  return estimate;
}

// ---- AttentionScores ----------------------------------------------------------------

absl::Status AnswerAttentionScores(Engine& engine, const AttentionScoresRequest& request,
                                   AttentionScoresResponse* reply, const CallContext& call) {
  for (const AttentionInput& in : kAttentionInputs) {
    ROPE_RETURN_IF_ERROR(TensorResolver::CheckForm((request.*in.tensor)(), in.name));
  }
  for (const AttentionResult& r : kAttentionResults) {
    if ((request.*r.has_out)() && !Made(r, request)) {
      return absl::InvalidArgumentError(absl::StrCat(r.out_name, " is set but ", r.unmade));
    }
  }
  ROPE_ASSIGN_OR_RETURN(AttentionParams params, AttentionParamsFromProto(request));
  params.interrupt = call.interrupt;
  TensorResolver tensors(call.regions);
  int group = 0;
  for (const AttentionInput& in : kAttentionInputs) {
    if ((request.*in.has)()) {
      ROPE_RETURN_IF_ERROR(
          tensors.ResolveInput((request.*in.tensor)(), in.name, group, &(params.*in.view)));
    }
    ++group;
  }
  AttentionOutputs outputs;
  for (const AttentionResult& r : kAttentionResults) {
    ResultBuffer& buffer = outputs.*r.buffer;
    buffer.name = r.out_name;
    if (Made(r, request) && (request.*r.has_out)()) {
      ROPE_RETURN_IF_ERROR(tensors.ResolveOutput((request.*r.out)(), r.out_name, group,
                                                 DType::kFloat32, /*expected_bytes=*/-1, "",
                                                 &buffer.view));
    }
    ++group;
  }
  ROPE_RETURN_IF_ERROR(tensors.CheckCall());
  for (const AttentionResult& r : kAttentionResults) {
    if (!Made(r, request) || (request.*r.has_out)()) continue;
    if (tensors.on_device()) {
      return absl::InvalidArgumentError(absl::StrCat(
          r.out_name, " is not set: with ", tensors.first_device_field(),
          " in CUDA memory the results go to CUDA regions too (", r.out_name, ")"));
    }
    (outputs.*r.buffer).bytes = (reply->*r.reply)()->mutable_data();
  }
  ROPE_RETURN_IF_ERROR(engine.AttentionScores(params, &outputs));
  ROPE_RETURN_IF_ERROR(tensors.CheckAfter());

  for (const AttentionResult& r : kAttentionResults) {
    if (!Made(r, request)) continue;
    v1::Tensor* answer = (reply->*r.reply)();
    SetFloatShape((outputs.*r.buffer).shape, answer);
    if ((request.*r.has_out)()) *answer->mutable_shm() = (request.*r.out)();
  }
  return absl::OkStatus();
}

CallEstimate EstimateAttentionScores(const AttentionScoresRequest& request) {
  CallEstimate estimate;
  if (!ShapeMatchesBytes(request.q()) || !ShapeMatchesBytes(request.k())) return estimate;
  int64_t payload = 0;
  for (const AttentionResult& r : kAttentionResults) {
    if (Made(r, request) && !(request.*r.has_out)()) {
      payload = SaturatingAdd(payload, r.estimate_bytes(request));
    }
  }
  // The engine's float32 working copies of q and k (rotated), freed when the
  // work ends.
  const int64_t working =
      SaturatingMul(SaturatingAdd(EstimatedElements(request.q()), EstimatedElements(request.k())),
                    sizeof(float));
  estimate.more_bytes = SaturatingAdd(WithSerializedCopy(payload), working);
  return estimate;
}

// ---- GetTable and ResolveConfig -----------------------------------------------------

absl::Status AnswerGetTable(Engine& engine, const v1::GetTableRequest& request,
                            const ReplyLimit& limit, v1::GetTableResponse* reply,
                            const Interrupt* interrupt) {
  if (!request.has_config()) {
    return absl::InvalidArgumentError("config is missing: it is required");
  }
  ROPE_ASSIGN_OR_RETURN(RopeConfig config, ConfigFromProto(request.config()));
  ROPE_ASSIGN_OR_RETURN(TableSlice slice,
                        engine.GetTable(config, request.start(), request.count(), interrupt));
  const RopeTable& table = *slice.table;
  const int64_t half = table.half();
  const std::vector<int64_t> shape = {slice.count, half};
  const int64_t bytes_each = Float32Bytes(shape);
  ROPE_RETURN_IF_ERROR(limit.Check(absl::StrCat("GetTable reply of ", slice.count, " rows x ",
                                                half, " x 2 float32 values"),
                                   2 * bytes_each, "ask for fewer rows (count)"));
  SetFloatShape(shape, reply->mutable_cos());
  SetFloatShape(shape, reply->mutable_sin());
  std::string* cos = reply->mutable_cos()->mutable_data();
  std::string* sin = reply->mutable_sin()->mutable_data();
  cos->resize(bytes_each);
  sin->resize(bytes_each);
  table.CopyRows(slice.start, slice.count, reinterpret_cast<float*>(cos->data()),
                 reinterpret_cast<float*>(sin->data()));
  const std::vector<double> inv_freq = table.inv_freq();
  reply->mutable_inv_freq()->Assign(inv_freq.begin(), inv_freq.end());
  reply->set_attention_factor(table.attention_factor());
  reply->set_start(slice.start);
  return absl::OkStatus();
}

CallEstimate EstimateGetTable(const v1::GetTableRequest& request, int64_t max_len_cap,
                              const ReplyLimit& limit) {
  const v1::RopeConfig& config = request.config();
  const int64_t max_len = config.max_len() != 0 ? config.max_len() : max_len_cap;
  // A request reaching past the table's end is charged no rows, so that it
  // is admitted and answered OUT_OF_RANGE by the engine's checks instead of
  // RESOURCE_EXHAUSTED by the budget.
  const int64_t available =
      std::max<int64_t>(0, max_len - std::max<int64_t>(0, request.start()));
  const int64_t rows = request.count() <= 0           ? available
                       : request.count() > available ? 0
                                                      : request.count();
  const int64_t dim = config.rotary_dim() != 0 ? config.rotary_dim()
                      : config.head_dim() != 0 ? config.head_dim()
                                               : 256;
  // cos and sin: rows x dim/2 floats each.
  CallEstimate estimate;
  estimate.more_bytes =
      WithSerializedCopy(limit.Clamp(SaturatingProduct({rows, dim, sizeof(float)})));
  return estimate;
}

absl::Status AnswerResolveConfig(Engine& engine, const v1::RopeConfig& config,
                                 v1::ResolvedConfig* reply, const Interrupt* interrupt) {
  ROPE_ASSIGN_OR_RETURN(RopeConfig parsed, ConfigFromProto(config));
  ROPE_ASSIGN_OR_RETURN(ResolvedConfig resolved, engine.ResolveConfig(parsed, interrupt));
  *reply = ResolvedConfigToProto(resolved);
  return absl::OkStatus();
}

CallEstimate EstimateResolveConfig(const v1::RopeConfig& config) {
  // The reply is about the size of the config it resolves.
  CallEstimate estimate;
  estimate.more_bytes =
      WithSerializedCopy(SaturatingAdd(static_cast<int64_t>(config.ByteSizeLong()), 4096));
  return estimate;
}

}  // namespace rope
