// FaultBackend: a Backend wrapper for service tests (leveldb's EnvWrapper
// style). Delegates to a real backend, and on request returns an injected
// status instead, or holds every call until released, so tests can check
// error mapping and keep calls in flight deterministically.
//
// Thread-safe.
#ifndef ROPE_TESTS_SERVICE_FAULT_BACKEND_H_
#define ROPE_TESTS_SERVICE_FAULT_BACKEND_H_

#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/engine/backend.h"

namespace rope {
namespace test {

class FaultBackend final : public Backend {
 public:
  explicit FaultBackend(std::unique_ptr<Backend> base) : base_(std::move(base)) {}

  // Every Rotate/AttentionScores returns `status` (untouched tensors) until
  // it is set back to OK.
  void InjectStatus(absl::Status status);

  // While holding, each call blocks (before doing any work) until Release().
  void Hold();
  void Release();
  // Waits until `count` calls are blocked in Hold; false after `timeout`.
  bool WaitForHeld(int count, absl::Duration timeout);

  BackendInfo info() const override { return base_->info(); }
  // The base backend's, except while holding: a held call waits, so it
  // must not be run on a gRPC thread. (Tests hold before sending.)
  bool CallsNeverWait() const override {
    absl::MutexLock lock(&mu_);
    return !holding_ && base_->CallsNeverWait();
  }
  absl::Status Rotate(const RopeTable& table, const RotateArgs& args) override;
  absl::Status AttentionScores(const RopeTable& table, const AttentionArgs& args) override;
  void ParallelRows(int64_t rows, const std::function<void(int64_t, int64_t)>& fill) override {
    base_->ParallelRows(rows, fill);
  }

 private:
  // Applies the hold, then returns the injected status.
  absl::Status Enter();

  const std::unique_ptr<Backend> base_;
  mutable absl::Mutex mu_;
  absl::Status injected_ ABSL_GUARDED_BY(mu_);
  bool holding_ ABSL_GUARDED_BY(mu_) = false;
  int held_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace test
}  // namespace rope

#endif  // ROPE_TESTS_SERVICE_FAULT_BACKEND_H_
