// The rope.v1.RopeService RPCs as plain functions: one entry per RPC, from
// the request message to the reply message, over an Engine.
//
// The service's handlers call these on their work queue (server/service/
// rope_service.cc) and ropeload's --verify oracle calls them in-process
// (client/load/verifier.cc), so that a reply means the same thing on both
// sides. No gRPC here: transport concerns (admission, deadlines, reply size
// against the channel limit, metrics) stay in the service.
//
// Each returns the engine's status (the most specific code, naming the field
// and value) and leaves `reply` unspecified on error. Thread-safe as the
// Engine is.
#ifndef ROPE_PROTO_ENGINE_ROPE_CALLS_H_
#define ROPE_PROTO_ENGINE_ROPE_CALLS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "rope/v1/rope.pb.h"
#include "core/engine/engine.h"
#include "core/engine/interrupt.h"

namespace rope {

// Rotate: rotates q (and k) in `request`'s own bytes, then moves them into
// `reply` without copying. On success `request`'s tensors are left empty; on
// error `reply` is untouched and `request` is as Engine::Rotate leaves it
// (untouched for bad input).
absl::Status AnswerRotate(Engine& engine, v1::RotateRequest* request, v1::RotateResponse* reply);

// AttentionScores: scores (and output, when v is present) as float32
// tensors, written straight into `reply`'s bytes. `interrupt` (may be null)
// lets the backend stop early (CANCELLED or DEADLINE_EXCEEDED).
absl::Status AnswerAttentionScores(Engine& engine, const v1::AttentionScoresRequest& request,
                                   v1::AttentionScoresResponse* reply,
                                   const Interrupt* interrupt = nullptr);

// GetTable: rows [start, start + count) of cos and sin, inv_freq and the
// attention factor. INVALID_ARGUMENT when config is missing;
// RESOURCE_EXHAUSTED naming the row count when cos + sin would exceed
// `max_message_bytes` (checked before any row is copied; <= 0: no limit).
absl::Status AnswerGetTable(Engine& engine, const v1::GetTableRequest& request,
                            int64_t max_message_bytes, v1::GetTableResponse* reply);

// ResolveConfig: the explicit RopeConfig the server derives from `config`
// (from its hf_config_json when set), with inv_freq, the attention factor
// and the table-cache key.
absl::Status AnswerResolveConfig(Engine& engine, const v1::RopeConfig& config,
                                 v1::ResolvedConfig* reply);

// BuildPositions: the positions the request describes
// (core/engine/position_builder.h). RESOURCE_EXHAUSTED, before any is
// built, when the reply could exceed `max_message_bytes` (<= 0: no limit)
// or the server's max_elements_per_request values.
absl::Status AnswerBuildPositions(Engine& engine, const v1::BuildPositionsRequest& request,
                                  int64_t max_message_bytes, v1::BuildPositionsResponse* reply);

}  // namespace rope

#endif  // ROPE_PROTO_ENGINE_ROPE_CALLS_H_
