// The one parser for JSON a client sends (a model's config.json in
// hf_config_json): linear in the text, bounded in nesting, and stoppable by
// the caller's interrupt. hf_config.cc reads rope keys and
// qwen_rope_index.cc reads token ids through it.
#ifndef ROPE_ENGINE_BOUNDED_JSON_H_
#define ROPE_ENGINE_BOUNDED_JSON_H_

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/engine/interrupt.h"

namespace rope {

// Real config.json files nest 3 or 4 levels; the limit keeps a hostile
// document from building a deep tree (nlohmann's parser itself is
// iterative, its tree is not). The top-level object is level 1.
inline constexpr int kMaxJsonDepth = 64;

// Parses `text` into a JSON object. INVALID_ARGUMENT, the message starting
// "hf_config_json", for malformed JSON, nesting deeper than kMaxJsonDepth
// levels or a top-level value that is not an object; CANCELLED or
// DEADLINE_EXCEEDED when `interrupt` (may be null; polled every few
// thousand values) says stop.
absl::StatusOr<nlohmann::json> ParseConfigJson(absl::string_view text,
                                               const Interrupt* interrupt);

// `text` cut to at most `max` bytes on a UTF-8 character boundary, with its
// full length noted when cut (for quoting client values in messages).
std::string TruncatedUtf8(absl::string_view text, size_t max);

}  // namespace rope

#endif  // ROPE_ENGINE_BOUNDED_JSON_H_
