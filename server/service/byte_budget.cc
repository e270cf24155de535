#include "server/service/byte_budget.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace rope {

namespace {

// a + b for non-negative a, b, saturating at INT64_MAX.
int64_t SaturatingAdd(int64_t a, int64_t b) {
  return a > std::numeric_limits<int64_t>::max() - b ? std::numeric_limits<int64_t>::max() : a + b;
}

std::string Describe(absl::string_view what, int64_t held_bytes, int64_t more_bytes,
                     absl::string_view more_name = "reply") {
  return absl::StrCat(what, " needs ", SaturatingAdd(held_bytes, more_bytes),
                      " bytes in flight (request ", held_bytes, " + ", more_name, " ", more_bytes,
                      ")");
}

}  // namespace

ByteBudget::ByteBudget(int64_t budget_bytes, absl::Duration max_wait, std::string budget_text,
                       int64_t per_client_bytes)
    : budget_bytes_(budget_bytes),
      max_wait_(max_wait),
      budget_text_(budget_text.empty() ? absl::StrCat("max_inflight_bytes ", budget_bytes)
                                       : std::move(budget_text)),
      per_client_bytes_(budget_bytes > 0 ? std::max<int64_t>(per_client_bytes, 0) : 0) {
  if (budget_bytes_ > 0) timer_ = std::thread([this] { TimerMain(); });
}

ByteBudget::~ByteBudget() {
  std::list<Waiter> refused;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (const Waiter& waiter : waiters_) {
      in_use_ -= waiter.held_bytes;
      ChargeClientLocked(waiter.client, -waiter.held_bytes);
    }
    refused.swap(waiters_);
    refusals_ += static_cast<int64_t>(refused.size());
    timer_wake_.Signal();
  }
  if (timer_.joinable()) timer_.join();
  for (Waiter& waiter : refused) {
    std::move(waiter.done)(absl::ResourceExhaustedError(
        absl::StrCat(Describe(waiter.what, SaturatingAdd(waiter.prior_bytes, waiter.held_bytes),
                              waiter.more_bytes, waiter.more_name),
                     ": the server stopped while it waited for room in ", budget_text_)));
  }
}

void ByteBudget::Reserve(absl::string_view what, absl::string_view client, int64_t held_bytes,
                         int64_t more_bytes, absl::Time deadline, Done done) {
  ReserveAfter(what, client, 0, held_bytes, more_bytes, "reply", deadline, std::move(done));
}

void ByteBudget::ReserveParse(absl::string_view what, absl::string_view client,
                              int64_t wire_bytes, int64_t parsed_bytes, absl::Time deadline,
                              Done done) {
  ReserveAfter(what, client, 0, wire_bytes, parsed_bytes, "parsed", deadline, std::move(done));
}

bool ByteBudget::TryReserve(absl::string_view client, int64_t bytes) {
  bytes = std::max<int64_t>(bytes, 0);
  absl::MutexLock lock(&mu_);
  if (budget_bytes_ <= 0) {
    in_use_ = SaturatingAdd(in_use_, bytes);
    return true;
  }
  if (in_use_ > budget_bytes_ - bytes || !ShareFitsLocked(client, 0, bytes)) return false;
  in_use_ += bytes;
  ChargeClientLocked(client, bytes);
  return true;
}

void ByteBudget::TopUp(absl::string_view what, absl::string_view client, int64_t charged_bytes,
                       int64_t more_bytes, absl::Time deadline, Done done) {
  ReserveAfter(what, client, charged_bytes, 0, more_bytes, "reply", deadline, std::move(done));
}

void ByteBudget::ReserveAfter(absl::string_view what, absl::string_view client,
                              int64_t prior_bytes, int64_t held_bytes, int64_t more_bytes,
                              absl::string_view more_name, absl::Time deadline, Done done) {
  prior_bytes = std::max<int64_t>(prior_bytes, 0);
  held_bytes = std::max<int64_t>(held_bytes, 0);
  more_bytes = std::max<int64_t>(more_bytes, 0);
  const int64_t total = SaturatingAdd(held_bytes, more_bytes);
  absl::Status answer;
  {
    absl::MutexLock lock(&mu_);
    if (budget_bytes_ <= 0) {
      in_use_ = SaturatingAdd(in_use_, total);
    } else if (SaturatingAdd(prior_bytes, total) > budget_bytes_) {
      answer = absl::ResourceExhaustedError(absl::StrCat(
          Describe(what, SaturatingAdd(prior_bytes, held_bytes), more_bytes, more_name),
          ": more than the server's whole ", budget_text_, "; send less per call"));
    } else if (in_use_ + held_bytes > budget_bytes_) {
      answer = absl::ResourceExhaustedError(absl::StrCat(
          Describe(what, SaturatingAdd(prior_bytes, held_bytes), more_bytes, more_name), ": ",
          in_use_, " bytes of the server's ", budget_text_, " are in use; retry later"));
    } else if (in_use_ + total <= budget_bytes_ && ShareFitsLocked(client, prior_bytes, total)) {
      in_use_ += total;
      ChargeClientLocked(client, total);
    } else {
      // Its request is resident: charge it now, and wait for the reply's room.
      in_use_ += held_bytes;
      ChargeClientLocked(client, held_bytes);
      const absl::Time now = absl::Now();
      waiters_.push_back(Waiter{std::string(what), std::string(client), std::string(more_name),
                                prior_bytes, held_bytes, more_bytes, now,
                                std::min(deadline, now + max_wait_), std::move(done)});
      timer_wake_.Signal();
      return;
    }
    if (!answer.ok()) ++refusals_;
  }
  std::move(done)(std::move(answer));
}

void ByteBudget::GrantLocked(std::list<Waiter>& granted) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (in_use_ + it->more_bytes <= budget_bytes_ &&
        ShareFitsLocked(it->client, SaturatingAdd(it->prior_bytes, it->held_bytes),
                        it->more_bytes)) {
      in_use_ += it->more_bytes;
      ChargeClientLocked(it->client, it->more_bytes);
      auto next = std::next(it);
      granted.splice(granted.end(), waiters_, it);
      it = next;
    } else {
      ++it;
    }
  }
}

void ByteBudget::Release(absl::string_view client, int64_t bytes) {
  std::list<Waiter> granted;
  {
    absl::MutexLock lock(&mu_);
    in_use_ -= bytes;
    ChargeClientLocked(client, -bytes);
    GrantLocked(granted);
  }
  for (Waiter& waiter : granted) std::move(waiter.done)(absl::OkStatus());
}

void ByteBudget::RefuseWaiting(const absl::Status& status) {
  std::list<Waiter> refused;
  {
    absl::MutexLock lock(&mu_);
    for (const Waiter& waiter : waiters_) {
      in_use_ -= waiter.held_bytes;
      ChargeClientLocked(waiter.client, -waiter.held_bytes);
    }
    refused.swap(waiters_);
  }
  for (Waiter& waiter : refused) std::move(waiter.done)(status);
}

void ByteBudget::TimerMain() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    absl::Time next = absl::InfiniteFuture();
    for (const Waiter& waiter : waiters_) next = std::min(next, waiter.give_up);
    timer_wake_.WaitWithDeadline(&mu_, next);
    const absl::Time now = absl::Now();
    std::list<Waiter> expired;
    std::list<std::string> reasons;  // why each expired waiter did not fit
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      auto next_it = std::next(it);
      if (it->give_up <= now) {
        const std::string waited = absl::StrCat(
            "waited ", absl::FormatDuration(absl::Trunc(now - it->since, absl::Milliseconds(1))),
            " (its deadline, or the server's wait limit ", absl::FormatDuration(max_wait_),
            ") for room in ");
        reasons.push_back(in_use_ + it->more_bytes <= budget_bytes_
                              ? absl::StrCat(waited, "its client's share: ",
                                             ShareRefusalLocked(
                                                 it->client, SaturatingAdd(it->prior_bytes,
                                                                           it->held_bytes)))
                              : absl::StrCat(waited, "the server's ", budget_text_, " (", in_use_,
                                             " in use); retry later"));
        in_use_ -= it->held_bytes;
        ChargeClientLocked(it->client, -it->held_bytes);
        ++refusals_;
        expired.splice(expired.end(), waiters_, it);
      }
      it = next_it;
    }
    if (expired.empty()) continue;
    // Returning the requests' bytes may let other waiters in.
    std::list<Waiter> granted;
    GrantLocked(granted);
    mu_.Unlock();
    auto reason = reasons.begin();
    for (Waiter& waiter : expired) {
      std::move(waiter.done)(absl::ResourceExhaustedError(absl::StrCat(
          Describe(waiter.what, SaturatingAdd(waiter.prior_bytes, waiter.held_bytes),
                   waiter.more_bytes, waiter.more_name),
          ": ", *reason++)));
    }
    for (Waiter& waiter : granted) std::move(waiter.done)(absl::OkStatus());
    mu_.Lock();
  }
}

bool ByteBudget::ShareFitsLocked(absl::string_view client, int64_t own_bytes,
                                 int64_t bytes) const {
  if (per_client_bytes_ <= 0 || client.empty()) return true;
  const int64_t held = ClientBytesLocked(client);
  return held - own_bytes <= 0 || SaturatingAdd(held, bytes) <= per_client_bytes_;
}

int64_t ByteBudget::ClientBytesLocked(absl::string_view client) const {
  auto it = client_in_use_.find(client);
  return it == client_in_use_.end() ? 0 : it->second;
}

void ByteBudget::ChargeClientLocked(absl::string_view client, int64_t bytes) {
  if (per_client_bytes_ <= 0 || client.empty() || bytes == 0) return;
  auto [it, added] = client_in_use_.try_emplace(client, 0);
  it->second += bytes;
  if (it->second <= 0) client_in_use_.erase(it);
}

std::string ByteBudget::ShareRefusalLocked(absl::string_view client, int64_t own_bytes) const {
  return absl::StrCat("client ", client, " has ", ClientBytesLocked(client) - own_bytes,
                      " bytes in flight beside it: its share is max_inflight_bytes_per_client ",
                      per_client_bytes_, " of the server's ", budget_text_, "; retry later");
}

int64_t ByteBudget::client_bytes(absl::string_view client) const {
  absl::MutexLock lock(&mu_);
  return ClientBytesLocked(client);
}

int64_t ByteBudget::in_use_bytes() const {
  absl::MutexLock lock(&mu_);
  return in_use_;
}

int64_t ByteBudget::waiters() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(waiters_.size());
}

int64_t ByteBudget::refusals() const {
  absl::MutexLock lock(&mu_);
  return refusals_;
}

}  // namespace rope
