#include "core/proto_engine/rope_calls.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "core/proto_engine/request_conversion.h"

namespace rope {
namespace {

// Moves a tensor's fields from `from` into `to` without copying its bytes.
void MoveTensor(v1::Tensor* from, v1::Tensor* to) {
  to->set_dtype(from->dtype());
  to->mutable_shape()->Swap(from->mutable_shape());
  to->mutable_data()->swap(*from->mutable_data());
}

void SetFloatTensor(const std::vector<int64_t>& shape, v1::Tensor* tensor) {
  tensor->set_dtype(v1::FLOAT32);
  tensor->mutable_shape()->Assign(shape.begin(), shape.end());
}

}  // namespace

absl::Status AnswerRotate(Engine& engine, v1::RotateRequest* request, v1::RotateResponse* reply) {
  ROPE_ASSIGN_OR_RETURN(RotateParams params, RotateParamsFromProto(request));
  const bool to_float8 = params.output_dtype.has_value() && IsFloat8(*params.output_dtype);
  if (to_float8) {
    // Written by the engine straight into the reply's bytes.
    params.q_out = reply->mutable_q()->mutable_data();
    if (request->has_k()) params.k_out = reply->mutable_k()->mutable_data();
  }
  ROPE_RETURN_IF_ERROR(engine.Rotate(params));
  if (to_float8) {
    const v1::DType dtype = DTypeToProto(*params.output_dtype);
    reply->mutable_q()->set_dtype(dtype);
    *reply->mutable_q()->mutable_shape() = request->q().shape();
    if (request->has_k()) {
      reply->mutable_k()->set_dtype(dtype);
      *reply->mutable_k()->mutable_shape() = request->k().shape();
    }
    return absl::OkStatus();
  }
  MoveTensor(request->mutable_q(), reply->mutable_q());
  if (request->has_k()) MoveTensor(request->mutable_k(), reply->mutable_k());
  return absl::OkStatus();
}

absl::Status AnswerAttentionScores(Engine& engine, const v1::AttentionScoresRequest& request,
                                   v1::AttentionScoresResponse* reply, const Interrupt* interrupt) {
  ROPE_ASSIGN_OR_RETURN(AttentionParams params, AttentionParamsFromProto(request));
  params.interrupt = interrupt;
  AttentionOutputs outputs;
  outputs.scores = reply->mutable_scores()->mutable_data();
  if (request.has_v()) outputs.output = reply->mutable_output()->mutable_data();
  ROPE_RETURN_IF_ERROR(engine.AttentionScores(params, &outputs));
  SetFloatTensor(outputs.scores_shape, reply->mutable_scores());
  if (request.has_v()) SetFloatTensor(outputs.output_shape, reply->mutable_output());
  return absl::OkStatus();
}

absl::Status AnswerGetTable(Engine& engine, const v1::GetTableRequest& request,
                            int64_t max_message_bytes, v1::GetTableResponse* reply) {
  if (!request.has_config()) {
    return absl::InvalidArgumentError("config is missing: it is required");
  }
  ROPE_ASSIGN_OR_RETURN(RopeConfig config, ConfigFromProto(request.config()));
  ROPE_ASSIGN_OR_RETURN(TableSlice slice,
                        engine.GetTable(config, request.start(), request.count()));
  const RopeTable& table = *slice.table;
  const int64_t half = table.half();
  const int64_t bytes_each = slice.count * half * static_cast<int64_t>(sizeof(float));
  if (max_message_bytes > 0 && 2 * bytes_each > max_message_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("GetTable reply of ", slice.count, " rows x ", half, " x 2 float32 values (",
                     2 * bytes_each, " bytes) is over the server's max_message_bytes ",
                     max_message_bytes, "; ask for fewer rows (count)"));
  }
  const std::vector<int64_t> shape = {slice.count, half};
  SetFloatTensor(shape, reply->mutable_cos());
  SetFloatTensor(shape, reply->mutable_sin());
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

absl::Status AnswerResolveConfig(Engine& engine, const v1::RopeConfig& config,
                                 v1::ResolvedConfig* reply) {
  ROPE_ASSIGN_OR_RETURN(RopeConfig parsed, ConfigFromProto(config));
  ROPE_ASSIGN_OR_RETURN(ResolvedConfig resolved, engine.ResolveConfig(parsed));
  *reply = ResolvedConfigToProto(resolved);
  return absl::OkStatus();
}

}  // namespace rope
