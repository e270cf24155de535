// WorkQueue: a fixed set of threads that run the service's calls.
//
// gRPC runs callback-API handlers on a few library threads; arithmetic done
// there would stall every other call's I/O (and admission). Handlers admit a
// call, hand its work here, and return at once; the task finishes the call.
//
// Thread-safe. Tasks run in FIFO order on whichever thread is free.
#ifndef ROPE_SERVICE_WORK_QUEUE_H_
#define ROPE_SERVICE_WORK_QUEUE_H_

#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace rope {

class WorkQueue {
 public:
  // `threads` <= 0 means one per hardware thread.
  explicit WorkQueue(int threads);
  // Runs every task already scheduled, then joins the threads.
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  void Schedule(absl::AnyInvocable<void() &&> task);
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  void ThreadMain();

  absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void() &&>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace rope

#endif  // ROPE_SERVICE_WORK_QUEUE_H_
