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

}  // namespace

// The region calls: admitted as every call (a slot, the client's share), not
// charged to the byte budget (their requests hold names and numbers, parsed
// about their wire size; they allocate nothing worth counting; and a full
// budget must not hold up releasing a region), run on the work queue (open
// and mmap may block on the file system).
template <typename Request, typename Response, typename Answer>
grpc::ServerUnaryReactor* RopeServiceImpl::ServeRegionCall(Rpc rpc,
                                                           grpc::CallbackServerContext* context,
                                                           const grpc::ByteBuffer* request,
                                                           grpc::ByteBuffer* response,
                                                           Answer answer) {
  return ServeRaw<Request, Response>(
      rpc, context, request, response,
      [answer = std::move(answer)](Request* parsed, Response* reply,
                                   int64_t) mutable -> absl::StatusOr<UnaryWork> {
        UnaryWork work;
        work.answer = [answer = std::move(answer), parsed, reply]() mutable {
          return answer(*parsed, reply);
        };
        return work;
      },
      /*charged=*/false);
}

std::string RopeServiceImpl::OwnerOf(const grpc::CallbackServerContext& context) const {
  return CallerIdentity(context, options_.tokens_verified, IdentityUse::kOwnership);
}

void RopeServiceImpl::FillShmInfo(v1::ServerInfo* info) const {
  if (options_.shm == nullptr) return;
  const ShmLimits& limits = options_.shm->limits();
  info->mutable_limits()->set_shm_max_regions_per_client(limits.max_regions_per_client);
  info->mutable_limits()->set_shm_max_mapped_bytes(limits.max_mapped_bytes);
  info->mutable_limits()->set_shm_max_mapped_bytes_per_client(limits.max_mapped_bytes_per_client);
  info->set_shm_regions(options_.shm->regions());
  info->set_shm_mapped_bytes(options_.shm->mapped_bytes());
}

grpc::ServerUnaryReactor* RopeServiceImpl::RegisterSharedMemory(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeRegionCall<v1::RegisterSharedMemoryRequest, v1::RegisterSharedMemoryResponse>(
      Rpc::kRegisterSharedMemory, context, request, response,
      [this, context](const v1::RegisterSharedMemoryRequest& parsed,
                      v1::RegisterSharedMemoryResponse*) -> absl::Status {
        if (options_.shm == nullptr) return NoShm();
        if (!IsLocalPeer(context->peer())) {
          return absl::PermissionDeniedError(
              absl::StrCat("shared memory is for clients on the server's host (a Unix socket "
                           "or loopback); this call comes from ",
                           context->peer()));
        }
        return AnswerRegisterSharedMemory(engine_, *options_.shm, OwnerOf(*context), parsed,
                                          CallerUid(*context));
      });
}

grpc::ServerUnaryReactor* RopeServiceImpl::UnregisterSharedMemory(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeRegionCall<v1::UnregisterSharedMemoryRequest, v1::UnregisterSharedMemoryResponse>(
      Rpc::kUnregisterSharedMemory, context, request, response,
      [this, context](const v1::UnregisterSharedMemoryRequest& parsed,
                      v1::UnregisterSharedMemoryResponse*) -> absl::Status {
        if (options_.shm == nullptr) return NoShm();
        return AnswerUnregisterSharedMemory(*options_.shm, OwnerOf(*context), parsed);
      });
}

grpc::ServerUnaryReactor* RopeServiceImpl::SharedMemoryStatus(grpc::CallbackServerContext* context,
                                                              const grpc::ByteBuffer* request,
                                                              grpc::ByteBuffer* response) {
  return ServeRegionCall<v1::SharedMemoryStatusRequest, v1::SharedMemoryStatusResponse>(
      Rpc::kSharedMemoryStatus, context, request, response,
      [this, context](const v1::SharedMemoryStatusRequest& parsed,
                      v1::SharedMemoryStatusResponse* reply) -> absl::Status {
        if (options_.shm == nullptr) return NoShm();
        return AnswerSharedMemoryStatus(*options_.shm, OwnerOf(*context), parsed, reply);
      });
}

}  // namespace rope
