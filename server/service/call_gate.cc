#include "server/service/call_gate.h"

#include "absl/strings/str_cat.h"

namespace rope {

absl::Status DrainingError() {
  return absl::UnavailableError("server is draining (shutting down): retry on another replica");
}

CallGate::CallGate(int64_t max_in_flight, int64_t max_per_client)
    : max_in_flight_(max_in_flight), share_(max_per_client) {}

absl::Status CallGate::TryEnter(absl::string_view client) {
  absl::Status refused;
  absl::string_view kind;
  if (draining()) {
    refused = DrainingError();
    refusals_.Note("UNAVAILABLE (draining)", refused.message());
    return refused;
  }
  if (absl::Status share = share_.TryAcquire(client); !share.ok()) {
    refusals_.Note("RESOURCE_EXHAUSTED (max_calls_per_client)", share.message());
    return share;
  }
  {
    absl::MutexLock lock(&mu_);
    if (draining_) {
      refused = DrainingError();
      kind = "UNAVAILABLE (draining)";
    } else if (max_in_flight_ > 0 && in_flight_ >= max_in_flight_) {
      refused = absl::ResourceExhaustedError(absl::StrCat(
          "too many calls in flight: ", in_flight_, " of max_concurrent_calls ", max_in_flight_,
          " are running; retry later"));
      kind = "RESOURCE_EXHAUSTED (max_concurrent_calls)";
    } else {
      ++in_flight_;
      return absl::OkStatus();
    }
  }
  share_.Release(client);
  refusals_.Note(kind, refused.message());
  return refused;
}

void CallGate::Leave(absl::string_view client) {
  share_.Release(client);
  absl::MutexLock lock(&mu_);
  --in_flight_;
}

void CallGate::BeginDrain() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
}

bool CallGate::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}

bool CallGate::WaitForIdle(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; };
  return mu_.AwaitWithDeadline(absl::Condition(&idle), deadline);
}

int64_t CallGate::in_flight() const {
  absl::MutexLock lock(&mu_);
  return in_flight_;
}

}  // namespace rope
