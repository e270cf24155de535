#include "core/proto_engine/shm_fault_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>

namespace rope {
namespace {

struct Slot {
  std::atomic<uintptr_t> begin{0};  // 0: free
  std::atomic<uintptr_t> end{0};
  std::atomic<bool> faulted{false};
};

Slot g_slots[kShmGuardSlots];
struct sigaction g_previous = {};

extern "C" void OnSigbus(int signal, siginfo_t* info, void* ucontext) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Slot& slot : g_slots) {
    const uintptr_t begin = slot.begin.load(std::memory_order_acquire);
    const uintptr_t end = slot.end.load(std::memory_order_acquire);
    if (begin == 0 || address < begin || address >= end) continue;
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t from = address & ~(page - 1);
    // mmap is a plain system call on Linux (safe in a handler in practice).
    void* mapped = mmap(reinterpret_cast<void*>(from), end - from, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (mapped != MAP_FAILED) {
      slot.faulted.store(true, std::memory_order_release);
      return;
    }
    break;
  }
  // Not ours (or the remap failed): behave as before the guard existed.
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(signal, info, ucontext);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN &&
      g_previous.sa_handler != nullptr) {
    g_previous.sa_handler(signal);
    return;
  }
  struct sigaction fallback = {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  sigaction(SIGBUS, &fallback, nullptr);
  raise(SIGBUS);
}

void InstallOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action = {};
    action.sa_sigaction = OnSigbus;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(SIGBUS, &action, &g_previous);
  });
}

}  // namespace

int GuardShmRange(void* base, size_t length) {
  InstallOnce();
  for (int i = 0; i < kShmGuardSlots; ++i) {
    Slot& slot = g_slots[i];
    if (slot.begin.load(std::memory_order_acquire) != 0) continue;
    slot.faulted.store(false, std::memory_order_relaxed);
    const uintptr_t begin = reinterpret_cast<uintptr_t>(base);
    slot.end.store(begin + length, std::memory_order_release);
    slot.begin.store(begin, std::memory_order_release);
    return i;
  }
  return -1;
}

void UnguardShmRange(int slot) {
  if (slot < 0 || slot >= kShmGuardSlots) return;
  g_slots[slot].begin.store(0, std::memory_order_release);
  g_slots[slot].end.store(0, std::memory_order_release);
}

bool ShmRangeFaulted(int slot) {
  if (slot < 0 || slot >= kShmGuardSlots) return false;
  return g_slots[slot].faulted.load(std::memory_order_acquire);
}

}  // namespace rope
