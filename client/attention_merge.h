// Merging attention computed over disjoint key ranges into the attention
// over their union (FlashInfer's merge_state): each range's OUTPUT
// [B, Sq, Hq, Dv] and LSE [B, Hq, Sq] (AttentionScores with results OUTPUT
// and LSE over that range's keys) give
//
//   lse = log(sum_r exp(lse_r))
//   out = sum_r exp(lse_r - lse) out_r
//
// exactly, because out_r is range r's softmax-weighted mean of the values
// and exp(lse_r) its part of the softmax denominator. So one long context
// can be split over calls, or over the replicas of a scale-out deployment
// (docs/design.md, "Merging attention"). A range a query does not see has
// LSE -inf and output 0 and weighs nothing; a query that sees no key in any
// range gets output 0 and LSE -inf. Attention sinks go to exactly one of
// the calls (each call's LSE includes the sinks it was given).
//
// No channel involved; thread-compatible.
#ifndef ROPE_CLIENT_ATTENTION_MERGE_H_
#define ROPE_CLIENT_ATTENTION_MERGE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace rope {
namespace client {

// One call's attention over a range of keys (float32, C order).
struct AttentionState {
  int64_t batch = 1, q_seq = 0, q_heads = 0, v_dim = 0;
  std::vector<float> output;  // [batch, q_seq, q_heads, v_dim]
  std::vector<float> lse;     // [batch, q_heads, q_seq], natural log
};

// The merged state (arithmetic in double, results rounded to float32).
// INVALID_ARGUMENT naming the part when `parts` is empty, the parts'
// dimensions differ, or a part's vectors are not its dimensions' sizes.
absl::StatusOr<AttentionState> MergeAttentionStates(absl::Span<const AttentionState> parts);

}  // namespace client
}  // namespace rope

#endif  // ROPE_CLIENT_ATTENTION_MERGE_H_
