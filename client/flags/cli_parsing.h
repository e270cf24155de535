// Parsers for ropectl and ropeload flag values that are more than a scalar. Each returns
// INVALID_ARGUMENT naming what is wrong with the value.
#ifndef ROPE_CLIENT_FLAGS_CLI_PARSING_H_
#define ROPE_CLIENT_FLAGS_CLI_PARSING_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rope/v1/rope.pb.h"

namespace rope {
namespace client {

// "1,2,3" -> {1, 2, 3}. Spaces around items are allowed; empty items are
// not. An empty string is an empty list.
absl::StatusOr<std::vector<int64_t>> ParseInt64List(absl::string_view text);

// "output,lse" -> {OUTPUT, LSE}: rope.v1.AttentionResult names (scores,
// output, lse, top_k, key_mass, score_rows; any case), each at most once;
// "" -> {} (the request's default). INVALID_ARGUMENT naming the item.
absl::StatusOr<std::vector<v1::AttentionResult>> ParseAttentionResults(absl::string_view text);

// "0.5,-1,2e-3" -> {0.5, -1, 0.002}; "" -> {}. INVALID_ARGUMENT naming the
// item that is not a finite number.
absl::StatusOr<std::vector<double>> ParseDoubleList(absl::string_view text);

// "B,S,H,D" -> dims, each >= 1; rank 1..8.
absl::StatusOr<std::vector<int64_t>> ParseShape(absl::string_view text);

// A FlagSet validator: "" (flag not used) or a valid ParseShape input.
absl::Status ValidateOptionalShape(absl::string_view text);

// "interleaved" | "half" (also "neox" for half, "gptj" / "llama" for
// interleaved, the names used by the checkpoints' model families).
absl::StatusOr<v1::Layout> ParseLayout(absl::string_view text);
std::string LayoutName(v1::Layout layout);

}  // namespace client
}  // namespace rope

#endif  // ROPE_CLIENT_FLAGS_CLI_PARSING_H_
