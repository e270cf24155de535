// How ModelMetadata and ModelConfig describe ropeserve's models, as Triton
// describes its own: name, platform, inputs and outputs with datatypes and
// dims (-1 for a dimension the request chooses), so that clients such as
// perf_analyzer can size their inputs.
//
// Models do not batch (max_batch_size 0): every dims list is a full rank-4
// shape [B, S, H, D] (rope.v1 also takes rank 3); D is the configuration's
// head_dim where the model fixes it.
#ifndef ROPE_SERVER_KSERVE_KSERVE_DESCRIBE_H_
#define ROPE_SERVER_KSERVE_KSERVE_DESCRIBE_H_

#include <string>

#include "inference/grpc_service.pb.h"
#include "inference/model_config.pb.h"
#include "server/kserve/kserve_models.h"

namespace rope {
namespace kserve {

// The platform and backend ropeserve reports for its models.
inline constexpr char kPlatform[] = "ropeserve";

void DescribeModel(const Model& model, inference::ModelMetadataResponse* out);

// `instance_kind` is the server backend's kind (KIND_CPU or KIND_GPU).
void ConfigureModel(const Model& model, inference::ModelInstanceGroup::Kind instance_kind,
                    inference::ModelConfig* out);

}  // namespace kserve
}  // namespace rope

#endif  // ROPE_SERVER_KSERVE_KSERVE_DESCRIBE_H_
