// WorkQueue: a fixed set of threads that run the service's calls.
//
// gRPC runs callback-API handlers on a few library threads; arithmetic done
// there would stall every other call's I/O (and admission). Handlers admit a
// call, hand its work here, and return at once; the task finishes the call.
//
// Fair between clients: each task is scheduled for a client (the caller's
// identity, caller_identity.h; "" when the server tells none apart), each
// client's tasks wait in a FIFO of their own, and free threads take one task
// from each client with work in turn (round robin). A client that queues
// many calls therefore delays another client's call by at most one of its
// own per turn, not by its whole backlog.
//
// Thread-safe.
#ifndef ROPE_SERVICE_WORK_QUEUE_H_
#define ROPE_SERVICE_WORK_QUEUE_H_

#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace rope {

class WorkQueue {
 public:
  using Task = absl::AnyInvocable<void() &&>;

  // `threads` <= 0 means one per hardware thread.
  explicit WorkQueue(int threads);
  // Runs every task already scheduled, then joins the threads.
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `task` behind `client`'s earlier tasks.
  void Schedule(Task task, const std::string& client = std::string());
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  void ThreadMain();

  absl::Mutex mu_;
  // Clients with queued tasks, in the order they take turns (each appears
  // once), and their tasks.
  std::deque<std::string> turns_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::deque<Task>> queued_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace rope

#endif  // ROPE_SERVICE_WORK_QUEUE_H_
