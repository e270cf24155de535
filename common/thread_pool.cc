#include "common/thread_pool.h"

#include <algorithm>
#include <atomic>

namespace rope {

// One ParallelFor call: chunks are claimed with an atomic counter, so the
// caller and any number of workers can share it without the pool's lock.
struct ThreadPool::Loop {
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t n = 0;
  int64_t chunk = 1;
  int64_t num_chunks = 0;
  std::atomic<int64_t> next_chunk{0};
  absl::Mutex mu;
  int64_t done_chunks ABSL_GUARDED_BY(mu) = 0;
};

ThreadPool::ThreadPool(int threads) : threads_(std::max(1, threads)) {
  workers_.reserve(threads_ - 1);
  for (int i = 1; i < threads_; ++i) workers_.emplace_back([this] { WorkerMain(); });
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : workers_) t.join();
}

bool ThreadPool::RunOneChunk(Loop* loop) {
  const int64_t c = loop->next_chunk.fetch_add(1);
  if (c >= loop->num_chunks) return false;
  const int64_t begin = c * loop->chunk;
  const int64_t end = std::min(loop->n, begin + loop->chunk);
  (*loop->fn)(begin, end);
  absl::MutexLock lock(&loop->mu);
  ++loop->done_chunks;
  return true;
}

void ThreadPool::WorkerMain() {
  for (;;) {
    std::shared_ptr<Loop> loop;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ThreadPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            return p->stopping_ || !p->loops_.empty();
          },
          this));
      if (loops_.empty()) return;  // stopping, nothing left
      loop = loops_.front();
      // A loop whose chunks are all claimed leaves the queue; its owner
      // waits for the ones still running.
      if (loop->next_chunk.load() >= loop->num_chunks) {
        loops_.pop_front();
        continue;
      }
    }
    RunOneChunk(loop.get());
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t min_chunk,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  // About 4 chunks per thread balances uneven chunks without much overhead.
  int64_t chunk = std::max(min_chunk, (n + 4 * threads_ - 1) / (4 * threads_));
  if (threads_ == 1 || chunk >= n) {
    fn(0, n);
    return;
  }
  auto loop = std::make_shared<Loop>();
  loop->fn = &fn;
  loop->n = n;
  loop->chunk = chunk;
  loop->num_chunks = (n + chunk - 1) / chunk;
  {
    absl::MutexLock lock(&mu_);
    loops_.push_back(loop);
  }
  while (RunOneChunk(loop.get())) {
  }
  absl::MutexLock lock(&loop->mu);
  loop->mu.Await(absl::Condition(
      +[](Loop* l) ABSL_EXCLUSIVE_LOCKS_REQUIRED(l->mu) { return l->done_chunks == l->num_chunks; },
      loop.get()));
}

}  // namespace rope
