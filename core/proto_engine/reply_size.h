// The bytes a reply will take, from its request alone (before any work), for
// the server's budget of bytes in flight (server/service/byte_budget.h).
//
// Estimates, not validation: a request whose shapes do not match its bytes
// gets a small estimate (validation refuses it before its reply is built,
// with the more specific INVALID_ARGUMENT). Each is the size of the
// reply message's tensor payload, saturating at INT64_MAX.
#ifndef ROPE_PROTO_ENGINE_REPLY_SIZE_H_
#define ROPE_PROTO_ENGINE_REPLY_SIZE_H_

#include <cstdint>

#include "rope/v1/rope.pb.h"

namespace rope {

// q and k, rotated (the same bytes as the request's).
int64_t RotateReplyBytes(const v1::RotateRequest& request);

// float32 scores [B, Hq, Sq, Sk], plus float32 output [B, Sq, Hq, Dv] when v
// is given, plus the engine's float32 working copies of q and k (and a copy
// of q in its dtype when the config may be a tuned NoPE layer). Tensors sent
// by shared-memory reference count by their shapes: the engine computes
// into server memory before copying into the caller's region.
int64_t AttentionScoresReplyBytes(const v1::AttentionScoresRequest& request);

// float32 cos and sin, rows x rotary_dim / 2 each: rows = count, or max_len -
// start when count is 0 (`max_len_cap` when the config gives no max_len);
// rotary_dim, else head_dim, else 256 (hf_config_json configs). At most
// `max_reply_bytes` when > 0 (larger replies are refused before any row is
// copied).
int64_t GetTableReplyBytes(const v1::GetTableRequest& request, int64_t max_len_cap,
                           int64_t max_reply_bytes);

}  // namespace rope

#endif  // ROPE_PROTO_ENGINE_REPLY_SIZE_H_
