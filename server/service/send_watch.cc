#include "server/service/send_watch.h"

#include <utility>

namespace rope {

SendWatch::SendWatch(absl::Duration timeout) : timeout_(timeout) {
  if (timeout_ != absl::InfiniteDuration()) thread_ = std::thread([this] { Run(); });
}

SendWatch::~SendWatch() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

SendWatch::Ticket SendWatch::Arm(absl::AnyInvocable<void() &&> expire) {
  if (!thread_.joinable()) return 0;
  const absl::Time deadline = absl::Now() + timeout_;
  absl::MutexLock lock(&mu_);
  const Ticket ticket = next_++;
  armed_.emplace(ticket, Armed{deadline, std::move(expire)});
  return ticket;
}

void SendWatch::Disarm(Ticket ticket) {
  if (ticket == 0) return;
  absl::MutexLock lock(&mu_);
  if (armed_.erase(ticket) > 0) return;
  if (std::this_thread::get_id() == thread_.get_id()) return;  // from within its callback
  auto not_firing = [this, ticket]()
                        ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return firing_ != ticket; };
  mu_.Await(absl::Condition(&not_firing));
}

int64_t SendWatch::expired() const {
  absl::MutexLock lock(&mu_);
  return expired_;
}

void SendWatch::Run() {
  absl::MutexLock lock(&mu_);
  auto stop_or_armed = [this]()
                           ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !armed_.empty(); };
  auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
  while (true) {
    mu_.Await(absl::Condition(&stop_or_armed));
    if (stop_) return;
    // Entries armed meanwhile expire later than the first: waking for the
    // first is enough (one disarmed meanwhile only wakes the loop early).
    const absl::Time deadline = armed_.begin()->second.deadline;
    if (absl::Now() < deadline) {
      if (mu_.AwaitWithDeadline(absl::Condition(&stopped), deadline)) return;
      continue;
    }
    auto first = armed_.begin();
    firing_ = first->first;
    absl::AnyInvocable<void() &&> expire = std::move(first->second.expire);
    armed_.erase(first);
    ++expired_;
    mu_.Unlock();
    std::move(expire)();
    mu_.Lock();
    firing_ = 0;
  }
}

}  // namespace rope
