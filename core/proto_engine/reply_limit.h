// ReplyLimit: the server's limit on one reply (--max_message_bytes), in one
// place. A reply over it is refused with RESOURCE_EXHAUSTED naming the
// limit: before any work where the request alone gives the reply's size
// (GetTable's rows), and on the built reply otherwise (the service's last
// check of every unary reply). Estimates of a reply's bytes for the byte
// budget are clamped to it (a larger reply is refused, never built).
#ifndef ROPE_PROTO_ENGINE_REPLY_LIMIT_H_
#define ROPE_PROTO_ENGINE_REPLY_LIMIT_H_

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace rope {

class ReplyLimit {
 public:
  // `max_bytes` <= 0: no limit.
  explicit ReplyLimit(int64_t max_bytes = 0) : max_bytes_(max_bytes) {}

  int64_t max_bytes() const { return max_bytes_; }

  // OK when a reply of `bytes` fits; else RESOURCE_EXHAUSTED:
  // "<what> (<bytes> bytes) is over the server's max_message_bytes <max>;
  // <advice>".
  absl::Status Check(absl::string_view what, int64_t bytes, absl::string_view advice) const;

  // `bytes`, at most the limit.
  int64_t Clamp(int64_t bytes) const {
    return max_bytes_ > 0 ? std::min(bytes, max_bytes_) : bytes;
  }

 private:
  int64_t max_bytes_;
};

}  // namespace rope

#endif  // ROPE_PROTO_ENGINE_REPLY_LIMIT_H_
