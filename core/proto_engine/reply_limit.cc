#include "core/proto_engine/reply_limit.h"

#include "absl/strings/str_cat.h"

namespace rope {

absl::Status ReplyLimit::Check(absl::string_view what, int64_t bytes,
                               absl::string_view advice) const {
  if (max_bytes_ <= 0 || bytes <= max_bytes_) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(what, " (", bytes,
                                                   " bytes) is over the server's "
                                                   "max_message_bytes ",
                                                   max_bytes_, "; ", advice));
}

}  // namespace rope
