// RopeServiceImpl's shared-memory side: the region RPCs (core/proto_engine/
// shm_calls.h does the work; this file adds the caller's identity).
#include "absl/strings/str_cat.h"
#include "core/proto_engine/shm_calls.h"
#include "server/service/caller_identity.h"
#include "server/service/rope_service.h"
#include "server/service/unary_call.h"

namespace rope {
namespace {

absl::Status NoShm() {
  return absl::FailedPreconditionError("shared memory is off on this server");
}

// The region RPCs: admitted as every call, run on the work queue (open and
// mmap may block on the file system).
template <typename Answer>
grpc::ServerUnaryReactor* ServeRegionCall(Rpc rpc, CallGate& gate, ServiceMetrics& metrics,
                                          WorkQueue& work, int64_t max_message_bytes,
                                          grpc::CallbackServerContext* context,
                                          const google::protobuf::Message& request,
                                          google::protobuf::Message* response, Answer answer) {
  auto* call = new UnaryCall(rpc, gate, metrics, max_message_bytes);
  if (!call->Admit(request)) return call;
  work.Schedule([call, rpc, context, response, answer = std::move(answer)] {
    if (context->IsCancelled()) {
      call->FinishWith(absl::CancelledError(absl::StrCat(
                           RpcName(rpc), " was cancelled (or its deadline passed) before it ran")),
                       nullptr);
      return;
    }
    call->FinishWith(answer(), response);
  });
  return call;
}

}  // namespace

std::string RopeServiceImpl::OwnerOf(const grpc::CallbackServerContext& context) const {
  return CallerIdentity(context, options_.tokens_verified, IdentityUse::kOwnership);
}

void RopeServiceImpl::FillShmInfo(v1::ServerInfo* info) const {
  if (options_.shm == nullptr) return;
  const ShmLimits& limits = options_.shm->limits();
  info->mutable_limits()->set_shm_max_regions_per_client(limits.max_regions_per_client);
  info->mutable_limits()->set_shm_max_mapped_bytes(limits.max_mapped_bytes);
  info->set_shm_regions(options_.shm->regions());
  info->set_shm_mapped_bytes(options_.shm->mapped_bytes());
}

grpc::ServerUnaryReactor* RopeServiceImpl::RegisterSharedMemory(
    grpc::CallbackServerContext* context, const v1::RegisterSharedMemoryRequest* request,
    v1::RegisterSharedMemoryResponse* response) {
  return ServeRegionCall(
      Rpc::kRegisterSharedMemory, gate_, metrics_, work_, options_.max_message_bytes, context,
      *request, response, [this, context, request]() -> absl::Status {
        if (options_.shm == nullptr) return NoShm();
        if (!IsLocalPeer(context->peer())) {
          return absl::PermissionDeniedError(
              absl::StrCat("shared memory is for clients on the server's host (a Unix socket "
                           "or loopback); this call comes from ",
                           context->peer()));
        }
        return AnswerRegisterSharedMemory(engine_, *options_.shm, OwnerOf(*context), *request);
      });
}

grpc::ServerUnaryReactor* RopeServiceImpl::UnregisterSharedMemory(
    grpc::CallbackServerContext* context, const v1::UnregisterSharedMemoryRequest* request,
    v1::UnregisterSharedMemoryResponse* response) {
  return ServeRegionCall(
      Rpc::kUnregisterSharedMemory, gate_, metrics_, work_, options_.max_message_bytes, context,
      *request, response, [this, context, request]() -> absl::Status {
        if (options_.shm == nullptr) return NoShm();
        return AnswerUnregisterSharedMemory(*options_.shm, OwnerOf(*context), *request);
      });
}

grpc::ServerUnaryReactor* RopeServiceImpl::SharedMemoryStatus(
    grpc::CallbackServerContext* context, const v1::SharedMemoryStatusRequest* request,
    v1::SharedMemoryStatusResponse* response) {
  return ServeRegionCall(
      Rpc::kSharedMemoryStatus, gate_, metrics_, work_, options_.max_message_bytes, context,
      *request, response, [this, context, request, response]() -> absl::Status {
        if (options_.shm == nullptr) return NoShm();
        return AnswerSharedMemoryStatus(*options_.shm, OwnerOf(*context), *request, response);
      });
}

}  // namespace rope
