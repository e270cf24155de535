// The state of the fake CUDA runtime (see fake_cuda_control.h for the
// model): errors and faults, allocations, streams and events. Internal to
// libcudart.so.13 (fake); fake_cudart.cc turns it into the runtime API.
//
// Every function here expects the caller to hold Lock() (a recursive lock:
// queued work runs with it held, and host-emulated kernels call back into
// RopeFakeCudaCheckAccess).
#ifndef ROPE_TESTS_CUDA_FAKE_RUNTIME_FAKE_DEVICE_H_
#define ROPE_TESTS_CUDA_FAKE_RUNTIME_FAKE_DEVICE_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

namespace rope {
namespace fake_cuda {

struct Stream;

// One entry of a stream's queue: work to run, or a wait for another
// stream to reach a point (an event recorded there).
struct Op {
  std::function<void()> run;      // the work; null for a wait
  std::function<void()> discard;  // instead of `run` once the context is poisoned (may be null)
  std::shared_ptr<Stream> wait_for;
  uint64_t wait_until = 0;
};

struct Stream {
  std::deque<Op> queue;
  uint64_t enqueued = 0;  // ops ever enqueued
  uint64_t executed = 0;  // ops run (or skipped) so far
};

struct Event {
  std::shared_ptr<Stream> stream;  // null until recorded
  uint64_t point = 0;              // complete once stream->executed reaches it
};

// kImported: another process's cudaMalloc allocation, mapped here by
// cudaIpcOpenMemHandle. Device memory to copies and kernels, but not this
// process's: not counted in BytesInUse(kDevice), not freed by cudaFree.
enum class MemoryKind { kDevice, kPinned, kImported };

struct Allocation {
  int64_t bytes = 0;
  MemoryKind kind = MemoryKind::kDevice;
  int device = 0;  // current when allocated; imported: the exporter's
  // cudaMalloc (kDevice): the memfd backing it, mapped MAP_SHARED, that
  // cudaIpcGetMemHandle exports; -1 for memory from posix_memalign.
  int memfd = -1;
  // kImported: the mapped file (memfd) and the opens not yet closed.
  uint64_t file_device = 0;
  uint64_t file_inode = 0;
  int64_t opens = 0;
};

struct Limits {
  int devices = 1;
  int64_t device_bytes = int64_t{1} << 30;
  int64_t pinned_bytes = int64_t{4} << 30;
  bool memory_pools = true;
};

std::recursive_mutex& Lock();

// ---- Errors and faults --------------------------------------------------------

// Counts a call of `function`, then returns the sticky error if there is
// one, else the error injected for this call (poisoning the context if it
// is sticky), else cudaSuccess. A non-success result is also left as the
// thread's last error.
cudaError_t Enter(const char* function);
// Counts a call of `function` and returns the code injected for it (0 if
// none), whatever its type; leaves the last error alone.
int TakeInjected(const char* function);
// Leaves `error` as the thread's last error (unless success) and returns it.
cudaError_t Fail(cudaError_t error);
bool IsSticky(cudaError_t error);
void Poison(cudaError_t error);  // first sticky error wins
cudaError_t Sticky();
cudaError_t& LastError();  // the calling thread's
void Inject(const std::string& function, int64_t nth, int error);
int64_t Calls(const std::string& function);
void Misuse(const std::string& what);  // counts and prints
int64_t Misuses();
Limits& CurrentLimits();
uint64_t& PoolReleaseThreshold();
// Back to the defaults (see RopeFakeCudaReset).
void ResetState();
// Parses ROPE_FAKE_CUDA_FAULTS / ROPE_FAKE_CUDA_DEVICES (see the control
// header); prints and ignores what it cannot parse.
void ConfigureFromEnvironment();
// "cudaErrorIllegalAddress" -> its value; -1 when unknown.
int ErrorByName(const std::string& name);

// ---- Memory -------------------------------------------------------------------

// Allocates `bytes` (aligned to 256 for the device, 4096 for pinned) of
// kDevice or kPinned memory, on `device`; cudaErrorMemoryAllocation beyond
// the limit or when the host has none.
cudaError_t Allocate(MemoryKind kind, int64_t bytes, int device, void** p);
// The same for kDevice, backed by a memfd (memfd_create, MFD_CLOEXEC)
// mapped MAP_SHARED, page aligned, so that another process can map it too
// (cudaIpcGetMemHandle): what cudaMalloc allocates.
cudaError_t AllocateExportable(int64_t bytes, int device, void** p);
// Frees a live kDevice or kPinned allocation of `kind` at exactly `p`
// (null: nothing); cudaErrorInvalidValue (and a misuse) otherwise.
cudaError_t Free(MemoryKind kind, void* p);
// The live allocation holding [p, p + bytes), or null.
const Allocation* Find(const void* p, int64_t bytes);
// The live allocation starting exactly at `p`, or null.
const Allocation* FindStart(const void* p);
// The live allocation whose bytes include `p` (a zero-byte one: its start),
// with its start in `*base`; null when none does.
const Allocation* FindContaining(const void* p, uintptr_t* base);
bool IsPinned(const void* p);
int64_t BytesInUse(MemoryKind kind);

// ---- CUDA IPC (imported memory) ----------------------------------------------

// The name of the memfds of cudaMalloc: /proc/<pid>/fd/<fd> links to
// "/memfd:" kExportedMemoryName " (deleted)".
constexpr char kExportedMemoryName[] = "rope-fake-cuda-ipc";

// Maps `fd` (an exporter's memfd, opened through /proc; taken: closed
// whatever happens) as kImported memory of `device`. When this process has
// that file mapped already, counts one more open of it and returns the same
// pointer. cudaErrorMapBufferObjectFailed when the file is smaller than
// `bytes` or cannot be mapped.
cudaError_t Import(int fd, int64_t bytes, int device, void** p);
// Closes one open of the imported mapping at exactly `p`, unmapping it at
// the last; cudaErrorInvalidValue (and a misuse) when `p` is none.
cudaError_t CloseImport(void* p);
// Imported mappings now (each counted once, however many opens).
int64_t ImportedMappings();

// ---- Streams and events -------------------------------------------------------

// The stream of a handle: 0 and cudaStreamLegacy are the legacy default
// stream, cudaStreamPerThread the calling thread's; null (and a misuse) for
// an unknown handle.
std::shared_ptr<Stream> StreamOf(cudaStream_t handle);
cudaStream_t CreateStream();
bool DestroyStream(cudaStream_t handle);  // runs what is queued first
void Enqueue(Stream& stream, Op op);
// Runs `stream`'s queue until `point` ops have run.
void RunUntil(Stream& stream, uint64_t point);
void RunAll(Stream& stream);
void RunEveryStream();

Event* EventOf(cudaEvent_t handle);  // null (and a misuse) when unknown
cudaEvent_t CreateEvent();
bool DestroyEvent(cudaEvent_t handle);

}  // namespace fake_cuda
}  // namespace rope

#endif  // ROPE_TESTS_CUDA_FAKE_RUNTIME_FAKE_DEVICE_H_
