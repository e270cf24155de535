#include "server/kserve/kserve_reply.h"

#include <string>

namespace rope {
namespace kserve {

void ToResponse(InferReply* reply, inference::ModelInferResponse* response) {
  response->Clear();
  response->set_model_name(std::string(reply->model_name));
  response->set_model_version(std::string(reply->model_version));
  response->set_id(std::move(reply->id));
  for (int i = 0; i < reply->output_count; ++i) {
    InferReply::Output& from = reply->outputs[i];
    inference::ModelInferResponse::InferOutputTensor* output = response->add_outputs();
    output->set_name(std::string(from.name));
    output->set_datatype(std::string(from.datatype));
    output->mutable_shape()->Swap(&from.shape);
    for (auto& [key, value] : from.parameters) {
      (*output->mutable_parameters())[key] = std::move(value);
    }
    response->add_raw_output_contents()->swap(reply->raw[i]);
  }
}

}  // namespace kserve
}  // namespace rope
