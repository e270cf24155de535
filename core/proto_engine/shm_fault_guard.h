// SIGBUS guard for shared-memory regions mapped from client-owned objects.
//
// A client may shrink (ftruncate) the object behind a registered region at
// any time; the server's next touch of a page past the new end raises
// SIGBUS, which by default kills the process. The guard's handler, for a
// fault inside a guarded range, maps anonymous zero pages over the rest of
// the range (MAP_FIXED) and marks the range faulted, then returns: the
// faulting instruction retries on the anonymous pages and the call runs to
// its end; the caller checks Faulted() afterwards and answers with an error
// (the Wayland compositors guard client shm pools the same way). A fault
// outside every guarded range is re-raised with the previous disposition, so
// real bugs still crash. A handler (rather than copying in and out with
// pread/pwrite) keeps the by-reference path zero-copy.
//
// The range table is fixed-size and lock-free so that the handler can read
// it; Guard/Unguard are serialized by the caller (ShmRegistry's mutex).
#ifndef ROPE_PROTO_ENGINE_SHM_FAULT_GUARD_H_
#define ROPE_PROTO_ENGINE_SHM_FAULT_GUARD_H_

#include <cstddef>

namespace rope {

inline constexpr int kShmGuardSlots = 1024;

// Installs the SIGBUS handler (once per process) and guards
// [base, base + length) (page-aligned base). Returns the slot, or -1 when all
// kShmGuardSlots are taken.
int GuardShmRange(void* base, size_t length);
// Stops guarding; call before munmap.
void UnguardShmRange(int slot);
// Whether a fault hit the slot's range since GuardShmRange.
bool ShmRangeFaulted(int slot);

}  // namespace rope

#endif  // ROPE_PROTO_ENGINE_SHM_FAULT_GUARD_H_
