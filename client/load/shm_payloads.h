// ropeload --shm: the Rotate payloads' tensors moved into one POSIX
// shared-memory region, which every channel of the pool registers (each
// connection is its own client identity on the server), so that each call
// sends (region, offset, byte_size) and the server rotates in place.
//
// Calls in flight on the same payload rotate the same bytes concurrently:
// the values drift (rotations keep norms), which a load test does not mind,
// and is why --shm refuses --verify.
#ifndef ROPE_CLIENT_LOAD_SHM_PAYLOADS_H_
#define ROPE_CLIENT_LOAD_SHM_PAYLOADS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "client/load/channel_pool.h"
#include "client/load/workload.h"
#include "client/shared_region.h"

namespace rope {
namespace load {

// Rewrites `workload`'s payloads (Rotate / RotateStream only: a usage error
// otherwise) and registers the region on every channel of `pool`. The
// region must outlive the run.
absl::StatusOr<std::unique_ptr<client::SharedRegion>> MovePayloadsToSharedMemory(
    Workload* workload, const ChannelPool& pool);

}  // namespace load
}  // namespace rope

#endif  // ROPE_CLIENT_LOAD_SHM_PAYLOADS_H_
