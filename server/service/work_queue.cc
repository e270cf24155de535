#include "server/service/work_queue.h"

#include <utility>

namespace rope {

WorkQueue::WorkQueue(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  if (threads <= 0) threads = 1;
  threads_.reserve(threads);
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { ThreadMain(); });
}

WorkQueue::~WorkQueue() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void WorkQueue::Schedule(Task task, const std::string& client) {
  absl::MutexLock lock(&mu_);
  std::deque<Task>& tasks = queued_[client];
  if (tasks.empty()) turns_.push_back(client);  // joins the round
  tasks.push_back(std::move(task));
}

void WorkQueue::ThreadMain() {
  for (;;) {
    Task task;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !turns_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (turns_.empty()) return;  // stopping, and nothing left to run
      // The client whose turn it is gives its oldest task, then goes to the
      // back of the round if it has more.
      std::string client = std::move(turns_.front());
      turns_.pop_front();
      auto it = queued_.find(client);
      task = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) {
        queued_.erase(it);
      } else {
        turns_.push_back(std::move(client));
      }
    }
    std::move(task)();
  }
}

}  // namespace rope
