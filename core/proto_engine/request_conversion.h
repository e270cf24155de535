// Conversions between rope.v1 messages and the engine's structs.
//
// These check only what the engine cannot see once a message is gone: enum
// values that are out of range or unspecified, missing sub-messages, scaling
// variants this server does not implement. Everything else (shapes, byte
// lengths, dims, positions, limits) is the engine's to validate, in one place.
// Every error names the field and its value.
#ifndef ROPE_PROTO_ENGINE_REQUEST_CONVERSION_H_
#define ROPE_PROTO_ENGINE_REQUEST_CONVERSION_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rope/v1/rope.pb.h"
#include "core/engine/dtype.h"
#include "core/engine/engine.h"
#include "core/engine/rope_config.h"
#include "core/engine/tensor.h"

namespace rope {

// INVALID_ARGUMENT for DTYPE_UNSPECIFIED and for values outside the enum
// (proto3 keeps unknown numbers), naming `field` (e.g. "q.dtype").
absl::StatusOr<DType> DTypeFromProto(int value, absl::string_view field);
v1::DType DTypeToProto(DType dtype);

// LAYOUT_UNSPECIFIED means INTERLEAVED; INVALID_ARGUMENT for unknown values.
absl::StatusOr<Layout> LayoutFromProto(int value, absl::string_view field);

// INVALID_ARGUMENT for a bad layout. Numeric fields, mrope and the
// hf_config_json / hf_layer_type strings are copied as they are: the engine
// resolves and validates them.
absl::StatusOr<RopeConfig> ConfigFromProto(const v1::RopeConfig& config);

// The wire form of an explicit engine config (hf_config_json empty).
v1::RopeConfig ConfigToProto(const RopeConfig& config);

// ResolveConfig's reply.
v1::ResolvedConfig ResolvedConfigToProto(const ResolvedConfig& resolved);

// Views of a message's tensor. The view points into `tensor`'s bytes field,
// which must outlive it; the mutable view lets the engine rotate in place.
absl::StatusOr<TensorView> MutableTensorViewOf(v1::Tensor* tensor, absl::string_view field);
absl::StatusOr<ConstTensorView> TensorViewOf(const v1::Tensor& tensor, absl::string_view field);

// RotateParams whose q/k views point into `request`'s own bytes, so that
// Engine::Rotate rotates the request in place. `request` must outlive the
// params.
absl::StatusOr<RotateParams> RotateParamsFromProto(v1::RotateRequest* request);

// AttentionParams whose views point into `request`, which must outlive them.
absl::StatusOr<AttentionParams> AttentionParamsFromProto(const v1::AttentionScoresRequest& request);

}  // namespace rope

#endif  // ROPE_PROTO_ENGINE_REQUEST_CONVERSION_H_
