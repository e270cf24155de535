// The rope.v1.RopeService RPCs as plain functions: one entry per RPC, from
// the request message to the reply message, over an Engine; and, per RPC,
// what admission needs to know of a call before it runs (Estimate*).
//
// Rotate and AttentionScores take their tensors inline or by shared-memory
// reference alike: every tensor is resolved once into an engine view
// (tensor_resolver.h), and each RPC's tensors are one table in
// rope_calls.cc (adding an input or an output is an entry there).
//
// The service's handlers call these on their work queue (server/service/
// rope_service.cc) and ropeload's --verify oracle calls them in-process
// (client/load/verifier.cc), so that a reply means the same thing on both
// sides. No gRPC here: transport concerns (admission, deadlines, metrics)
// stay in the service; the caller's identity comes in CallContext.
//
// Each returns the engine's status (the most specific code, naming the field
// and value) and leaves `reply` unspecified on error. Thread-safe as the
// Engine is.
#ifndef ROPE_PROTO_ENGINE_ROPE_CALLS_H_
#define ROPE_PROTO_ENGINE_ROPE_CALLS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/engine/engine.h"
#include "core/engine/interrupt.h"
#include "core/proto_engine/reply_limit.h"
#include "core/proto_engine/tensor_resolver.h"
#include "rope/v1/rope.pb.h"

namespace rope {

// What a call brings besides its request message.
struct CallContext {
  // The caller's shared-memory regions, for references; none by default
  // (a reference is then refused).
  CallerRegions regions;
  // Lets a call stop early when the caller has gone (CANCELLED or
  // DEADLINE_EXCEEDED): while an hf_config_json is parsed (every RPC) and
  // between pieces of AttentionScores' work; may be null.
  const Interrupt* interrupt = nullptr;
  // The server's limit on one reply: AttentionScores refuses a call whose
  // inline results would pass it before any work. No limit by default.
  ReplyLimit reply_limit = ReplyLimit(0);
};

// What admission needs to know of a call, from its request alone (no
// lookup, no lock, no validation: a malformed request gets a small figure
// and is refused by validation later with the more specific status).
struct CallEstimate {
  // Bytes the call allocates beyond its request until its reply is sent,
  // saturating at INT64_MAX: the reply's tensor payload, the serialized copy
  // gRPC makes of it, and the engine's working copies; results written to
  // shared memory add nothing. What the byte budget charges beside the
  // request's own bytes (server/service/byte_budget.h).
  int64_t more_bytes = 0;
  // Whether the work is small and bounded enough to run on the thread that
  // received the call: no shared-memory reference (no lookup, lock or
  // fstat), an explicit config (no config.json to parse) whose table is at
  // most kInlineMaxLen rows (a table-cache miss builds at most that many).
  // The caller adds its own bound on the request's size and backend.
  bool may_run_inline = false;
};

// The largest max_len of a call that may run inline: a table-cache miss
// then builds at most this many rows (about a millisecond at head_dim 128).
inline constexpr uint32_t kInlineMaxLen = 32768;

// Rotate: rotates q (and k) in place, in the request's own bytes (then moved
// into `reply` without copying) or in their regions, or into q_out / k_out
// (the reply then names those references). On error `request` is as the
// engine leaves it (untouched for bad input).
absl::Status AnswerRotate(Engine& engine, v1::RotateRequest* request, v1::RotateResponse* reply,
                          const CallContext& call = {});
CallEstimate EstimateRotate(const v1::RotateRequest& request);

// The AttentionResult names AttentionScores answers, from its own table of
// results (one or two reply tensors each), in wire-number order: what
// GetServerInfo advertises.
std::vector<std::string> SupportedAttentionResultNames();

// AttentionScores: the results `results` asks for (empty: scores, and
// output when v is present), written straight into `reply`'s bytes, or into
// their references (scores_out, output_out, lse_out, top_k_indices_out,
// top_k_probs_out, key_mass_out, score_rows_out; the reply then names
// them). RESOURCE_EXHAUSTED before any work when the inline results would
// pass call.reply_limit.
absl::Status AnswerAttentionScores(Engine& engine, const v1::AttentionScoresRequest& request,
                                   v1::AttentionScoresResponse* reply,
                                   const CallContext& call = {});
// Counts only the requested results that the reply carries (at most
// `limit`: a larger reply is refused before any work).
CallEstimate EstimateAttentionScores(const v1::AttentionScoresRequest& request,
                                     const ReplyLimit& limit = ReplyLimit());

// GetTable: rows [start, start + count) of cos and sin, inv_freq and the
// attention factor. INVALID_ARGUMENT when config is missing;
// RESOURCE_EXHAUSTED naming the row count when cos + sin would exceed
// `limit` (checked before any row is copied).
absl::Status AnswerGetTable(Engine& engine, const v1::GetTableRequest& request,
                            const ReplyLimit& limit, v1::GetTableResponse* reply,
                            const Interrupt* interrupt = nullptr);
// The rows come from the request (count, or max_len - start; `max_len_cap`
// for a config without max_len; 0 when start + count passes max_len: such a
// request is refused OUT_OF_RANGE by the engine's checks, not by the budget), rotary_dim, else head_dim, else 256 (a
// config.json's); the payload at most `limit`.
CallEstimate EstimateGetTable(const v1::GetTableRequest& request, int64_t max_len_cap,
                              const ReplyLimit& limit);

// ResolveConfig: the explicit RopeConfig the server derives from `config`
// (from its hf_config_json when set), with inv_freq, the attention factor
// and the table-cache key.
absl::Status AnswerResolveConfig(Engine& engine, const v1::RopeConfig& config,
                                 v1::ResolvedConfig* reply, const Interrupt* interrupt = nullptr);
CallEstimate EstimateResolveConfig(const v1::RopeConfig& config);

// BuildPositions: the positions the request describes
// (core/engine/position_builder.h). RESOURCE_EXHAUSTED, before any is
// built, when the reply could exceed `limit` or the server's
// max_elements_per_request values. `interrupt` as ResolveConfig's.
absl::Status AnswerBuildPositions(Engine& engine, const v1::BuildPositionsRequest& request,
                                  const ReplyLimit& limit, v1::BuildPositionsResponse* reply,
                                  const Interrupt* interrupt = nullptr);
// The reply the request can produce at most (clamped to `limit`) and the
// engine's list of values behind it.
CallEstimate EstimateBuildPositions(const v1::BuildPositionsRequest& request,
                                    const ReplyLimit& limit);

}  // namespace rope

#endif  // ROPE_PROTO_ENGINE_ROPE_CALLS_H_
