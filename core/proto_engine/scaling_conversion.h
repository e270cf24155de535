// rope.v1.RopeConfig's `scaling` oneof <-> the engine's ScalingConfig.
#ifndef ROPE_PROTO_ENGINE_SCALING_CONVERSION_H_
#define ROPE_PROTO_ENGINE_SCALING_CONVERSION_H_

#include "absl/status/statusor.h"
#include "rope/v1/rope.pb.h"
#include "core/engine/scaling.h"

namespace rope {

// Copies every parameter as sent (0 keeps meaning "default"; an absent
// YarnScaling.truncate is true; DeepseekYarnScaling's absent optional
// fields are vLLM's defaults); the engine validates the values and fills
// the defaults.
ScalingConfig ScalingFromProto(const v1::RopeConfig& proto);

// Sets `proto`'s scaling oneof to `scaling` (cleared for NoScaling). Every
// parameter is written, YarnScaling.truncate included.
void ScalingToProto(const ScalingConfig& scaling, v1::RopeConfig* proto);

}  // namespace rope

#endif  // ROPE_PROTO_ENGINE_SCALING_CONVERSION_H_
