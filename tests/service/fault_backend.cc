#include "tests/service/fault_backend.h"

namespace rope {
namespace test {

void FaultBackend::InjectStatus(absl::Status status) {
  absl::MutexLock lock(&mu_);
  injected_ = std::move(status);
}

void FaultBackend::Hold() {
  absl::MutexLock lock(&mu_);
  holding_ = true;
}

void FaultBackend::Release() {
  absl::MutexLock lock(&mu_);
  holding_ = false;
}

bool FaultBackend::WaitForHeld(int count, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto enough = [this, count]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return held_ >= count; };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

absl::Status FaultBackend::Enter() {
  absl::MutexLock lock(&mu_);
  ++held_;
  // Bounded: a test that forgets Release() fails by its deadline, not hangs.
  auto released = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !holding_; };
  mu_.AwaitWithTimeout(absl::Condition(&released), absl::Seconds(60));
  --held_;
  return injected_;
}

absl::Status FaultBackend::Rotate(const RopeTable& table, const RotateArgs& args) {
  absl::Status status = Enter();
  if (!status.ok()) return status;
  return base_->Rotate(table, args);
}

absl::Status FaultBackend::AttentionScores(const RopeTable& table, const AttentionArgs& args) {
  absl::Status status = Enter();
  if (!status.ok()) return status;
  return base_->AttentionScores(table, args);
}

}  // namespace test
}  // namespace rope
