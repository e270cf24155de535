#include "server/service/stream_limits.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/service/caller_identity.h"

namespace rope {

StreamLimits::StreamLimits(int64_t max_per_client, absl::Duration idle_timeout,
                           bool tokens_verified)
    : tokens_verified_(tokens_verified),
      open_(max_per_client, "streams open", "max_streams_per_client"),
      idle_(idle_timeout) {}

StreamHold::StreamHold(StreamLimits* limits, absl::string_view rpc)
    : limits_(limits), rpc_(rpc) {}

StreamHold::~StreamHold() { Close(); }

absl::Status StreamHold::Open(const grpc::ServerContextBase& context) {
  if (limits_ == nullptr) return absl::OkStatus();
  if (limits_->max_per_client() > 0) {
    client_ = CallerIdentity(context, limits_->tokens_verified_, IdentityUse::kShare);
    absl::Status opened = limits_->open_.TryAcquire(client_);
    if (!opened.ok()) {
      absl::Status refused = absl::ResourceExhaustedError(
          absl::StrCat(rpc_, " refused at open: ", opened.message()));
      limits_->log_.Note("RESOURCE_EXHAUSTED (max_streams_per_client)", refused.message());
      return refused;
    }
  }
  limits_->open_total_.fetch_add(1, std::memory_order_relaxed);
  counted_.store(true);
  return absl::OkStatus();
}

void StreamHold::StartIdle(absl::AnyInvocable<void(grpc::Status) &&> finish) {
  if (limits_ == nullptr) return;
  const absl::Duration timeout = limits_->idle_timeout();
  ticket_ = limits_->idle_.Arm([this, timeout, finish = std::move(finish)]() mutable {
    idled_out_.store(true);
    Release();
    const std::string message =
        absl::StrCat(rpc_, ": no message for ", absl::FormatDuration(timeout),
                     " (stream_idle_timeout ", absl::FormatDuration(timeout),
                     "): the server finished the idle stream; open a new one to send more");
    std::move(finish)(grpc::Status(grpc::StatusCode::UNAVAILABLE, message));
  });
}

bool StreamHold::StopIdle() {
  if (ticket_ != 0) {
    limits_->idle_.Disarm(ticket_);
    ticket_ = 0;
  }
  return idled_out_.load();
}

void StreamHold::Release() {
  if (!counted_.exchange(false)) return;
  limits_->open_total_.fetch_sub(1, std::memory_order_relaxed);
  if (!client_.empty()) limits_->open_.Release(client_);
}

void StreamHold::Close() {
  StopIdle();
  Release();
}

}  // namespace rope
