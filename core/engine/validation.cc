#include "core/engine/validation.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "core/engine/tensor_size.h"

namespace rope {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

bool IsValidDType(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat16 || dtype == DType::kBFloat16;
}

// Dimensions of a [B, S, H, D] tensor (rank 3 [S, H, D] means B = 1).
struct Dims4 {
  int64_t batch = 0, seq = 0, heads = 0, dim = 0, elements = 0;
};

// Checks dtype, rank, positive dims, element count without overflow and the
// byte size of tensor `name`.
template <typename View>
absl::StatusOr<Dims4> CheckTensor(const char* name, const View& t) {
  if (IsFloat8(t.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ".dtype is ", DTypeName(t.dtype),
        ": float8 is an output type only (Rotate's output_dtype); send FLOAT32, FLOAT16 or "
        "BFLOAT16"));
  }
  if (!IsValidDType(t.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ".dtype is ", static_cast<int>(t.dtype),
                                                   ": must be FLOAT32, FLOAT16 or BFLOAT16"));
  }
  if (t.shape.size() != 3 && t.shape.size() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(name, ".shape is ", ShapeString(t.shape),
                                                   " (rank ", t.shape.size(),
                                                   "): must be rank 4 [B,S,H,D] or rank 3 [S,H,D]"));
  }
  int64_t elements = 1;
  for (size_t i = 0; i < t.shape.size(); ++i) {
    const int64_t d = t.shape[i];
    if (d <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, ".shape[", i, "] is ", d,
                                                     ": every dimension must be > 0 (shape ",
                                                     ShapeString(t.shape), ")"));
    }
    elements = CheckedMul(elements, d);
    if (elements < 0 || elements > kInt64Max / 4) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ".shape ", ShapeString(t.shape), ": element count overflows int64"));
    }
  }
  const uint64_t expected_bytes = static_cast<uint64_t>(elements) * DTypeSize(t.dtype);
  const uint64_t actual_bytes = t.data == nullptr ? 0 : t.byte_size;
  if (actual_bytes != expected_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(name, ".data has ", actual_bytes,
                                                   " bytes: shape ", ShapeString(t.shape), " of ",
                                                   DTypeName(t.dtype), " needs ", expected_bytes));
  }
  Dims4 dims;
  const bool has_batch = t.shape.size() == 4;
  const size_t off = has_batch ? 1 : 0;
  dims.batch = has_batch ? t.shape[0] : 1;
  dims.seq = t.shape[off];
  dims.heads = t.shape[off + 1];
  dims.dim = t.shape[off + 2];
  dims.elements = elements;
  return dims;
}

absl::Status CheckHeadDim(const char* name, const Dims4& dims, const RopeConfig& config) {
  if (dims.dim != config.head_dim) {
    const bool mla = config.whole_head_dim != 0 && config.whole_head_dim != config.head_dim;
    return absl::InvalidArgumentError(absl::StrCat(
        name, ".shape[-1] (head_dim) is ", dims.dim, ": must equal config.head_dim ",
        config.head_dim,
        mla ? absl::StrCat(" (the rope part) or ", config.whole_head_dim,
                           " (the whole MLA head, whose last features rotate)")
            : std::string()));
  }
  return absl::OkStatus();
}

// `other` must match `q` in rank, batch and (when `same_seq`) sequence length.
template <typename ViewA, typename ViewB>
absl::Status CheckCompanion(const char* name, const ViewB& other, const Dims4& other_dims,
                            const char* q_name, const ViewA& q, const Dims4& q_dims,
                            bool same_seq) {
  if (other.shape.size() != q.shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ".shape ", ShapeString(other.shape),
                                                   " has rank ", other.shape.size(), ": must equal ",
                                                   q_name, "'s rank ", q.shape.size()));
  }
  if (other.dtype != q.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(name, ".dtype is ", DTypeName(other.dtype),
                                                   ": must equal ", q_name, ".dtype ",
                                                   DTypeName(q.dtype)));
  }
  if (other_dims.batch != q_dims.batch) {
    return absl::InvalidArgumentError(absl::StrCat(name, ".shape[0] (batch) is ", other_dims.batch,
                                                   ": must equal ", q_name, "'s batch ",
                                                   q_dims.batch));
  }
  if (same_seq && other_dims.seq != q_dims.seq) {
    return absl::InvalidArgumentError(absl::StrCat(name, " sequence length is ", other_dims.seq,
                                                   ": must equal ", q_name, "'s ", q_dims.seq));
  }
  return absl::OkStatus();
}

absl::Status CheckGqa(const char* q_name, int64_t q_heads, const char* k_name, int64_t k_heads) {
  if (q_heads % k_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(q_name, " heads (", q_heads, ") % ", k_name,
                                                   " heads (", k_heads,
                                                   ") != 0: query heads must be a multiple of "
                                                   "key/value heads (GQA/MQA)"));
  }
  return absl::OkStatus();
}

// Every tensor of one call is in one memory: a backend reads them all on
// the host or all on its device.
absl::Status CheckSameMemory(const char* name, const TensorMemory& memory, const char* q_name,
                             const TensorMemory& q_memory) {
  if (memory != q_memory) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " is in ", memory.ToString(), " but ", q_name, " is in ", q_memory.ToString(),
        ": one call's tensors are all in one memory"));
  }
  return absl::OkStatus();
}

// Where a rotated tensor goes: `out` (q_out for q) when given, which holds
// exactly `in`'s bytes in `in`'s memory; else `in` itself. Sets the backend's
// destination and, for a rotation out of place, its source.
absl::Status ResolveDestination(const char* out_name, const TensorView& out, const char* in_name,
                                const TensorView& in, void** destination, const void** source) {
  *destination = in.data;
  *source = nullptr;
  if (out.data == nullptr) return absl::OkStatus();
  if (out.byte_size != in.byte_size) {
    return absl::InvalidArgumentError(absl::StrCat(out_name, ".byte_size is ", out.byte_size, ": ",
                                                   in_name, " is ", in.byte_size, " bytes"));
  }
  ROPE_RETURN_IF_ERROR(CheckSameMemory(out_name, out.memory, in_name, in.memory));
  *destination = out.data;
  if (out.data != in.data) *source = in.data;
  return absl::OkStatus();
}

// Positions start_pos + s, s < seq, must lie in [0, max_len).
absl::Status CheckStartPos(const char* name, int64_t start_pos, int64_t seq, uint32_t max_len) {
  if (start_pos < 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, " is ", start_pos, ": must be >= 0"));
  }
  if (start_pos > static_cast<int64_t>(max_len) - seq) {
    return absl::OutOfRangeError(absl::StrCat(name, " is ", start_pos, " with sequence length ",
                                              seq, ": positions ", name, " + s must be < "
                                              "config.max_len ", max_len));
  }
  return absl::OkStatus();
}

absl::Status CheckElementLimit(int64_t elements, const EngineLimits& limits) {
  if (elements < 0 || elements > limits.max_elements_per_request) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "request has ", elements < 0 ? std::string("more than 2^63") : absl::StrCat(elements),
        " tensor elements (inputs and outputs): over the max_elements_per_request limit of ",
        limits.max_elements_per_request));
  }
  return absl::OkStatus();
}

// One explicit position: >= 0 (INVALID_ARGUMENT) and < max_len (OUT_OF_RANGE).
absl::Status CheckPosition(int64_t p, uint32_t max_len, const std::string& where) {
  if (p < 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, " is ", p, ": must be >= 0"));
  }
  if (p >= static_cast<int64_t>(max_len)) {
    return absl::OutOfRangeError(
        absl::StrCat(where, " is ", p, ": must be < config.max_len ", max_len));
  }
  return absl::OkStatus();
}

// Plain explicit positions of a [B,S,...] tensor: S or B*S values, each in
// [0, max_len). `field` names the list ("positions", "q_positions"),
// `tensor` the tensor it belongs to. Fills `spec` (seq already set) and the
// largest position.
absl::Status ResolveExplicitPositions(const char* field, const std::vector<int64_t>& list,
                                      const char* tensor, const std::vector<int64_t>& shape,
                                      const Dims4& dims, uint32_t max_len,
                                      math::PositionSpec* spec, int64_t* max_position) {
  const int64_t n = static_cast<int64_t>(list.size());
  if (n != dims.seq && n != dims.batch * dims.seq) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " has ", n, " values: must be S (", dims.seq, ") or B*S (", dims.batch * dims.seq,
        ") for ", tensor, ".shape ", ShapeString(shape)));
  }
  int64_t max_pos = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = list[i];
    // The field's name only for the message: building it for every valid
    // position cost an allocation per token (1% of a decode call).
    if (p < 0 || p >= static_cast<int64_t>(max_len)) {
      return CheckPosition(p, max_len, absl::StrCat(field, "[", i, "]"));
    }
    max_pos = std::max(max_pos, p);
  }
  spec->explicit_positions = list.data();
  spec->count = n;
  *max_position = max_pos;
  return absl::OkStatus();
}

// Rotate's output: in place, or float8 (output_dtype) with its scales.
absl::Status ResolveRotateOutput(const RotateParams& params, bool has_k, RotateArgs* args,
                                 int64_t* elements) {
  const bool to_float8 = params.output_dtype.has_value() && *params.output_dtype != params.q.dtype;
  if (to_float8 && !IsFloat8(*params.output_dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "output_dtype is ", DTypeName(*params.output_dtype), ": must be q's dtype ",
        DTypeName(params.q.dtype), " (in place) or FLOAT8_E4M3FN / FLOAT8_E5M2"));
  }
  const std::pair<const char*, double> scales[] = {{"output_scale", params.q_output_scale},
                                                   {"k_output_scale", params.k_output_scale}};
  for (const auto& [field, scale] : scales) {
    if (!std::isfinite(scale) || scale <= 0 || scale > std::numeric_limits<float>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, " is ", scale, ": must be finite as float32 and > 0 (0 on the wire means 1)"));
    }
    if (!to_float8 && scale != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, " is ", scale,
          ": only a float8 output_dtype takes a scale (FlashInfer's quant_scale)"));
    }
  }
  if (!to_float8) return absl::OkStatus();
  if (!params.q.memory.is_host()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "output_dtype is ", DTypeName(*params.output_dtype), " with q in ",
        params.q.memory.ToString(), ": float8 outputs are made from host memory into the reply"));
  }
  for (const auto& [field, out] : {std::pair<const char*, const TensorView*>{"q_out", &params.q_out},
                                   {"k_out", &params.k_out}}) {
    if (out->data != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "output_dtype is ", DTypeName(*params.output_dtype), " with ", field,
          ": float8 outputs go into the reply's bytes, not into an output reference"));
    }
  }
  if (params.q_float8_out == nullptr || (has_k && params.k_float8_out == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "output_dtype is ", DTypeName(*params.output_dtype),
        ": this call has nowhere to write float8 outputs"));
  }
  args->output_dtype = *params.output_dtype;
  args->q_scale = static_cast<float>(params.q_output_scale);
  args->k_scale = static_cast<float>(params.k_output_scale);
  // The outputs are new bytes beside the inputs: count them as elements too.
  *elements = CheckedAdd(*elements, *elements);
  return absl::OkStatus();
}

int AxesOf(const RopeConfig& config) { return config.PositionAxes(); }

std::string AxisLabel(const RopeConfig& config, int64_t axis) {
  if (config.mrope.enabled()) return MropeAxisName(static_cast<int>(axis));
  return absl::StrCat(axis);
}

// The rule for a list of `axes` positions per token, for messages.
std::string CountRule(const RopeConfig& config, int64_t seq, int64_t batch,
                      const std::vector<int64_t>& shape, const char* tensor) {
  const int axes = AxesOf(config);
  if (axes == 1) {
    return absl::StrCat("must be S (", seq, ") or B*S (", batch * seq, ") for ", tensor,
                        ".shape ", ShapeString(shape));
  }
  const std::string with = config.mrope.enabled()
                               ? std::string("with config.mrope")
                               : absl::StrCat("with config.axial (", axes, " axes)");
  const std::string order = config.mrope.enabled() ? "[axis t,h,w][b][s]" : "[axis][b][s]";
  return absl::StrCat(with, " it must be ", axes, "*S (", axes * seq, ") or ", axes, "*B*S (",
                      axes * batch * seq, ") for ", tensor, ".shape ", ShapeString(shape),
                      ", ordered ", order);
}

// Where value i of a list of `rows` rows of positions lies, for messages:
// "positions[9] (axis w, b 0, s 1)", or "positions[3]" with one axis.
std::string PositionPlace(const RopeConfig& config, const std::string& field, int64_t i,
                          int64_t rows, int64_t seq, bool batched) {
  const int axes = AxesOf(config);
  const int64_t axis = i / rows, token = i % rows;
  std::string where = absl::StrCat(field, "[", i, "]");
  if (axes == 1) return where;
  if (batched) {
    return absl::StrCat(where, " (axis ", AxisLabel(config, axis), ", b ", token / seq, ", s ",
                        token % seq, ")");
  }
  return absl::StrCat(where, " (axis ", AxisLabel(config, axis), ", s ", token, ")");
}

// Several positions per token (M-RoPE or axial): axes*S or axes*B*S values,
// [axis][b][s].
absl::Status ResolveAxisPositions(const RotateParams& params, const RopeConfig& config,
                                  const Dims4& q, ResolvedRotate* out) {
  const int axes = AxesOf(config);
  const int64_t n = static_cast<int64_t>(params.positions.size());
  const int64_t shared = axes * q.seq;
  const int64_t per_row = axes * q.batch * q.seq;
  if (n != shared && n != per_row) {
    return absl::InvalidArgumentError(absl::StrCat(
        "positions has ", n, " values: ", CountRule(config, q.seq, q.batch, params.q.shape, "q")));
  }
  const int64_t rows = n / axes;
  const bool batched = n == per_row && q.batch > 1;
  int64_t max_pos = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = params.positions[i];
    if (p < 0 || p >= static_cast<int64_t>(config.max_len)) {
      return CheckPosition(p, config.max_len,
                           PositionPlace(config, "positions", i, rows, q.seq, batched));
    }
    max_pos = std::max(max_pos, p);
  }
  out->axis_positions = params.positions.data();
  out->axis_rows = rows;
  out->max_position = max_pos;
  return absl::OkStatus();
}

// Fractional positions of one tensor (`field`; empty: none): axes*S or
// axes*B*S finite values in [0, max_len), [axis][b][s].
absl::StatusOr<FractionalPositions> ResolveFractionalPositions(
    const std::vector<double>& values, const std::string& field, const RopeConfig& config,
    int64_t batch, int64_t seq, const std::vector<int64_t>& shape, const char* tensor) {
  FractionalPositions out;
  if (values.empty()) return out;
  const int axes = AxesOf(config);
  const int64_t n = static_cast<int64_t>(values.size());
  if (n != axes * seq && n != axes * batch * seq) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " has ", n, " values: ", CountRule(config, seq, batch, shape, tensor)));
  }
  out.rows = n / axes;
  out.axes = axes;
  const bool batched = out.rows == batch * seq && batch > 1;
  for (int64_t i = 0; i < n; ++i) {
    const double p = values[i];
    if (std::isfinite(p) && p >= 0 && p < static_cast<double>(config.max_len)) {
      out.max = std::max(out.max, p);
      continue;
    }
    const std::string where = PositionPlace(config, field, i, out.rows, seq, batched);
    if (!std::isfinite(p) || p < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " is ", p, ": must be finite and >= 0"));
    }
    return absl::OutOfRangeError(
        absl::StrCat(where, " is ", p, ": must be < config.max_len ", config.max_len));
  }
  out.values = values.data();
  return out;
}

// The largest fractional position rounded up: what dynamic NTK and
// LongRoPE take as the request's largest position.
int64_t CeilPosition(double p) { return static_cast<int64_t>(std::ceil(p)); }

}  // namespace

absl::StatusOr<ResolvedRotate> ResolveRotate(const RotateParams& params, const RopeConfig& config,
                                             const EngineLimits& limits) {
  ROPE_RETURN_IF_ERROR(ValidateConfig(config, limits.max_len_cap));
  ROPE_ASSIGN_OR_RETURN(const Dims4 q, CheckTensor("q", params.q));
  ROPE_RETURN_IF_ERROR(CheckHeadDim("q", q, config));
  int64_t elements = q.elements;

  ResolvedRotate out;
  RotateArgs& args = out.args;
  args.dtype = params.q.dtype;
  args.layout = config.layout;
  args.inverse = params.inverse;
  args.memory = params.q.memory;
  args.batch = q.batch;
  args.seq = q.seq;
  args.head_dim = config.head_dim;
  args.rotary_dim = config.EffectiveRotaryDim();
  args.rotary_offset = config.rotary_offset;
  ROPE_RETURN_IF_ERROR(
      ResolveDestination("q_out", params.q_out, "q", params.q, &args.q, &args.q_source));
  args.q_heads = q.heads;

  const bool has_k = params.k.data != nullptr || !params.k.shape.empty();
  if (has_k) {
    ROPE_ASSIGN_OR_RETURN(const Dims4 k, CheckTensor("k", params.k));
    ROPE_RETURN_IF_ERROR(CheckHeadDim("k", k, config));
    ROPE_RETURN_IF_ERROR(CheckCompanion("k", params.k, k, "q", params.q, q, /*same_seq=*/true));
    // Any head counts: rotation pairs no query head with a key head (only
    // attention does, AttentionScores checks Hq % Hkv); FlashInfer and vLLM
    // rotate such q and k in one call too.
    ROPE_RETURN_IF_ERROR(CheckSameMemory("k", params.k.memory, "q", params.q.memory));
    ROPE_RETURN_IF_ERROR(
        ResolveDestination("k_out", params.k_out, "k", params.k, &args.k, &args.k_source));
    args.k_heads = k.heads;
    elements = CheckedAdd(elements, k.elements);
  } else if (params.k_out.data != nullptr) {
    return absl::InvalidArgumentError("k_out is set but k is missing");
  }
  ROPE_RETURN_IF_ERROR(ResolveRotateOutput(params, has_k, &args, &elements));
  ROPE_RETURN_IF_ERROR(CheckElementLimit(elements, limits));

  args.positions.seq = q.seq;
  // proto3 cannot tell an unset start_pos from 0, so only a non-zero one
  // contradicts explicit positions; silently preferring either would hide a
  // client bug.
  if (!params.positions.empty() && params.start_pos != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "start_pos and positions are both set (start_pos is ", params.start_pos, ", positions has ",
        params.positions.size(), " values): give one of them"));
  }
  if (!params.fractional_positions.empty()) {
    if (!params.positions.empty() || params.start_pos != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fractional_positions (", params.fractional_positions.size(),
          " values) and ", params.positions.empty() ? absl::StrCat("start_pos ", params.start_pos)
                                                    : absl::StrCat("positions (",
                                                                   params.positions.size(),
                                                                   " values)"),
          " are both set: give one of them"));
    }
    ROPE_ASSIGN_OR_RETURN(out.fractional,
                          ResolveFractionalPositions(params.fractional_positions,
                                                     "fractional_positions", config, q.batch,
                                                     q.seq, params.q.shape, "q"));
    out.max_position = CeilPosition(out.fractional.max);
    return out;
  }
  if (params.positions.empty()) {
    ROPE_RETURN_IF_ERROR(CheckStartPos("start_pos", params.start_pos, q.seq, config.max_len));
    args.positions.start_pos = params.start_pos;
    out.max_position = params.start_pos + q.seq - 1;
  } else if (config.mrope.enabled() || config.axial.enabled()) {
    ROPE_RETURN_IF_ERROR(ResolveAxisPositions(params, config, q, &out));
  } else {
    ROPE_RETURN_IF_ERROR(ResolveExplicitPositions("positions", params.positions, "q",
                                                  params.q.shape, q, config.max_len,
                                                  &args.positions, &out.max_position));
  }
  return out;
}

namespace {

constexpr AttentionResult kAllResults[] = {
    AttentionResult::kScores, AttentionResult::kOutput,  AttentionResult::kLse,
    AttentionResult::kTopK,   AttentionResult::kKeyMass, AttentionResult::kScoreRows};

uint32_t Bit(AttentionResult result) { return 1u << static_cast<int>(result); }

// Whether `params` sets anything beyond today's fields (q, k, v, start
// positions, causal, softmax, scale): such a call takes the tiled path.
bool UsesNewFields(const AttentionParams& params) {
  return !params.results.empty() || params.window_left.has_value() ||
         params.window_right.has_value() || params.chunk_size != 0 ||
         !params.q_positions.empty() || !params.k_positions.empty() || params.softcap != 0 ||
         !params.sinks.empty() || !params.alibi_slopes.empty() || params.top_k != 0 ||
         params.score_rows_start != 0 || params.score_rows_count != 0;
}

// The position of one of q or k: start-based or an explicit list (never both).
absl::Status ResolveAttentionPositions(const char* start_field, int64_t start,
                                       const char* list_field, const std::vector<int64_t>& list,
                                       const char* tensor, const std::vector<int64_t>& shape,
                                       const Dims4& dims, uint32_t max_len,
                                       math::PositionSpec* spec, int64_t* max_position) {
  spec->seq = dims.seq;
  if (list.empty()) {
    ROPE_RETURN_IF_ERROR(CheckStartPos(start_field, start, dims.seq, max_len));
    spec->start_pos = start;
    *max_position = start + dims.seq - 1;
    return absl::OkStatus();
  }
  // As Rotate's start_pos and positions: proto3 cannot tell an unset start
  // from 0, so only a non-zero one contradicts the list.
  if (start != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        start_field, " and ", list_field, " are both set (", start_field, " is ", start, ", ",
        list_field, " has ", list.size(), " values): give one of them"));
  }
  return ResolveExplicitPositions(list_field, list, tensor, shape, dims, max_len, spec,
                                  max_position);
}

// Empty or one finite value per query head.
absl::Status CheckPerHead(const char* field, const std::vector<float>& values, int64_t q_heads) {
  if (values.empty()) return absl::OkStatus();
  if (static_cast<int64_t>(values.size()) != q_heads) {
    return absl::InvalidArgumentError(absl::StrCat(field, " has ", values.size(),
                                                   " values: must be empty or one per query "
                                                   "head (Hq = ", q_heads, ")"));
  }
  for (size_t h = 0; h < values.size(); ++h) {
    if (!std::isfinite(values[h])) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "[", h, "] is ", values[h], ": must be finite"));
    }
  }
  return absl::OkStatus();
}

std::string Product(const std::vector<int64_t>& shape) {
  return absl::StrJoin(shape, "x");
}

}  // namespace

const std::vector<std::string>& AttentionMaskRules() {
  // Each one a member of math::AttentionMask that ResolveAttention sets.
  static const std::vector<std::string>* const rules =
      new std::vector<std::string>{"causal", "window_left", "window_right", "chunk_size"};
  return *rules;
}

const std::vector<std::string>& AttentionLogitTransforms() {
  // Each one a member of AttentionArgs that ResolveAttention sets.
  static const std::vector<std::string>* const transforms =
      new std::vector<std::string>{"softcap", "alibi_slopes", "sinks"};
  return *transforms;
}

absl::string_view AttentionResultName(AttentionResult result) {
  switch (result) {
    case AttentionResult::kScores: return "SCORES";
    case AttentionResult::kOutput: return "OUTPUT";
    case AttentionResult::kLse: return "LSE";
    case AttentionResult::kTopK: return "TOP_K";
    case AttentionResult::kKeyMass: return "KEY_MASS";
    case AttentionResult::kScoreRows: return "SCORE_ROWS";
  }
  return "?";
}

absl::StatusOr<ResolvedAttention> ResolveAttention(const AttentionParams& params,
                                                   const RopeConfig& config,
                                                   const EngineLimits& limits) {
  ROPE_RETURN_IF_ERROR(ValidateConfig(config, limits.max_len_cap));
  ROPE_ASSIGN_OR_RETURN(const Dims4 q, CheckTensor("q", params.q));
  ROPE_RETURN_IF_ERROR(CheckHeadDim("q", q, config));
  ROPE_ASSIGN_OR_RETURN(const Dims4 k, CheckTensor("k", params.k));
  ROPE_RETURN_IF_ERROR(CheckHeadDim("k", k, config));
  ROPE_RETURN_IF_ERROR(CheckCompanion("k", params.k, k, "q", params.q, q, /*same_seq=*/false));
  ROPE_RETURN_IF_ERROR(CheckGqa("q", q.heads, "k", k.heads));
  ROPE_RETURN_IF_ERROR(CheckSameMemory("k", params.k.memory, "q", params.q.memory));
  // The backends multiply in float32: a double above FLT_MAX would become inf.
  if (!std::isfinite(params.scale) || params.scale < 0 ||
      params.scale > std::numeric_limits<float>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scale is ", params.scale,
        ": must be finite as float32 and >= 0 (0 means 1/sqrt(head_dim))"));
  }

  ResolvedAttention r;
  AttentionArgs& a = r.args;
  a.dtype = params.q.dtype;
  a.layout = config.layout;
  a.batch = q.batch;
  a.q_seq = q.seq;
  a.k_seq = k.seq;
  a.q_heads = q.heads;
  a.k_heads = k.heads;
  a.head_dim = config.head_dim;
  a.rotary_dim = config.EffectiveRotaryDim();
  a.rotary_offset = config.rotary_offset;
  a.q = params.q.data;
  a.k = params.k.data;
  a.memory = params.q.memory;
  a.causal = params.causal;
  a.softmax = params.softmax;
  double scale = params.scale;
  if (scale == 0) {
    scale = config.model_softmax_scale != 0 ? config.model_softmax_scale
                                            : 1.0 / std::sqrt(static_cast<double>(q.dim));
  }
  a.scale = static_cast<float>(scale);

  const bool has_v = params.v.data != nullptr || !params.v.shape.empty();
  Dims4 v;
  if (has_v) {
    ROPE_ASSIGN_OR_RETURN(v, CheckTensor("v", params.v));
    ROPE_RETURN_IF_ERROR(CheckCompanion("v", params.v, v, "k", params.k, k, /*same_seq=*/true));
    ROPE_RETURN_IF_ERROR(CheckSameMemory("v", params.v.memory, "q", params.q.memory));
    if (v.heads != k.heads) {
      return absl::InvalidArgumentError(absl::StrCat("v heads (", v.heads,
                                                     ") must equal k heads (", k.heads, ")"));
    }
  }

  // The results.
  if (params.results.empty()) {
    r.wanted = Bit(AttentionResult::kScores) | (has_v ? Bit(AttentionResult::kOutput) : 0);
  }
  for (size_t i = 0; i < params.results.size(); ++i) {
    const AttentionResult result = params.results[i];
    const int number = static_cast<int>(result);
    if (number < static_cast<int>(AttentionResult::kScores) ||
        number > static_cast<int>(AttentionResult::kScoreRows)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "results[", i, "] is ", number,
          ": must be SCORES, OUTPUT, LSE, TOP_K, KEY_MASS or SCORE_ROWS"));
    }
    if (r.Wants(result)) {
      return absl::InvalidArgumentError(absl::StrCat("results[", i, "] is ",
                                                     AttentionResultName(result),
                                                     ": listed more than once"));
    }
    r.wanted |= Bit(result);
  }
  if (r.Wants(AttentionResult::kOutput) && !has_v) {
    return absl::InvalidArgumentError(
        "results asks for OUTPUT but v is absent: the output is P v (LSE, TOP_K, KEY_MASS and "
        "SCORE_ROWS need no v)");
  }

  // Masks and transforms.
  a.mask.causal = params.causal;
  if (params.window_left.has_value()) {
    if (*params.window_left < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "window_left is ", *params.window_left, ": must be >= 0 (unset: no limit)"));
    }
    a.mask.window_left = *params.window_left;
  }
  if (params.window_right.has_value()) {
    if (*params.window_right < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "window_right is ", *params.window_right, ": must be >= 0 (unset: no limit)"));
    }
    a.mask.window_right = *params.window_right;
  }
  if (params.chunk_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk_size is ", params.chunk_size, ": must be >= 0 (0: no chunks)"));
  }
  a.mask.chunk_size = params.chunk_size;
  if (!std::isfinite(params.softcap) || params.softcap < 0 ||
      params.softcap > std::numeric_limits<float>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "softcap is ", params.softcap, ": must be finite as float32 and >= 0 (0: none)"));
  }
  a.softcap = static_cast<float>(params.softcap);
  if (params.softcap > 0 && a.softcap == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("softcap is ", params.softcap, ": below float32's smallest value"));
  }
  ROPE_RETURN_IF_ERROR(CheckPerHead("sinks", params.sinks, q.heads));
  ROPE_RETURN_IF_ERROR(CheckPerHead("alibi_slopes", params.alibi_slopes, q.heads));
  a.sinks = params.sinks.empty() ? nullptr : params.sinks.data();
  a.alibi_slopes = params.alibi_slopes.empty() ? nullptr : params.alibi_slopes.data();

  // top_k and the row range are checked whenever they are set, so that a
  // value that could never work is refused even before TOP_K / SCORE_ROWS
  // is asked.
  if (params.top_k < 0 || params.top_k > k.seq) {
    return absl::InvalidArgumentError(absl::StrCat(
        "top_k is ", params.top_k, ": must be in [1, Sk] (Sk = ", k.seq, " keys)"));
  }
  if (r.Wants(AttentionResult::kTopK) && params.top_k == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "top_k is 0: results asks for TOP_K, which needs top_k in [1, Sk] (Sk = ", k.seq, ")"));
  }
  if (params.score_rows_start < 0 || params.score_rows_start >= q.seq) {
    return absl::InvalidArgumentError(absl::StrCat("score_rows_start is ",
                                                   params.score_rows_start,
                                                   ": must be in [0, Sq) (Sq = ", q.seq, ")"));
  }
  if (params.score_rows_count < 0 ||
      params.score_rows_count > q.seq - params.score_rows_start) {
    return absl::InvalidArgumentError(absl::StrCat(
        "score_rows_count is ", params.score_rows_count, ": rows [", params.score_rows_start,
        ", ", params.score_rows_start, " + ", params.score_rows_count,
        ") must lie within Sq = ", q.seq, " (0: to the last query)"));
  }

  // Positions. Fractional positions first: beside them a start position is
  // only the tokens' sequence index.
  ROPE_ASSIGN_OR_RETURN(r.q_fractional,
                        ResolveFractionalPositions(params.q_fractional_positions,
                                                   "q_fractional_positions", config, q.batch,
                                                   q.seq, params.q.shape, "q"));
  ROPE_ASSIGN_OR_RETURN(r.k_fractional,
                        ResolveFractionalPositions(params.k_fractional_positions,
                                                   "k_fractional_positions", config, k.batch,
                                                   k.seq, params.k.shape, "k"));
  // The rules that compare tokens' places: beside fractional positions they
  // compare sequence indices (start + s), as every reference model masks.
  const bool compares_places = params.causal || params.window_left.has_value() ||
                               params.window_right.has_value() || params.chunk_size != 0 ||
                               !params.alibi_slopes.empty();
  struct TensorPositions {
    const FractionalPositions& fractional;
    const char* fractional_field;
    const char* start_field;
    int64_t start;
    const char* list_field;
    const std::vector<int64_t>& list;
    const char* tensor;
    const std::vector<int64_t>& shape;
    const Dims4& dims;
    math::PositionSpec* spec;
    int64_t max = 0;
  };
  TensorPositions tensors[] = {
      {r.q_fractional, "q_fractional_positions", "q_start_pos", params.q_start_pos,
       "q_positions", params.q_positions, "q", params.q.shape, q, &a.q_positions},
      {r.k_fractional, "k_fractional_positions", "k_start_pos", params.k_start_pos,
       "k_positions", params.k_positions, "k", params.k.shape, k, &a.k_positions}};
  for (TensorPositions& t : tensors) {
    if (t.fractional.values == nullptr) {
      ROPE_RETURN_IF_ERROR(ResolveAttentionPositions(t.start_field, t.start, t.list_field, t.list,
                                                     t.tensor, t.shape, t.dims, config.max_len,
                                                     t.spec, &t.max));
      continue;
    }
    if (!t.list.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(t.fractional_field, " and ", t.list_field,
                                                     " (", t.list.size(),
                                                     " values) are both set: give one of them"));
    }
    // A sequence index, not a position: < 2^31, not bounded by max_len.
    if (t.start < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(t.start_field, " is ", t.start, ": must be >= 0"));
    }
    if (t.start > (int64_t{1} << 31) - t.dims.seq) {
      return absl::OutOfRangeError(absl::StrCat(
          t.start_field, " is ", t.start, " with sequence length ", t.dims.seq,
          ": beside fractional positions it gives sequence indices ", t.start_field,
          " + s, which must be < 2^31"));
    }
    if (t.start != 0 && !compares_places) {
      return absl::InvalidArgumentError(absl::StrCat(
          t.fractional_field, " and its start position (", t.start,
          ") are both set without causal (nor a window, chunk_size or alibi_slopes): the start "
          "position would do nothing (with a mask it gives the tokens' sequence indices); give "
          "one of them"));
    }
    t.spec->start_pos = t.start;
    t.spec->seq = t.dims.seq;
  }
  r.max_position = std::max(tensors[0].max, tensors[1].max);
  // One tensor's fractional positions make rows of a per-request table for
  // both; an explicit list for the other would mix positions and indices.
  for (int i = 0; i < 2; ++i) {
    const TensorPositions& fractional = tensors[i];
    const TensorPositions& other = tensors[1 - i];
    if (fractional.fractional.values != nullptr && other.fractional.values == nullptr &&
        !other.list.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          other.list_field, " (", other.list.size(), " values) is set with ",
          fractional.fractional_field, ": give ", other.tensor, " start positions or ",
          other.fractional_field));
    }
  }
  if (config.axial.enabled() && (!params.q_positions.empty() || !params.k_positions.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        params.q_positions.empty() ? "k_positions" : "q_positions",
        " is set with config.axial: an axial config takes one position per axis; send "
        "q_fractional_positions / k_fractional_positions ([axis][b][s]) or start positions"));
  }

  // Shapes and the element count: inputs and the requested results only.
  int64_t elements = CheckedAdd(q.elements, k.elements);
  if (has_v) {
    a.v = params.v.data;
    a.v_dim = v.dim;
    elements = CheckedAdd(elements, v.elements);
  }
  const auto count = [](const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n = n < 0 ? -1 : CheckedMul(n, d);
    return n;
  };
  int64_t scores_elements = 0;  // of SCORES and SCORE_ROWS, for the message
  for (const AttentionResult result : kAllResults) {
    if (!r.Wants(result)) continue;
    std::vector<int64_t>* shape = nullptr;
    int copies = 1;
    switch (result) {
      case AttentionResult::kScores:
        r.scores_shape = {q.batch, q.heads, q.seq, k.seq};
        shape = &r.scores_shape;
        break;
      case AttentionResult::kOutput:
        r.output_shape = {q.batch, q.seq, q.heads, v.dim};
        shape = &r.output_shape;
        break;
      case AttentionResult::kLse:
        r.lse_shape = {q.batch, q.heads, q.seq};
        shape = &r.lse_shape;
        break;
      case AttentionResult::kTopK:
        r.top_k_shape = {q.batch, q.heads, q.seq, params.top_k};
        shape = &r.top_k_shape;
        copies = 2;  // indices and probabilities
        break;
      case AttentionResult::kKeyMass:
        r.key_mass_shape = {q.batch, q.heads, k.seq};
        shape = &r.key_mass_shape;
        break;
      case AttentionResult::kScoreRows: {
        const int64_t rows =
            params.score_rows_count == 0 ? q.seq - params.score_rows_start : params.score_rows_count;
        r.score_rows_shape = {q.batch, q.heads, rows, k.seq};
        shape = &r.score_rows_shape;
        break;
      }
    }
    const int64_t n = count(*shape);
    const int64_t all = n < 0 ? -1 : CheckedMul(n, copies);
    elements = all < 0 || elements < 0 ? -1 : CheckedAdd(elements, all);
    if (result == AttentionResult::kScores || result == AttentionResult::kScoreRows) {
      scores_elements = n < 0 || scores_elements < 0 ? -1 : CheckedAdd(scores_elements, n);
    }
  }
  absl::Status limit = CheckElementLimit(elements, limits);
  if (!limit.ok() && scores_elements != 0) {
    const bool rows_only = !r.Wants(AttentionResult::kScores);
    return absl::ResourceExhaustedError(absl::StrCat(
        limit.message(), "; of them, the ", rows_only ? "score rows " : "scores ",
        Product(rows_only ? r.score_rows_shape : r.scores_shape), " are ",
        scores_elements < 0 ? std::string("more than 2^63") : absl::StrCat(scores_elements),
        ": results OUTPUT and LSE (or TOP_K, KEY_MASS) need no Sq x Sk memory"));
  }
  ROPE_RETURN_IF_ERROR(limit);

  a.top_k = r.Wants(AttentionResult::kTopK) ? params.top_k : 0;
  if (r.Wants(AttentionResult::kScoreRows)) {
    a.score_rows_start = params.score_rows_start;
    a.score_rows_count = r.score_rows_shape[2];
  }
  // Today's fields only, with today's results: today's computation.
  a.legacy = !UsesNewFields(params);
  return r;
}

}  // namespace rope
