// ThreadPool: a fixed set of worker threads running ParallelFor loops.
//
// Thread-safe: many threads may call ParallelFor at once; their chunks share
// the workers, and each caller also works on its own loop, so a loop always
// makes progress even when every worker is busy with other loops.
#ifndef ROPE_COMMON_THREAD_POOL_H_
#define ROPE_COMMON_THREAD_POOL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace rope {

class ThreadPool {
 public:
  // Starts `threads - 1` workers (the caller of ParallelFor is the other).
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return threads_; }

  // Calls fn(begin, end) over disjoint ranges covering [0, n), each at least
  // `min_chunk` long (except the last), and returns when all have run.
  void ParallelFor(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn);

 private:
  struct Loop;
  void WorkerMain();
  static bool RunOneChunk(Loop* loop);

  const int threads_;
  absl::Mutex mu_;
  std::deque<std::shared_ptr<Loop>> loops_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace rope

#endif  // ROPE_COMMON_THREAD_POOL_H_
