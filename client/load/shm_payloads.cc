#include "client/load/shm_payloads.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli/flag_set.h"
#include "common/status_macros.h"
#include "rope/v1/rope.pb.h"

namespace rope {
namespace load {
namespace {

size_t RoundUp(size_t n) { return (n + 63) / 64 * 64; }

}  // namespace

RegisteredPayloads::~RegisteredPayloads() {
  for (int i = 0; i < pool_.size(); ++i) {
    pool_.client(i).UnregisterSharedMemory(region_->name()).IgnoreError();
  }
}

absl::StatusOr<std::unique_ptr<RegisteredPayloads>> MovePayloadsToSharedMemory(
    Workload* workload, const ChannelPool& pool) {
  if (workload->kind != WorkloadKind::kRotate && workload->kind != WorkloadKind::kRotateStream) {
    return client::UsageError("--shm drives Rotate and RotateStream workloads only");
  }
  std::vector<v1::RotateRequest*> requests;
  size_t total = 0;
  for (auto& message : workload->requests) {
    auto* request = static_cast<v1::RotateRequest*>(message.get());
    requests.push_back(request);
    total += RoundUp(request->q().data().size()) + RoundUp(request->k().data().size());
  }
  ROPE_ASSIGN_OR_RETURN(std::unique_ptr<client::SharedRegion> region,
                        client::SharedRegion::Create("ropeload", std::max<size_t>(total, 64)));
  size_t offset = 0;
  auto move = [&](v1::Tensor* tensor) {
    const size_t bytes = tensor->data().size();
    std::memcpy(region->data() + offset, tensor->data().data(), bytes);
    tensor->clear_data();
    *tensor->mutable_shm() = region->Ref(offset, bytes);
    offset += RoundUp(bytes);
  };
  for (v1::RotateRequest* request : requests) {
    move(request->mutable_q());
    if (request->has_k()) move(request->mutable_k());
  }
  for (int i = 0; i < pool.size(); ++i) {
    const absl::Status registered = pool.client(i).RegisterSharedMemory(*region);
    // The server knows a client by its identity (token, certificate or
    // host), not by connection: channels after the first that reach the
    // same server find this run's region already theirs.
    if (i > 0 && registered.code() == absl::StatusCode::kAlreadyExists) continue;
    if (!registered.ok()) {
      return absl::Status(registered.code(), absl::StrCat("--shm: RegisterSharedMemory on channel ",
                                                          i, ": ", registered.message()));
    }
  }
  workload->request_bytes = static_cast<int64_t>(workload->Request(0)->ByteSizeLong());
  absl::StrAppend(&workload->payload_description, " (by shared-memory reference, ", total,
                  " bytes in region ", region->key(), ")");
  return std::make_unique<RegisteredPayloads>(std::move(region), pool);
}

}  // namespace load
}  // namespace rope
