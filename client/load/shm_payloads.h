// ropeload --shm: the Rotate payloads' tensors moved into one POSIX
// shared-memory region, which every channel of the pool registers, so that
// each call
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

// The payloads' region, registered on the server(s) behind a pool's
// channels; destroying it unregisters the region on every channel (errors
// ignored: the server's idle lease reclaims what a lost channel leaves) so
// that the next run from this host can register the same name.
class RegisteredPayloads {
 public:
  RegisteredPayloads(std::unique_ptr<client::SharedRegion> region, const ChannelPool& pool)
      : region_(std::move(region)), pool_(pool) {}
  ~RegisteredPayloads();
  RegisteredPayloads(const RegisteredPayloads&) = delete;
  RegisteredPayloads& operator=(const RegisteredPayloads&) = delete;

  const client::SharedRegion& region() const { return *region_; }

 private:
  std::unique_ptr<client::SharedRegion> region_;
  const ChannelPool& pool_;
};

// Rewrites `workload`'s payloads (Rotate / RotateStream only: a usage error
// otherwise) and registers the region on every channel of `pool`. The
// result must outlive the run and be destroyed before `pool`.
absl::StatusOr<std::unique_ptr<RegisteredPayloads>> MovePayloadsToSharedMemory(
    Workload* workload, const ChannelPool& pool);

}  // namespace load
}  // namespace rope

#endif  // ROPE_CLIENT_LOAD_SHM_PAYLOADS_H_
