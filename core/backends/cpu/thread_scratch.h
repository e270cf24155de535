// ThreadScratch: a per-thread buffer for the attention passes, kept across
// calls. Every attention task of a call asks for the same sizes, and a fresh
// allocation would page-fault its way through them each time.
#ifndef ROPE_BACKENDS_CPU_THREAD_SCRATCH_H_
#define ROPE_BACKENDS_CPU_THREAD_SCRATCH_H_

#include <cstdint>
#include <memory>
#include <new>

namespace rope {
namespace cpu {

// Not thread-safe: one per thread (thread_local).
template <typename T = float>
class ThreadScratch {
 public:
  // At least `count` elements (contents unspecified), or null when they
  // cannot be allocated.
  T* Get(int64_t count) {
    if (count <= capacity_) return data_.get();
    std::unique_ptr<T[]> fresh(new (std::nothrow) T[count]);
    if (fresh == nullptr) return nullptr;
    data_ = std::move(fresh);
    capacity_ = count;
    return data_.get();
  }
  // Gives back an allocation beyond what is worth keeping (4 MiB).
  void Trim() {
    if (capacity_ * static_cast<int64_t>(sizeof(T)) > kKeepBytes) {
      data_.reset();
      capacity_ = 0;
    }
  }

 private:
  static constexpr int64_t kKeepBytes = int64_t{4} << 20;
  std::unique_ptr<T[]> data_;
  int64_t capacity_ = 0;
};

}  // namespace cpu
}  // namespace rope

#endif  // ROPE_BACKENDS_CPU_THREAD_SCRATCH_H_
