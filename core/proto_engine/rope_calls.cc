#include "core/proto_engine/rope_calls.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "core/engine/axial.h"
#include "core/engine/rope_config.h"
#include "core/engine/tensor_size.h"
#include "core/proto_engine/positions_conversion.h"
#include "core/proto_engine/request_conversion.h"

namespace rope {
namespace {

using v1::AttentionScoresRequest;
using v1::AttentionScoresResponse;
using v1::RotateRequest;
using v1::RotateResponse;

// ---- The tensors of each RPC, one entry each --------------------------------------

// A tensor of Rotate: rotated in place (in the request's bytes or in its
// region), into its output reference, or into float8 bytes of the reply
// (output_dtype); returned as bytes or as the reference it was written to.
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
  std::string* RotateParams::*float8_out;
};

const RotateTensor kRotateTensors[] = {
    {"q", "q_out", "q is", true, &RotateRequest::has_q, &RotateRequest::q,
     &RotateRequest::mutable_q, &RotateRequest::has_q_out, &RotateRequest::q_out,
     &RotateResponse::mutable_q, &RotateParams::q, &RotateParams::q_out,
     &RotateParams::q_float8_out},
    {"k", "k_out", "k is", false, &RotateRequest::has_k, &RotateRequest::k,
     &RotateRequest::mutable_k, &RotateRequest::has_k_out, &RotateRequest::k_out,
     &RotateResponse::mutable_k, &RotateParams::k, &RotateParams::k_out,
     &RotateParams::k_float8_out},
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

// A result of AttentionScores: into the reply's bytes, or into its output
// reference. Every result is of 4-byte elements (float32; top_k_indices
// int32).
struct AttentionResultEntry {
  v1::AttentionResult result;  // what `results` lists to ask for it
  const char* name;      // "scores"
  const char* out_name;  // "scores_out"
  v1::DType dtype;       // of the reply tensor
  // Whether the request asks for this result, and why it does not, for
  // "<out_name> is set but <unmade>".
  bool (*made)(const AttentionScoresRequest&);
  const char* (*unmade)(const AttentionScoresRequest&);
  // The result's bytes from the request's shapes (an estimate: validation
  // comes later), for the byte budget and the reply limit.
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

// Whether `results` lists `result` (an empty list asks for today's
// results: SCORES, and OUTPUT with v).
bool Asks(const AttentionScoresRequest& r, v1::AttentionResult result) {
  for (int asked : r.results()) {
    if (asked == result) return true;
  }
  return false;
}

int64_t Sq(const AttentionScoresRequest& r) { return DimFromEnd(r.q(), 3); }
int64_t Hq(const AttentionScoresRequest& r) { return DimFromEnd(r.q(), 2); }
int64_t Sk(const AttentionScoresRequest& r) { return DimFromEnd(r.k(), 3); }

// Scores [B, Hq, Sq, Sk], output [B, Sq, Hq, Dv], lse [B, Hq, Sq], top-k
// [B, Hq, Sq, top_k], key mass [B, Hq, Sk], score rows [B, Hq, count, Sk].
int64_t EstimatedScoresBytes(const AttentionScoresRequest& r) {
  return SaturatingProduct({Batch(r.q()), Hq(r), Sq(r), Sk(r), sizeof(float)});
}

int64_t EstimatedOutputBytes(const AttentionScoresRequest& r) {
  if (!ShapeMatchesBytes(r.v())) return 0;
  return SaturatingProduct({Batch(r.q()), Sq(r), Hq(r), DimFromEnd(r.v(), 1), sizeof(float)});
}

int64_t EstimatedLseBytes(const AttentionScoresRequest& r) {
  return SaturatingProduct({Batch(r.q()), Hq(r), Sq(r), sizeof(float)});
}

int64_t EstimatedTopKBytes(const AttentionScoresRequest& r) {
  return SaturatingProduct(
      {Batch(r.q()), Hq(r), Sq(r), static_cast<int64_t>(r.top_k()), sizeof(float)});
}

int64_t EstimatedKeyMassBytes(const AttentionScoresRequest& r) {
  return SaturatingProduct({Batch(r.q()), Hq(r), Sk(r), sizeof(float)});
}

int64_t EstimatedScoreRowsBytes(const AttentionScoresRequest& r) {
  const int64_t start = std::max<int64_t>(0, r.score_rows_start());
  const int64_t rows =
      r.score_rows_count() > 0 ? r.score_rows_count() : std::max<int64_t>(0, Sq(r) - start);
  return SaturatingProduct({Batch(r.q()), Hq(r), std::min(rows, Sq(r)), Sk(r), sizeof(float)});
}

bool MadeScores(const AttentionScoresRequest& r) {
  return r.results().empty() || Asks(r, v1::SCORES);
}
bool MadeOutput(const AttentionScoresRequest& r) {
  return r.results().empty() ? r.has_v() : Asks(r, v1::OUTPUT);
}
bool MadeLse(const AttentionScoresRequest& r) { return Asks(r, v1::LSE); }
bool MadeTopK(const AttentionScoresRequest& r) { return Asks(r, v1::TOP_K); }
bool MadeKeyMass(const AttentionScoresRequest& r) { return Asks(r, v1::KEY_MASS); }
bool MadeScoreRows(const AttentionScoresRequest& r) { return Asks(r, v1::SCORE_ROWS); }

const char* UnmadeScores(const AttentionScoresRequest&) {
  return "results does not ask for SCORES";
}
const char* UnmadeOutput(const AttentionScoresRequest& r) {
  return r.results().empty() ? "v is missing (no output to write)"
                             : "results does not ask for OUTPUT";
}
const char* UnmadeLse(const AttentionScoresRequest&) { return "results does not ask for LSE"; }
const char* UnmadeTopK(const AttentionScoresRequest&) { return "results does not ask for TOP_K"; }
const char* UnmadeKeyMass(const AttentionScoresRequest&) {
  return "results does not ask for KEY_MASS";
}
const char* UnmadeScoreRows(const AttentionScoresRequest&) {
  return "results does not ask for SCORE_ROWS";
}

const AttentionResultEntry kAttentionResults[] = {
    {v1::SCORES, "scores", "scores_out", v1::FLOAT32, &MadeScores, &UnmadeScores, &EstimatedScoresBytes,
     &AttentionScoresRequest::has_scores_out, &AttentionScoresRequest::scores_out,
     &AttentionScoresResponse::mutable_scores, &AttentionOutputs::scores},
    {v1::OUTPUT, "output", "output_out", v1::FLOAT32, &MadeOutput, &UnmadeOutput, &EstimatedOutputBytes,
     &AttentionScoresRequest::has_output_out, &AttentionScoresRequest::output_out,
     &AttentionScoresResponse::mutable_output, &AttentionOutputs::output},
    {v1::LSE, "lse", "lse_out", v1::FLOAT32, &MadeLse, &UnmadeLse, &EstimatedLseBytes,
     &AttentionScoresRequest::has_lse_out, &AttentionScoresRequest::lse_out,
     &AttentionScoresResponse::mutable_lse, &AttentionOutputs::lse},
    {v1::TOP_K, "top_k_indices", "top_k_indices_out", v1::INT32, &MadeTopK, &UnmadeTopK, &EstimatedTopKBytes,
     &AttentionScoresRequest::has_top_k_indices_out, &AttentionScoresRequest::top_k_indices_out,
     &AttentionScoresResponse::mutable_top_k_indices, &AttentionOutputs::top_k_indices},
    {v1::TOP_K, "top_k_probs", "top_k_probs_out", v1::FLOAT32, &MadeTopK, &UnmadeTopK, &EstimatedTopKBytes,
     &AttentionScoresRequest::has_top_k_probs_out, &AttentionScoresRequest::top_k_probs_out,
     &AttentionScoresResponse::mutable_top_k_probs, &AttentionOutputs::top_k_probs},
    {v1::KEY_MASS, "key_mass", "key_mass_out", v1::FLOAT32, &MadeKeyMass, &UnmadeKeyMass,
     &EstimatedKeyMassBytes, &AttentionScoresRequest::has_key_mass_out,
     &AttentionScoresRequest::key_mass_out, &AttentionScoresResponse::mutable_key_mass,
     &AttentionOutputs::key_mass},
    {v1::SCORE_ROWS, "score_rows", "score_rows_out", v1::FLOAT32, &MadeScoreRows, &UnmadeScoreRows,
     &EstimatedScoreRowsBytes, &AttentionScoresRequest::has_score_rows_out,
     &AttentionScoresRequest::score_rows_out, &AttentionScoresResponse::mutable_score_rows,
     &AttentionOutputs::score_rows},
};

}  // namespace

std::vector<std::string> SupportedAttentionResultNames() {
  std::vector<int> numbers;
  for (const AttentionResultEntry& r : kAttentionResults) numbers.push_back(r.result);
  std::sort(numbers.begin(), numbers.end());
  numbers.erase(std::unique(numbers.begin(), numbers.end()), numbers.end());
  std::vector<std::string> names;
  for (int number : numbers) {
    names.push_back(v1::AttentionResult_Name(static_cast<v1::AttentionResult>(number)));
  }
  return names;
}

namespace {

// The bytes of the results a reply carries (those not written to a
// reference), saturating.
int64_t InlineResultBytes(const AttentionScoresRequest& request) {
  int64_t payload = 0;
  for (const AttentionResultEntry& r : kAttentionResults) {
    if (r.made(request) && !(request.*r.has_out)()) {
      payload = SaturatingAdd(payload, r.estimate_bytes(request));
    }
  }
  return payload;
}

bool Made(const AttentionResultEntry& result, const AttentionScoresRequest& request) {
  return result.made(request);
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

// RESOURCE_EXHAUSTED before any work when the results the reply carries
// would pass `limit`; when SCORES or SCORE_ROWS are among them, the message
// says that OUTPUT and LSE need no Sq x Sk memory. Estimated from the
// request's shapes: a malformed shape is left to validation.
absl::Status CheckReplyFits(const AttentionScoresRequest& request, const ReplyLimit& limit) {
  if (!ShapeMatchesBytes(request.q()) || !ShapeMatchesBytes(request.k())) {
    return absl::OkStatus();
  }
  const int64_t bytes = InlineResultBytes(request);
  std::string what = "AttentionScores reply of";
  bool square = false;
  for (const AttentionResultEntry& r : kAttentionResults) {
    if (!r.made(request) || (request.*r.has_out)()) continue;
    absl::StrAppend(&what, what.back() == 'f' ? " " : ", ", r.name);
    square = square || r.buffer == &AttentionOutputs::scores ||
             r.buffer == &AttentionOutputs::score_rows;
  }
  return limit.Check(
      what, bytes,
      square ? "results OUTPUT and LSE need no Sq x Sk memory (ask for them instead of SCORES), "
               "or ask for fewer rows (SCORE_ROWS with score_rows_count), or write the scores to "
               "shared memory (scores_out)"
             : "ask for less per call, or write the results to shared memory (<result>_out)");
}

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
  // Float8 outputs (never with references: RotateParamsFromProto) are
  // written by the engine straight into the reply's bytes.
  const bool to_float8 = params.output_dtype.has_value() && IsFloat8(*params.output_dtype);
  if (to_float8) {
    for (const RotateTensor& t : kRotateTensors) {
      if ((request->*t.has)()) params.*t.float8_out = (reply->*t.reply)()->mutable_data();
    }
  }
  ROPE_RETURN_IF_ERROR(engine.Rotate(params));
  ROPE_RETURN_IF_ERROR(tensors.CheckAfter());

  for (const RotateTensor& t : kRotateTensors) {
    if (!(request->*t.has)()) continue;
    v1::Tensor* input = (request->*t.mutable_tensor)();
    v1::Tensor* answer = (reply->*t.reply)();
    if (to_float8) {
      answer->set_dtype(DTypeToProto(*params.output_dtype));
      *answer->mutable_shape() = input->shape();
    } else if ((request->*t.has_out)()) {
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
    // from the request: only gRPC's serialized copy is new. Float8 outputs
    // (output_dtype) are new bytes, one per element, and their serialized
    // copy: never more than the 2- or 4-byte input.
    if (!to_reference) {
      estimate.more_bytes =
          SaturatingAdd(estimate.more_bytes, static_cast<int64_t>(tensor.data().size()));
    }
  }
  // Positions per axis (M-RoPE, axial RoPE, fractional or built positions)
  // make a per-request table: at most one row of rotary_dim floats (cos and
  // sin) per token of q, and a build_positions up to kMaxAxialAxes 8-byte
  // values per token (the engine's bound on what it builds).
  const v1::RopeConfig& config = request.config();
  const bool built = request.has_build_positions();
  if ((built || config.has_axial() || config.has_mrope() ||
       request.fractional_positions_size() > 0) &&
      ShapeMatchesBytes(request.q())) {
    const int64_t tokens = SaturatingMul(Batch(request.q()), DimFromEnd(request.q(), 3));
    int64_t rows = SaturatingProduct({tokens, DimFromEnd(request.q(), 1), sizeof(float)});
    if (built) rows = SaturatingAdd(rows, SaturatingProduct({tokens, kMaxAxialAxes, 8}));
    estimate.more_bytes = SaturatingAdd(estimate.more_bytes, rows);
  }
  // Building positions may parse a config.json: never inline.
  estimate.may_run_inline = !references && !built && config.hf_config_json().empty() &&
                            config.max_len() <= kInlineMaxLen;
  return estimate;
}

// ---- AttentionScores ----------------------------------------------------------------

absl::Status AnswerAttentionScores(Engine& engine, const AttentionScoresRequest& request,
                                   AttentionScoresResponse* reply, const CallContext& call) {
  for (const AttentionInput& in : kAttentionInputs) {
    ROPE_RETURN_IF_ERROR(TensorResolver::CheckForm((request.*in.tensor)(), in.name));
  }
  for (const AttentionResultEntry& r : kAttentionResults) {
    if ((request.*r.has_out)() && !Made(r, request)) {
      return absl::InvalidArgumentError(
          absl::StrCat(r.out_name, " is set but ", r.unmade(request)));
    }
  }
  ROPE_ASSIGN_OR_RETURN(AttentionParams params, AttentionParamsFromProto(request));
  params.interrupt = call.interrupt;
  ROPE_RETURN_IF_ERROR(CheckReplyFits(request, call.reply_limit));
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
  for (const AttentionResultEntry& r : kAttentionResults) {
    ResultBuffer& buffer = outputs.*r.buffer;
    buffer.name = r.out_name;
    if (Made(r, request) && (request.*r.has_out)()) {
      // kFloat32 stands for any 4-byte element here (the alignment the
      // reference must have); top_k_indices are int32.
      ROPE_RETURN_IF_ERROR(tensors.ResolveOutput((request.*r.out)(), r.out_name, group,
                                                 DType::kFloat32, /*expected_bytes=*/-1, "",
                                                 &buffer.view));
    }
    ++group;
  }
  ROPE_RETURN_IF_ERROR(tensors.CheckCall());
  for (const AttentionResultEntry& r : kAttentionResults) {
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

  for (const AttentionResultEntry& r : kAttentionResults) {
    if (!Made(r, request)) continue;
    v1::Tensor* answer = (reply->*r.reply)();
    SetFloatShape((outputs.*r.buffer).shape, answer);
    answer->set_dtype(r.dtype);
    if ((request.*r.has_out)()) *answer->mutable_shm() = (request.*r.out)();
  }
  return absl::OkStatus();
}

CallEstimate EstimateAttentionScores(const AttentionScoresRequest& request,
                                     const ReplyLimit& limit) {
  CallEstimate estimate;
  if (!ShapeMatchesBytes(request.q()) || !ShapeMatchesBytes(request.k())) return estimate;
  // A reply over the limit is refused before any work (CheckReplyFits),
  // never built: it is charged at most the limit.
  const int64_t payload = limit.Clamp(InlineResultBytes(request));
  // The engine's float32 working copies of q and k (rotated), freed when the
  // work ends.
  int64_t working =
      SaturatingMul(SaturatingAdd(EstimatedElements(request.q()), EstimatedElements(request.k())),
                    sizeof(float));
  // A NoPE layer with temperature tuning (config.no_rope, or a layer
  // hf_layer_index picks) scales a copy of q in its own dtype.
  // A causal call over fractional positions rotates float32 copies of q
  // and k and copies v to float32 first (attention_float32_copies.h).
  if (request.causal() &&
      (request.q_fractional_positions_size() > 0 || request.k_fractional_positions_size() > 0)) {
    const int64_t copies = SaturatingAdd(
        SaturatingAdd(EstimatedElements(request.q()), EstimatedElements(request.k())),
        request.has_v() ? EstimatedElements(request.v()) : 0);
    working = SaturatingAdd(working, SaturatingMul(copies, sizeof(float)));
  }
  if (request.config().has_no_rope() || request.config().has_hf_layer_index()) {
    const int64_t element = request.q().dtype() == v1::FLOAT32 ? 4 : 2;
    working = SaturatingAdd(working, SaturatingMul(EstimatedElements(request.q()), element));
  }
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
  // The reply: the explicit config (the request's fields, config.json's
  // values in their place: at most about the request's size, plus LongRoPE's
  // factor lists of at most kMaxHeadDim / 2 values each when config.json
  // held them), kMaxHeadDim / 2 inverse frequencies at most, and a table key
  // of bounded size (its lists by digest). Charged in full whatever
  // head_dim turns out to be, since hf_config_json is parsed after admission.
  constexpr int64_t kListBytes = int64_t{kMaxHeadDim} / 2 * sizeof(double);
  constexpr int64_t kKeyAndFieldsBytes = 4096;
  CallEstimate estimate;
  estimate.more_bytes = WithSerializedCopy(
      SaturatingAdd(static_cast<int64_t>(config.ByteSizeLong()),
                    3 * kListBytes + kKeyAndFieldsBytes));
  return estimate;
}

// ---- BuildPositions -----------------------------------------------------------------

absl::Status AnswerBuildPositions(Engine& engine, const v1::BuildPositionsRequest& request,
                                  const ReplyLimit& limit, v1::BuildPositionsResponse* reply,
                                  const Interrupt* interrupt) {
  // A value takes at most 10 bytes on the wire (a negative int64 varint).
  constexpr int64_t kMaxValueBytes = 10;
  int64_t max_values = engine.limits().max_elements_per_request;
  if (limit.max_bytes() > 0) max_values = std::min(max_values, limit.max_bytes() / kMaxValueBytes);
  const int64_t requested = RequestedPositionValues(request);
  if (requested > max_values) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "BuildPositions would build ", requested, " position values: over the server's limit of ",
        max_values, " (max_elements_per_request, and the reply within max_message_bytes ",
        limit.max_bytes(), " at 10 bytes a value)"));
  }
  ROPE_ASSIGN_OR_RETURN(
      BuiltPositions built,
      engine.BuildPositions(PositionsRequestFromProto(request), max_values, interrupt));
  BuiltPositionsToProto(built, reply);
  return absl::OkStatus();
}

CallEstimate EstimateBuildPositions(const v1::BuildPositionsRequest& request,
                                    const ReplyLimit& limit) {
  // The largest reply the request can produce (its values as 10-byte
  // varints; AnswerBuildPositions holds it to the limit), and the engine's
  // list of 8-byte values behind it.
  int64_t values = RequestedPositionValues(request);
  if (limit.max_bytes() > 0) values = std::min(values, limit.max_bytes() / 10);  // else refused
  CallEstimate estimate;
  estimate.more_bytes =
      SaturatingAdd(WithSerializedCopy(limit.Clamp(BuildPositionsReplyBytes(request))),
                    SaturatingMul(values, 8));
  return estimate;
}

}  // namespace rope
