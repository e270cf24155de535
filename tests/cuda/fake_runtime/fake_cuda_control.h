// A fake CUDA runtime for tests without a GPU: libcudart.so.13 (and a
// libcublas.so.13 beside it) implementing the runtime API the CUDA backend
// calls, on host memory, with faults on demand. Tests link it in place of
// the real runtime, or put its directory first on LD_LIBRARY_PATH so that
// the backend plugin (librope_cuda.so) loads it inside ropeserve.
//
// The model:
//   - One device (or as many as RopeFakeCudaSetDeviceCount says) of
//     RopeFakeCudaSetDeviceMemory bytes (1 GiB by default). Device and
//     pinned allocations are host allocations (posix_memalign), tracked, so
//     that every copy, kernel and GEMM is checked against live allocations
//     and AddressSanitizer sees every byte the "device" touches. Except
//     cudaMalloc's (which the backend never calls; tests and IPC exporters
//     do): a memfd each (MFD_CLOEXEC), mapped MAP_SHARED and page aligned,
//     so that another process can map it (CUDA IPC, below); AddressSanitizer
//     does not see past their ends within the last page.
//   - CUDA IPC: cudaIpcGetMemHandle exports a cudaMalloc allocation (its
//     start only; anything else is cudaErrorInvalidValue) as a handle naming
//     the exporting process and the memfd's descriptor there. Its 64 bytes,
//     in the host's byte order:
//        0  char[8]  magic "RopeIPC1"
//        8  int32    the exporter's pid
//       12  int32    the memfd's descriptor in the exporter
//       16  int64    the allocation's size in bytes
//       24  int32    the allocation's device
//       28  zero
//     cudaIpcOpenMemHandle (flags must be cudaIpcMemLazyEnablePeerAccess)
//     opens /proc/<pid>/fd/<fd> read-write and maps it: the exporter must
//     still be running and have the allocation (else
//     cudaErrorMapBufferObjectFailed), and this process must be allowed to
//     open its descriptors (same user, ptrace read access). A handle of
//     another kind (its magic) or one this process exported itself is
//     cudaErrorInvalidValue: the real runtime refuses to open a handle in
//     the process that exported it too, so an exporter for tests must be
//     another process (tests/cuda/ipc_exporter.h). The mapping is device
//     memory of the handle's device to copies, kernels and
//     RopeFakeCudaCheckAccess, not counted in RopeFakeCudaDeviceBytes (it
//     is the exporter's). Opening a handle to memory this process has open
//     already (the same memfd) returns the same pointer and counts one more
//     open; cudaIpcCloseMemHandle closes one, unmapping at the last. The
//     exporter's cudaFree leaves open mappings valid (the file lives on).
//   - cudaPointerGetAttributes: cudaMemoryTypeDevice inside device memory
//     (imported too), cudaMemoryTypeHost inside pinned memory, else
//     cudaMemoryTypeUnregistered (device cudaInvalidDeviceId) and success,
//     as since CUDA 11.
//   - cudaGetDriverEntryPointByVersion knows one driver function,
//     "cuMemGetAddressRange" (the _v2 signature): the base and size of the
//     device allocation (cudaMalloc, cudaMallocAsync or imported) holding
//     an address, else CUDA_ERROR_NOT_FOUND. It is counted and faulted as
//     "cuMemGetAddressRange" (an injected code is a CUresult). Any other
//     symbol is cudaErrorSymbolNotFound (cudaDriverEntryPointSymbolNotFound).
//   - Streams are queues. Work enqueued on a stream (copies, kernels, event
//     records, waits for events, stream-ordered frees) runs when something
//     waits for it: cudaStreamSynchronize, cudaEventSynchronize,
//     cudaDeviceSynchronize, a synchronous copy, cudaFree. A wait for an
//     event first runs the recording stream up to that event. So the host
//     sees results only after a correct synchronisation, as on a device.
//     cudaFreeAsync on a stream with nothing queued frees at once (the
//     device has reached that point of the stream), whatever other streams
//     still have queued: a kernel queued elsewhere that reads the memory
//     then fails, as it may on a device.
//   - A kernel or GEMM, or a copy, whose memory is not (or no longer) a live
//     allocation raises cudaErrorIllegalAddress when it runs: a sticky
//     error, as on a device. From then on every call returns it.
//   - Kernels launched through nvcc's launch ABI (the real kernels, inside
//     the plugin) run nothing: only host-emulated kernels
//     (RopeFakeCudaLaunchKernel, used by tests/cuda/emulated_kernels.cc)
//     and the fake cuBLAS compute.
//   - Host-to-device copies from pageable (not cudaMallocHost) memory read
//     the source at the call, and device-to-pageable copies complete before
//     returning, as CUDA documents for pageable memory.
//
// Faults: RopeFakeCudaFailCall makes the n-th call of a function fail with
// a given error; a sticky error (cudaErrorIllegalAddress, ...) poisons the
// context for good. The pseudo-function "kernel" is the execution of a
// launched kernel (or GEMM): its error surfaces at the next synchronisation,
// as an asynchronous fault does on a device. In a process that cannot call
// these functions (ropeserve), ROPE_FAKE_CUDA_FAULTS sets faults at load:
// "function:n:error[,function:n:error...]", e.g.
// "kernel:1:cudaErrorIllegalAddress"; ROPE_FAKE_CUDA_DEVICES sets the
// device count.
//
// Misuse (an unknown or destroyed stream, event or pointer, a double free,
// cudaFree of imported memory, cudaIpcCloseMemHandle of memory that is not
// open) is counted (RopeFakeCudaMisuses) and printed to stderr, so that tests can
// require none.
//
// Thread-safe: one lock serialises the fake device; queued work runs on the
// thread that waits for it.
#ifndef ROPE_TESTS_CUDA_FAKE_RUNTIME_FAKE_CUDA_CONTROL_H_
#define ROPE_TESTS_CUDA_FAKE_RUNTIME_FAKE_CUDA_CONTROL_H_

#include <cuda_runtime_api.h>

#include <cstdint>

extern "C" {

// Restores the defaults: one device of 1 GiB with memory pools, pinned
// memory up to 4 GiB, no faults and no sticky error, call counters and the
// misuse count zero. Live allocations, streams and events stay.
void RopeFakeCudaReset();

// The `nth` call (1: the next one) of `function` from now fails with
// `error` (a cudaError_t, or a cublasStatus_t for cublas* functions),
// doing nothing else. A sticky error also poisons the context.
void RopeFakeCudaFailCall(const char* function, int64_t nth, int error);

// Calls of `function` since the last reset (including failed ones).
int64_t RopeFakeCudaCalls(const char* function);

// Bytes allocated now on the device (cudaMalloc, cudaMallocAsync) and in
// pinned host memory (cudaMallocHost).
int64_t RopeFakeCudaDeviceBytes();
int64_t RopeFakeCudaPinnedBytes();

// Imported mappings (cudaIpcOpenMemHandle) open now, each counted once
// however many times it was opened: 0 once every open was closed.
int64_t RopeFakeCudaImportedMappings();

void RopeFakeCudaSetDeviceMemory(int64_t bytes);
void RopeFakeCudaSetPinnedMemory(int64_t bytes);
void RopeFakeCudaSetDeviceCount(int count);
void RopeFakeCudaSetMemoryPoolsSupported(int supported);
// The release threshold last set on the device's default memory pool.
uint64_t RopeFakeCudaPoolReleaseThreshold();

// The sticky error, or cudaSuccess.
int RopeFakeCudaStickyError();

// Misuses since the last reset (see above).
int64_t RopeFakeCudaMisuses();

// Whether [p, p + bytes) lies inside one live device (imported too) or
// pinned allocation.
// Called by host-emulated kernels when they run: false also raises
// cudaErrorIllegalAddress (sticky), as the access would on a device.
int RopeFakeCudaCheckAccess(const void* p, int64_t bytes);

// Enqueues a host-emulated kernel on `stream`: counted and faulted as the
// pseudo-function "kernel". `run(data, 1)` runs it when the stream gets
// there; `run(data, 0)` is called instead when it will not run (the launch
// failed, or the context was poisoned first), so that `data` is always
// released exactly once. Returns the launch's error (also left as the
// thread's last error, like a launch through <<<>>>).
cudaError_t RopeFakeCudaLaunchKernel(cudaStream_t stream, void (*run)(void* data, int execute),
                                     void* data);

// Counts a call of `function` (the fake cuBLAS's entry points) and returns
// the code injected for this call (0 if none); the sticky error is the
// caller's to check (RopeFakeCudaStickyError).
int RopeFakeCudaEnter(const char* function);

}  // extern "C"

#endif  // ROPE_TESTS_CUDA_FAKE_RUNTIME_FAKE_CUDA_CONTROL_H_
