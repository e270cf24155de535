#include "server/kserve/kserve_describe.h"

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rope {
namespace kserve {
namespace {

// One input or output of a model.
struct TensorSpec {
  const char* name;
  std::string datatype;
  std::vector<int64_t> dims;
  bool optional;
};

std::vector<int64_t> HeadShape(int64_t last_dim) { return {-1, -1, -1, last_dim}; }

std::vector<TensorSpec> Inputs(const Model& model) {
  const int64_t d = model.head_dim > 0 ? static_cast<int64_t>(model.head_dim) : -1;
  if (model.operation == ModelOperation::kRotate) {
    return {{"q", model.datatype, HeadShape(d), false},
            {"k", model.datatype, HeadShape(d), true},
            {"positions", "INT64", {-1}, true}};
  }
  // Per-head lists ([Hq]) and explicit positions (S or B*S values, any
  // shape) are tensors; the other AttentionScores options are parameters.
  return {{"q", model.datatype, HeadShape(d), false},
          {"k", model.datatype, HeadShape(d), false},
          {"v", model.datatype, HeadShape(-1), true},
          {"sinks", "FP32", {-1}, true},
          {"alibi_slopes", "FP32", {-1}, true},
          {"q_positions", "INT64", {-1}, true},
          {"k_positions", "INT64", {-1}, true}};
}

std::vector<TensorSpec> Outputs(const Model& model) {
  const int64_t d = model.head_dim > 0 ? static_cast<int64_t>(model.head_dim) : -1;
  if (model.operation == ModelOperation::kRotate) {
    return {{"q_out", model.datatype, HeadShape(d), false},
            {"k_out", model.datatype, HeadShape(d), false}};
  }
  // Each is a rope.v1 AttentionResult: the outputs a request names are the
  // results it asks for.
  return {{"scores", "FP32", {-1, -1, -1, -1}, false},
          {"output", "FP32", {-1, -1, -1, -1}, false},
          {"lse", "FP32", {-1, -1, -1}, false},
          {"top_k_indices", "INT32", {-1, -1, -1, -1}, false},
          {"top_k_probs", "FP32", {-1, -1, -1, -1}, false},
          {"key_mass", "FP32", {-1, -1, -1}, false},
          {"score_rows", "FP32", {-1, -1, -1, -1}, false}};
}

inference::DataType ConfigType(const std::string& datatype) {
  if (datatype == "FP16") return inference::TYPE_FP16;
  if (datatype == "BF16") return inference::TYPE_BF16;
  if (datatype == "INT64") return inference::TYPE_INT64;
  if (datatype == "INT32") return inference::TYPE_INT32;
  return inference::TYPE_FP32;
}

void AddParameter(const std::string& key, const std::string& value, inference::ModelConfig* out) {
  (*out->mutable_parameters())[key].set_string_value(value);
}

}  // namespace

void DescribeModel(const Model& model, inference::ModelMetadataResponse* out) {
  out->set_name(model.name);
  out->add_versions(kModelVersion);
  out->set_platform(kPlatform);
  for (const TensorSpec& spec : Inputs(model)) {
    auto* input = out->add_inputs();
    input->set_name(spec.name);
    input->set_datatype(spec.datatype);
    input->mutable_shape()->Assign(spec.dims.begin(), spec.dims.end());
  }
  for (const TensorSpec& spec : Outputs(model)) {
    auto* output = out->add_outputs();
    output->set_name(spec.name);
    output->set_datatype(spec.datatype);
    output->mutable_shape()->Assign(spec.dims.begin(), spec.dims.end());
  }
}

void ConfigureModel(const Model& model, inference::ModelInstanceGroup::Kind instance_kind,
                    inference::ModelConfig* out) {
  out->set_name(model.name);
  out->set_platform(kPlatform);
  out->set_backend(kPlatform);
  out->set_max_batch_size(0);
  for (const TensorSpec& spec : Inputs(model)) {
    inference::ModelInput* input = out->add_input();
    input->set_name(spec.name);
    input->set_data_type(ConfigType(spec.datatype));
    input->mutable_dims()->Assign(spec.dims.begin(), spec.dims.end());
    input->set_optional(spec.optional);
  }
  for (const TensorSpec& spec : Outputs(model)) {
    inference::ModelOutput* output = out->add_output();
    output->set_name(spec.name);
    output->set_data_type(ConfigType(spec.datatype));
    output->mutable_dims()->Assign(spec.dims.begin(), spec.dims.end());
  }
  inference::ModelInstanceGroup* group = out->add_instance_group();
  group->set_name(model.name);
  group->set_kind(instance_kind);
  group->set_count(1);
  out->mutable_model_transaction_policy()->set_decoupled(false);
  AddParameter("operation", model.operation == ModelOperation::kRotate ? "rotate" : "attention",
               out);
  if (model.builtin) {
    AddParameter("config",
                 "request parameters (theta, head_dim, rotary_dim, max_len, layout, "
                 "rope_scaling, rotary_offset, no_rope, or hf_config_json with "
                 "hf_layer_type / hf_layer_index)",
                 out);
    return;
  }
  AddParameter("config_source", model.source, out);
  AddParameter("head_dim", absl::StrCat(model.head_dim), out);
  AddParameter("max_len", absl::StrCat(model.config.max_len()), out);
  AddParameter("layout", model.config.layout() == v1::HALF ? "half" : "interleaved", out);
  if (!model.layer_type.empty()) AddParameter("hf_layer_type", model.layer_type, out);
  if (model.layer_index.has_value()) {
    AddParameter("hf_layer_index", absl::StrCat(*model.layer_index), out);
  }
  if (model.config.has_no_rope()) AddParameter("no_rope", "true", out);
  // The explicit configuration the config.json resolved to.
  AddParameter("theta", absl::StrFormat("%.17g", model.config.theta()), out);
  AddParameter("rotary_dim", absl::StrCat(model.config.rotary_dim()), out);
  if (model.config.scaling_case() != v1::RopeConfig::SCALING_NOT_SET) {
    const google::protobuf::FieldDescriptor* field =
        v1::RopeConfig::descriptor()->FindFieldByNumber(model.config.scaling_case());
    AddParameter("scaling", field != nullptr ? field->name() : "", out);
  }
}

}  // namespace kserve
}  // namespace rope
