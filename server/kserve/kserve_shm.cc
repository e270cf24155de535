// KServeServiceImpl's shared-memory calls: Triton's system and CUDA
// shared-memory extensions mapped onto ropeserve's regions (the rope.v1
// RegisterSharedMemory family, core/proto_engine/shm_calls.h). One region
// namespace per client holds both kinds; the system calls see its host
// regions and the CUDA calls its device regions. Ownership, limits, the
// same-host rule and every check are rope.v1's.
#include "absl/strings/str_cat.h"
#include "core/proto_engine/shm_calls.h"
#include "server/kserve/kserve_service.h"
#include "server/service/caller_identity.h"
#include "server/service/unary_call.h"

namespace rope {
namespace kserve {
namespace {

absl::Status NoShm() {
  return absl::FailedPreconditionError("shared memory is off on this server");
}

}  // namespace

template <typename Answer>
grpc::ServerUnaryReactor* KServeServiceImpl::ServeRegionCall(
    Rpc rpc, grpc::CallbackServerContext* context, const google::protobuf::Message& request,
    google::protobuf::Message* response, Answer answer) {
  auto* call = new UnaryCall(rpc, gate_, metrics_, options_.max_message_bytes);
  if (!call->Admit(request, ClientOf(*context))) return call;
  work_.Schedule([call, rpc, context, response, answer = std::move(answer)]() mutable {
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

absl::Status KServeServiceImpl::RegisterRegion(grpc::CallbackServerContext* context,
                                               const v1::RegisterSharedMemoryRequest& request) {
  if (options_.shm == nullptr) return NoShm();
  if (!IsLocalPeer(context->peer())) {
    return absl::PermissionDeniedError(
        absl::StrCat("shared memory is for clients on the server's host (a Unix socket or "
                     "loopback); this call comes from ",
                     context->peer()));
  }
  return AnswerRegisterSharedMemory(engine_, *options_.shm, OwnerOf(*context), request);
}

absl::Status KServeServiceImpl::UnregisterRegions(grpc::CallbackServerContext* context,
                                                  const std::string& name, bool cuda) {
  if (options_.shm == nullptr) return NoShm();
  const std::string owner = OwnerOf(*context);
  absl::StatusOr<std::vector<ShmRegionInfo>> regions = options_.shm->Status(owner, name);
  if (absl::IsNotFound(regions.status())) return absl::OkStatus();
  if (!regions.ok()) return regions.status();
  for (const ShmRegionInfo& region : *regions) {
    if (region.cuda_ipc != cuda) continue;
    absl::Status status = options_.shm->Unregister(owner, region.name);
    // Gone meanwhile (another call of the same client): what was asked.
    if (!status.ok() && !absl::IsNotFound(status)) return status;
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* KServeServiceImpl::SystemSharedMemoryRegister(
    grpc::CallbackServerContext* context,
    const inference::SystemSharedMemoryRegisterRequest* request,
    inference::SystemSharedMemoryRegisterResponse* response) {
  return ServeRegionCall(Rpc::kSystemSharedMemoryRegister, context, *request, response,
                         [this, context, request] {
                           v1::RegisterSharedMemoryRequest v1_request;
                           v1_request.set_name(request->name());
                           v1_request.set_key(request->key());
                           v1_request.set_offset(request->offset());
                           v1_request.set_byte_size(request->byte_size());
                           return RegisterRegion(context, v1_request);
                         });
}

grpc::ServerUnaryReactor* KServeServiceImpl::CudaSharedMemoryRegister(
    grpc::CallbackServerContext* context, const inference::CudaSharedMemoryRegisterRequest* request,
    inference::CudaSharedMemoryRegisterResponse* response) {
  return ServeRegionCall(
      Rpc::kCudaSharedMemoryRegister, context, *request, response,
      [this, context, request]() -> absl::Status {
        if (request->device_id() < 0 || request->device_id() > INT32_MAX) {
          return absl::InvalidArgumentError(absl::StrCat("device_id is ", request->device_id(),
                                                         ": must be a CUDA device ordinal >= 0"));
        }
        if (request->raw_handle().empty()) {
          return absl::InvalidArgumentError(absl::StrCat("raw_handle is empty: it must hold the ",
                                                         kCudaIpcHandleBytes,
                                                         " bytes of a cudaIpcMemHandle_t"));
        }
        v1::RegisterSharedMemoryRequest v1_request;
        v1_request.set_name(request->name());
        v1_request.set_byte_size(request->byte_size());
        v1_request.set_cuda_ipc_handle(request->raw_handle());
        v1_request.set_cuda_device(static_cast<int32_t>(request->device_id()));
        return RegisterRegion(context, v1_request);
      });
}

grpc::ServerUnaryReactor* KServeServiceImpl::SystemSharedMemoryUnregister(
    grpc::CallbackServerContext* context,
    const inference::SystemSharedMemoryUnregisterRequest* request,
    inference::SystemSharedMemoryUnregisterResponse* response) {
  return ServeRegionCall(
      Rpc::kSystemSharedMemoryUnregister, context, *request, response,
      [this, context, request] { return UnregisterRegions(context, request->name(), false); });
}

grpc::ServerUnaryReactor* KServeServiceImpl::CudaSharedMemoryUnregister(
    grpc::CallbackServerContext* context,
    const inference::CudaSharedMemoryUnregisterRequest* request,
    inference::CudaSharedMemoryUnregisterResponse* response) {
  return ServeRegionCall(
      Rpc::kCudaSharedMemoryUnregister, context, *request, response,
      [this, context, request] { return UnregisterRegions(context, request->name(), true); });
}

grpc::ServerUnaryReactor* KServeServiceImpl::SystemSharedMemoryStatus(
    grpc::CallbackServerContext* context, const inference::SystemSharedMemoryStatusRequest* request,
    inference::SystemSharedMemoryStatusResponse* response) {
  return ServeRegionCall(
      Rpc::kSystemSharedMemoryStatus, context, *request, response,
      [this, context, request, response]() -> absl::Status {
        if (options_.shm == nullptr) return NoShm();
        absl::StatusOr<std::vector<ShmRegionInfo>> regions =
            options_.shm->Status(OwnerOf(*context), request->name());
        if (!regions.ok()) return regions.status();
        for (const ShmRegionInfo& region : *regions) {
          if (region.cuda_ipc) {
            if (!request->name().empty()) {
              return absl::NotFoundError(absl::StrCat("region '", region.name,
                                                      "' is CUDA shared memory, not system "
                                                      "shared memory: see CudaSharedMemoryStatus"));
            }
            continue;
          }
          auto& status = (*response->mutable_regions())[region.name];
          status.set_name(region.name);
          status.set_key(region.key);
          status.set_offset(region.offset);
          status.set_byte_size(region.byte_size);
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* KServeServiceImpl::CudaSharedMemoryStatus(
    grpc::CallbackServerContext* context, const inference::CudaSharedMemoryStatusRequest* request,
    inference::CudaSharedMemoryStatusResponse* response) {
  return ServeRegionCall(Rpc::kCudaSharedMemoryStatus, context, *request, response,
                         [this, context, request, response]() -> absl::Status {
                           if (options_.shm == nullptr) return NoShm();
                           absl::StatusOr<std::vector<ShmRegionInfo>> regions =
                               options_.shm->Status(OwnerOf(*context), request->name());
                           if (!regions.ok()) return regions.status();
                           for (const ShmRegionInfo& region : *regions) {
                             if (!region.cuda_ipc) {
                               if (!request->name().empty()) {
                                 return absl::NotFoundError(
                                     absl::StrCat("region '", region.name,
                                                  "' is system shared memory, not CUDA "
                                                  "shared memory: see SystemSharedMemoryStatus"));
                               }
                               continue;
                             }
                             auto& status = (*response->mutable_regions())[region.name];
                             status.set_name(region.name);
                             status.set_device_id(static_cast<uint64_t>(region.cuda_device));
                             status.set_byte_size(region.byte_size);
                           }
                           return absl::OkStatus();
                         });
}

}  // namespace kserve
}  // namespace rope
