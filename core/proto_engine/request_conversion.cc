#include "core/proto_engine/request_conversion.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "core/proto_engine/scaling_conversion.h"

namespace rope {

namespace {

std::vector<int64_t> ShapeOf(const v1::Tensor& tensor) {
  return std::vector<int64_t>(tensor.shape().begin(), tensor.shape().end());
}

absl::Status RequireField(bool present, absl::string_view field) {
  if (present) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, " is missing: it is required"));
}

}  // namespace

absl::StatusOr<DType> DTypeFromProto(int value, absl::string_view field) {
  switch (value) {
    case v1::FLOAT32:
      return DType::kFloat32;
    case v1::FLOAT16:
      return DType::kFloat16;
    case v1::BFLOAT16:
      return DType::kBFloat16;
    case v1::DTYPE_UNSPECIFIED:
      return absl::InvalidArgumentError(
          absl::StrCat(field, " is DTYPE_UNSPECIFIED (0): set FLOAT32, FLOAT16 or BFLOAT16"));
    case v1::INT32:
      return absl::InvalidArgumentError(absl::StrCat(
          field, " is INT32 (4): a reply-only type (top_k_indices); set FLOAT32, FLOAT16 or "
          "BFLOAT16"));
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          field, " is ", value, ": not a rope.v1.DType (FLOAT32 = 1, FLOAT16 = 2, BFLOAT16 = 3)"));
  }
}

v1::DType DTypeToProto(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return v1::FLOAT32;
    case DType::kFloat16:
      return v1::FLOAT16;
    case DType::kBFloat16:
      return v1::BFLOAT16;
  }
  return v1::DTYPE_UNSPECIFIED;
}

absl::StatusOr<Layout> LayoutFromProto(int value, absl::string_view field) {
  switch (value) {
    case v1::LAYOUT_UNSPECIFIED:
    case v1::INTERLEAVED:
      return Layout::kInterleaved;
    case v1::HALF:
      return Layout::kHalf;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          field, " is ", value,
          ": not a rope.v1.Layout (LAYOUT_UNSPECIFIED = 0, INTERLEAVED = 1, HALF = 2)"));
  }
}

absl::StatusOr<RopeConfig> ConfigFromProto(const v1::RopeConfig& proto) {
  RopeConfig config;
  ROPE_ASSIGN_OR_RETURN(config.layout, LayoutFromProto(proto.layout(), "config.layout"));
  config.theta = proto.theta();
  config.head_dim = proto.head_dim();
  config.rotary_dim = proto.rotary_dim();
  config.max_len = proto.max_len();
  config.scaling = ScalingFromProto(proto);
  if (proto.has_mrope()) {
    config.mrope.section.assign(proto.mrope().section().begin(), proto.mrope().section().end());
    config.mrope.interleaved = proto.mrope().interleaved();
    if (config.mrope.section.empty()) {
      return absl::InvalidArgumentError(
          "config.mrope is set with no section: give its 3 sections (t, h, w), or leave it unset");
    }
  }
  config.hf_config_json = proto.hf_config_json();
  config.hf_layer_type = proto.hf_layer_type();
  switch (proto.angle_precision()) {
    case v1::ANGLE_EXACT:
      config.angle_precision = AnglePrecision::kExact;
      break;
    case v1::ANGLE_FLOAT32:
      config.angle_precision = AnglePrecision::kFloat32;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "config.angle_precision is ", proto.angle_precision(),
          ": not a rope.v1.AnglePrecision (ANGLE_EXACT = 0, ANGLE_FLOAT32 = 1)"));
  }
  return config;
}

v1::RopeConfig ConfigToProto(const RopeConfig& config) {
  v1::RopeConfig proto;
  proto.set_theta(config.theta);
  proto.set_head_dim(config.head_dim);
  proto.set_rotary_dim(config.rotary_dim);
  proto.set_max_len(config.max_len);
  proto.set_layout(config.layout == Layout::kHalf ? v1::HALF : v1::INTERLEAVED);
  ScalingToProto(config.scaling, &proto);
  if (config.mrope.enabled()) {
    proto.mutable_mrope()->mutable_section()->Assign(config.mrope.section.begin(),
                                                     config.mrope.section.end());
    proto.mutable_mrope()->set_interleaved(config.mrope.interleaved);
  }
  proto.set_hf_config_json(config.hf_config_json);
  proto.set_hf_layer_type(config.hf_layer_type);
  proto.set_angle_precision(config.angle_precision == AnglePrecision::kFloat32 ? v1::ANGLE_FLOAT32
                                                                               : v1::ANGLE_EXACT);
  return proto;
}

v1::ResolvedConfig ResolvedConfigToProto(const ResolvedConfig& resolved) {
  v1::ResolvedConfig proto;
  *proto.mutable_config() = ConfigToProto(resolved.config);
  proto.mutable_inv_freq()->Assign(resolved.inv_freq.begin(), resolved.inv_freq.end());
  proto.set_attention_factor(resolved.attention_factor);
  proto.set_table_key(resolved.key.ToString());
  proto.set_softmax_scale(resolved.softmax_scale);
  return proto;
}

absl::StatusOr<TensorView> MutableTensorViewOf(v1::Tensor* tensor, absl::string_view field) {
  TensorView view;
  ROPE_ASSIGN_OR_RETURN(view.dtype, DTypeFromProto(tensor->dtype(), absl::StrCat(field, ".dtype")));
  view.shape = ShapeOf(*tensor);
  std::string* data = tensor->mutable_data();
  view.data = data->data();
  view.byte_size = data->size();
  return view;
}

absl::StatusOr<ConstTensorView> TensorViewOf(const v1::Tensor& tensor, absl::string_view field) {
  ROPE_ASSIGN_OR_RETURN(DType dtype, DTypeFromProto(tensor.dtype(), absl::StrCat(field, ".dtype")));
  return ConstTensorView(dtype, ShapeOf(tensor), tensor.data().data(), tensor.data().size());
}

absl::StatusOr<RotateParams> RotateParamsFromProto(v1::RotateRequest* request) {
  ROPE_RETURN_IF_ERROR(RequireField(request->has_config(), "config"));
  ROPE_RETURN_IF_ERROR(RequireField(request->has_q(), "q"));
  RotateParams params;
  ROPE_ASSIGN_OR_RETURN(params.config, ConfigFromProto(request->config()));
  ROPE_ASSIGN_OR_RETURN(params.q, MutableTensorViewOf(request->mutable_q(), "q"));
  if (request->has_k()) {
    ROPE_ASSIGN_OR_RETURN(params.k, MutableTensorViewOf(request->mutable_k(), "k"));
  }
  params.start_pos = request->start_pos();
  params.positions.assign(request->positions().begin(), request->positions().end());
  params.inverse = request->inverse();
  return params;
}

absl::StatusOr<AttentionParams> AttentionParamsFromProto(
    const v1::AttentionScoresRequest& request) {
  ROPE_RETURN_IF_ERROR(RequireField(request.has_config(), "config"));
  ROPE_RETURN_IF_ERROR(RequireField(request.has_q(), "q"));
  ROPE_RETURN_IF_ERROR(RequireField(request.has_k(), "k"));
  AttentionParams params;
  ROPE_ASSIGN_OR_RETURN(params.config, ConfigFromProto(request.config()));
  ROPE_ASSIGN_OR_RETURN(params.q, TensorViewOf(request.q(), "q"));
  ROPE_ASSIGN_OR_RETURN(params.k, TensorViewOf(request.k(), "k"));
  if (request.has_v()) {
    ROPE_ASSIGN_OR_RETURN(params.v, TensorViewOf(request.v(), "v"));
  }
  params.q_start_pos = request.q_start_pos();
  params.k_start_pos = request.k_start_pos();
  params.causal = request.causal();
  params.softmax = request.softmax();
  params.scale = request.scale();
  // Result numbers are passed through: the engine refuses those outside
  // AttentionResult (proto3 keeps unknown enum numbers), naming the index.
  params.results.reserve(request.results_size());
  for (int r : request.results()) params.results.push_back(static_cast<AttentionResult>(r));
  if (request.has_window_left()) params.window_left = request.window_left();
  if (request.has_window_right()) params.window_right = request.window_right();
  params.chunk_size = request.chunk_size();
  params.q_positions.assign(request.q_positions().begin(), request.q_positions().end());
  params.k_positions.assign(request.k_positions().begin(), request.k_positions().end());
  params.softcap = request.softcap();
  params.sinks.assign(request.sinks().begin(), request.sinks().end());
  params.alibi_slopes.assign(request.alibi_slopes().begin(), request.alibi_slopes().end());
  params.top_k = request.top_k();
  params.score_rows_start = request.score_rows_start();
  params.score_rows_count = request.score_rows_count();
  return params;
}

}  // namespace rope
