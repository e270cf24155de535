// The CUDA backend: the Backend interface on one NVIDIA GPU. Tables live in
// a device-resident LRU cache; rotation is one kernel launch for q and k;
// attention scores are cuBLAS GEMMs around a mask/softmax kernel, in chunks
// between which a call stops if its caller has cancelled or its deadline
// has passed (AttentionArgs::interrupt). Calls run concurrently on a small
// pool of worker contexts (streams, pinned staging buffers, device
// workspaces), each used by one call at a time.
//
// A build without CUDA (no nvcc at configure time) compiles
// cuda_backend_stub.cc instead, whose functions return UNIMPLEMENTED saying
// how to enable CUDA; callers need no #ifdef.
#ifndef ROPE_BACKENDS_CUDA_CUDA_BACKEND_H_
#define ROPE_BACKENDS_CUDA_CUDA_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/engine/backend.h"

namespace rope {

struct CudaBackendOptions {
  // Byte budget of the device-resident table cache.
  int64_t table_cache_bytes = int64_t{1} << 30;
  // Calls that may run on the device at once (one worker context each);
  // more wait for a context to come free.
  int contexts = 4;
  // Bytes of each of a context's two pinned staging buffers: host<->device
  // copies go through them in chunks of this size, one chunk's transfer
  // overlapping the next chunk's host copy.
  int64_t staging_bytes = int64_t{16} << 20;
  // Device workspaces larger than this are freed after each call, so that
  // one huge request does not hold memory for ever.
  int64_t keep_workspace_bytes = int64_t{256} << 20;
  // Estimated float32 operations of one chunk of an AttentionScores call;
  // the call checks for cancellation and its deadline between chunks, so
  // it stops within about two chunks' device time. 0: 2^31 per
  // multiprocessor, a few milliseconds of the device's float32 rate.
  int64_t attention_chunk_work = 0;
};

// What cudaGetDeviceCount says: the number of devices (> 0), or
// FAILED_PRECONDITION explaining why there is none (no device, no driver,
// driver too old), or UNIMPLEMENTED in a build without CUDA.
absl::StatusOr<int> CountCudaDevices();

// A backend on device `device`. FAILED_PRECONDITION when there is no such
// device or no usable driver; INVALID_ARGUMENT for bad options;
// UNIMPLEMENTED in a build without CUDA.
absl::StatusOr<std::unique_ptr<Backend>> NewCudaBackend(int device,
                                                        const CudaBackendOptions& options = {});

}  // namespace rope

#endif  // ROPE_BACKENDS_CUDA_CUDA_BACKEND_H_
