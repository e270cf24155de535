#include "client/attention_merge.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace rope {
namespace client {

absl::StatusOr<AttentionState> MergeAttentionStates(absl::Span<const AttentionState> parts) {
  if (parts.empty()) {
    return absl::InvalidArgumentError("MergeAttentionStates: no parts to merge");
  }
  const AttentionState& first = parts[0];
  const int64_t rows = first.batch * first.q_heads * first.q_seq;
  for (size_t n = 0; n < parts.size(); ++n) {
    const AttentionState& p = parts[n];
    if (p.batch != first.batch || p.q_seq != first.q_seq || p.q_heads != first.q_heads ||
        p.v_dim != first.v_dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MergeAttentionStates: parts[", n, "] is [B ", p.batch, ", Sq ", p.q_seq, ", Hq ",
          p.q_heads, ", Dv ", p.v_dim, "] but parts[0] is [B ", first.batch, ", Sq ",
          first.q_seq, ", Hq ", first.q_heads, ", Dv ", first.v_dim, "]"));
    }
    if (p.batch < 0 || p.q_seq < 0 || p.q_heads < 0 || p.v_dim < 0 ||
        static_cast<int64_t>(p.lse.size()) != rows ||
        static_cast<int64_t>(p.output.size()) != rows * p.v_dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MergeAttentionStates: parts[", n, "] has ", p.output.size(), " output and ",
          p.lse.size(), " lse values: its dimensions need ", rows * p.v_dim, " and ", rows));
    }
  }
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  AttentionState merged;
  merged.batch = first.batch;
  merged.q_seq = first.q_seq;
  merged.q_heads = first.q_heads;
  merged.v_dim = first.v_dim;
  merged.output.assign(rows * first.v_dim, 0.0f);
  merged.lse.assign(rows, static_cast<float>(kNegInf));
  std::vector<double> weight(parts.size()), acc(first.v_dim);
  for (int64_t b = 0; b < first.batch; ++b) {
    for (int64_t h = 0; h < first.q_heads; ++h) {
      for (int64_t i = 0; i < first.q_seq; ++i) {
        const int64_t row = (b * first.q_heads + h) * first.q_seq + i;
        double top = kNegInf;
        for (const AttentionState& p : parts) top = std::max<double>(top, p.lse[row]);
        if (top == kNegInf) continue;  // no key in any range: 0 and -inf
        double total = 0;
        for (size_t n = 0; n < parts.size(); ++n) {
          const double l = parts[n].lse[row];
          weight[n] = l == kNegInf ? 0.0 : std::exp(l - top);
          total += weight[n];
        }
        merged.lse[row] = static_cast<float>(top + std::log(total));
        std::fill(acc.begin(), acc.end(), 0.0);
        const int64_t at = ((b * first.q_seq + i) * first.q_heads + h) * first.v_dim;
        for (size_t n = 0; n < parts.size(); ++n) {
          if (weight[n] == 0) continue;
          const double share = weight[n] / total;
          for (int64_t d = 0; d < first.v_dim; ++d) acc[d] += share * parts[n].output[at + d];
        }
        for (int64_t d = 0; d < first.v_dim; ++d) {
          merged.output[at + d] = static_cast<float>(acc[d]);
        }
      }
    }
  }
  return merged;
}

}  // namespace client
}  // namespace rope
