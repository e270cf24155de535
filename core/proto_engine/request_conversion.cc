#include "core/proto_engine/request_conversion.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "core/proto_engine/positions_conversion.h"
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
    case v1::FLOAT8_E4M3FN:
      return DType::kFloat8E4M3;
    case v1::FLOAT8_E5M2:
      return DType::kFloat8E5M2;
    case v1::DTYPE_UNSPECIFIED:
      return absl::InvalidArgumentError(
          absl::StrCat(field, " is DTYPE_UNSPECIFIED (0): set FLOAT32, FLOAT16 or BFLOAT16"));
    case v1::INT32:
      return absl::InvalidArgumentError(absl::StrCat(
          field, " is INT32 (4): a reply-only type (top_k_indices); set FLOAT32, FLOAT16 or "
          "BFLOAT16"));
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(field, " is ", value,
                       ": not a rope.v1.DType (FLOAT32 = 1, FLOAT16 = 2, BFLOAT16 = 3, "
                       "FLOAT8_E4M3FN = 5, FLOAT8_E5M2 = 6)"));
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
    case DType::kFloat8E4M3:
      return v1::FLOAT8_E4M3FN;
    case DType::kFloat8E5M2:
      return v1::FLOAT8_E5M2;
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
  if (proto.has_axial()) {
    for (const v1::RopeAxis& axis : proto.axial().axes()) {
      config.axial.axes.push_back(
          AxialAxis{axis.dim(), axis.theta(), axis.theta_rescale(), axis.interpolation()});
    }
    if (config.axial.axes.empty()) {
      return absl::InvalidArgumentError(
          "config.axial is set with no axes: give one RopeAxis per axis, or leave it unset");
    }
  }
  config.hf_config_json = proto.hf_config_json();
  config.hf_layer_type = proto.hf_layer_type();
  // The serving engines' variants (RopeConfig 20-29).
  config.rotary_offset = proto.rotary_offset();
  if (proto.has_hf_layer_index()) config.hf_layer_index = proto.hf_layer_index();
  if (proto.has_no_rope()) {
    config.no_rope.enabled = true;
    config.no_rope.floor_scale = proto.no_rope().floor_scale();
    config.no_rope.attn_scale = proto.no_rope().attn_scale();
  }
  if (proto.mrope_ernie_3d()) {
    if (!config.mrope.enabled()) {
      return absl::InvalidArgumentError(
          "config.mrope_ernie_3d is true without config.mrope: Ernie's 3-D layout needs its "
          "sections (t, h, w)");
    }
    config.mrope.ernie_3d = true;
  }
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
    proto.set_mrope_ernie_3d(config.mrope.ernie_3d);
  }
  for (const AxialAxis& axis : config.axial.axes) {
    v1::RopeAxis* out = proto.mutable_axial()->add_axes();
    out->set_dim(axis.dim);
    out->set_theta(axis.theta);
    out->set_theta_rescale(axis.theta_rescale);
    out->set_interpolation(axis.interpolation);
  }
  proto.set_hf_config_json(config.hf_config_json);
  proto.set_hf_layer_type(config.hf_layer_type);
  proto.set_rotary_offset(config.rotary_offset);
  if (config.hf_layer_index.has_value()) proto.set_hf_layer_index(*config.hf_layer_index);
  if (config.no_rope.enabled) {
    proto.mutable_no_rope()->set_floor_scale(config.no_rope.floor_scale);
    proto.mutable_no_rope()->set_attn_scale(config.no_rope.attn_scale);
  }
  proto.set_angle_precision(config.angle_precision == AnglePrecision::kFloat32 ? v1::ANGLE_FLOAT32
                                                                               : v1::ANGLE_EXACT);
  return proto;
}

v1::ResolvedConfig ResolvedConfigToProto(const ResolvedConfig& resolved) {
  v1::ResolvedConfig proto;
  *proto.mutable_config() = ConfigToProto(resolved.config);
  proto.mutable_inv_freq()->Assign(resolved.inv_freq.begin(), resolved.inv_freq.end());
  proto.set_attention_factor(resolved.attention_factor);
  if (resolved.has_table) proto.set_table_key(resolved.key.ToString());
  for (const TableKey& key : resolved.axis_keys) proto.add_axis_table_keys(key.ToString());
  if (resolved.hf_layout.has_value()) {
    proto.set_hf_layout(*resolved.hf_layout == Layout::kHalf ? v1::HALF : v1::INTERLEAVED);
  }
  proto.set_max_position_embeddings(resolved.max_position_embeddings);
  proto.set_layer_type(resolved.layer_type);
  proto.set_no_rope(resolved.config.no_rope.enabled);
  proto.set_whole_head_dim(resolved.whole_head_dim);
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
  params.fractional_positions.assign(request->fractional_positions().begin(),
                                     request->fractional_positions().end());
  if (request->has_build_positions()) {
    params.build_positions = PositionsRequestFromProto(request->build_positions());
  }
  params.inverse = request->inverse();
  // Float8 outputs (RotateRequest 20-22): the dtype, and FlashInfer's
  // quant scales, 0 meaning 1 (k's: q's).
  if (request->output_dtype() != v1::DTYPE_UNSPECIFIED) {
    ROPE_ASSIGN_OR_RETURN(params.output_dtype,
                          DTypeFromProto(request->output_dtype(), "output_dtype"));
    if (IsFloat8(*params.output_dtype)) {
      for (const auto& [field, set] :
           {std::pair<const char*, bool>{"q.shm", request->q().has_shm()},
            {"q_out", request->has_q_out()},
            {"k.shm", request->k().has_shm()},
            {"k_out", request->has_k_out()}}) {
        if (set) {
          return absl::InvalidArgumentError(absl::StrCat(
              "output_dtype is ", v1::DType_Name(request->output_dtype()), " with ", field,
              ": float8 outputs go into the reply's bytes, not into shared memory"));
        }
      }
    }
  }
  params.q_output_scale = request->output_scale() != 0 ? request->output_scale() : 1.0;
  params.k_output_scale =
      request->k_output_scale() != 0 ? request->k_output_scale() : params.q_output_scale;
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
  params.q_fractional_positions.assign(request.q_fractional_positions().begin(),
                                       request.q_fractional_positions().end());
  params.k_fractional_positions.assign(request.k_fractional_positions().begin(),
                                       request.k_fractional_positions().end());
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
