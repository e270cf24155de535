// BuildPositions' messages <-> the engine's position builder
// (core/engine/position_builder.h), and the reply's size from the request.
#ifndef ROPE_PROTO_ENGINE_POSITIONS_CONVERSION_H_
#define ROPE_PROTO_ENGINE_POSITIONS_CONVERSION_H_

#include <cstdint>

#include "core/engine/position_builder.h"
#include "rope/v1/rope.pb.h"

namespace rope {

// Every field copied as it is: the engine validates them.
PositionsRequest PositionsRequestFromProto(const v1::BuildPositionsRequest& request);

void BuiltPositionsToProto(const BuiltPositions& built, v1::BuildPositionsResponse* reply);

// Positions a request asks for, from its fields alone (before any work):
// 3 per input_ids value, or each grid's dimensions times its tokens,
// saturating at INT64_MAX.
int64_t RequestedPositionValues(const v1::BuildPositionsRequest& request);

// The reply's bytes: every value as a 10-byte varint or 8-byte double,
// whichever the reply will carry, at most; saturating.
int64_t BuildPositionsReplyBytes(const v1::BuildPositionsRequest& request);

}  // namespace rope

#endif  // ROPE_PROTO_ENGINE_POSITIONS_CONVERSION_H_
