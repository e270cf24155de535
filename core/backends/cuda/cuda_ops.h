// The CUDA backend's two operations, on a leased worker context and a
// device-resident table. Arguments are validated by the engine (backend.h).
// Both return after the results are in the caller's host buffers, or with
// the first error (the context is then quiesced by its lease).
#ifndef ROPE_BACKENDS_CUDA_CUDA_OPS_H_
#define ROPE_BACKENDS_CUDA_CUDA_OPS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/backends/cuda/device_table_cache.h"
#include "core/backends/cuda/kernel_common.h"
#include "core/backends/cuda/worker_context.h"
#include "core/engine/backend.h"
#include "core/engine/table_rows.h"

namespace rope {

kernels::Storage StorageOf(DType dtype);

// Rotates args.q (and args.k) in host memory in place (reading
// args.q_source / args.k_source instead when set): token chunks go host ->
// pinned -> device, through one kernel launch for q and k, and back,
// alternating the context's two staging slots.
absl::Status CudaRotate(WorkerContext& context, const DeviceTable& table, const RotateArgs& args,
                        int64_t max_blocks);

// Rotates args.q (and args.k) in place where they are, in device memory
// (args.memory: CUDA shared memory), after a device-to-device copy from
// args.q_source / args.k_source when set: one kernel launch on the compute
// stream, no staging; returns after the kernel has finished.
absl::Status CudaRotateOnDevice(WorkerContext& context, const DeviceTable& table,
                                const RotateArgs& args, int64_t max_blocks);

// Fills args.scores (and args.output) (in device memory, args.memory,
// reading and writing it where it lies, without staging): rotated float32 copies of q and k on
// the device, cuBLAS GEMMs, the mask/softmax kernel, the optional P.V GEMMs,
// in chunks of about `chunk_work` float32 operations (attention_chunks.h).
// Checks args.interrupt (when set) between staging chunks of the copies and
// between compute chunks, and returns its CANCELLED or DEADLINE_EXCEEDED;
// the device then still runs out at most WorkerContext::kProgressMarks
// chunks, which the lease's Quiesce waits for.
absl::Status CudaAttentionScores(WorkerContext& context, const DeviceTable& table,
                                 const AttentionArgs& args, int64_t max_blocks, double chunk_work);

// Copies explicit positions (if any) of `specs` to the device and returns
// specs whose explicit_positions point there; ready for work enqueued on
// any of the context's streams afterwards.
absl::Status UploadPositions(WorkerContext& context, math::PositionSpec* specs, int count);

// Copies `table`'s block pointers to the device and returns the row lookup
// the kernels take; ready for work enqueued on any of the context's streams
// afterwards.
absl::StatusOr<TableRows> UploadTableRows(WorkerContext& context, const DeviceTable& table);

}  // namespace rope

#endif  // ROPE_BACKENDS_CUDA_CUDA_OPS_H_
