#include "server/service/client_share.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace rope {

ClientShare::ClientShare(int64_t max_per_client, std::string held, std::string flag)
    : max_per_client_(max_per_client), held_(std::move(held)), flag_(std::move(flag)) {}

absl::Status ClientShare::TryAcquire(absl::string_view client) {
  if (max_per_client_ <= 0 || client.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  int64_t& count = in_flight_[client];
  if (count >= max_per_client_) {
    return absl::ResourceExhaustedError(absl::StrCat("client ", client, " has ", count, " ",
                                                     held_, ": its share is ", flag_, " ",
                                                     max_per_client_, "; retry later"));
  }
  ++count;
  return absl::OkStatus();
}

void ClientShare::Release(absl::string_view client) {
  if (max_per_client_ <= 0 || client.empty()) return;
  absl::MutexLock lock(&mu_);
  auto it = in_flight_.find(client);
  if (it == in_flight_.end()) return;
  if (--it->second <= 0) in_flight_.erase(it);
}

int64_t ClientShare::in_flight(absl::string_view client) const {
  absl::MutexLock lock(&mu_);
  auto it = in_flight_.find(client);
  return it == in_flight_.end() ? 0 : it->second;
}

}  // namespace rope
