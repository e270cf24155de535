#include "core/proto_engine/shm_calls.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace rope {

absl::Status AnswerRegisterSharedMemory(Engine& engine, ShmRegistry& registry,
                                        const std::string& owner,
                                        const v1::RegisterSharedMemoryRequest& request) {
  if (request.cuda_ipc_handle().empty()) {
    if (request.cuda_device() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cuda_device is ", request.cuda_device(),
          " but cuda_ipc_handle is empty: cuda_device only goes with a CUDA region"));
    }
    return registry.Register(owner, request.name(), request.key(), request.offset(),
                             request.byte_size());
  }
  if (!request.key().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key is \"", request.key(),
        "\" and cuda_ipc_handle is set: a region is a shared-memory object or CUDA memory, "
        "not both"));
  }
  if (request.offset() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "offset is ", request.offset(),
        " and cuda_ipc_handle is set: a CUDA region starts at its allocation's first byte "
        "(references carry the offsets)"));
  }
  if (request.cuda_ipc_handle().size() != kCudaIpcHandleBytes) {
    return absl::InvalidArgumentError(absl::StrCat("cuda_ipc_handle is ",
                                                   request.cuda_ipc_handle().size(),
                                                   " bytes: a cudaIpcMemHandle_t is ",
                                                   kCudaIpcHandleBytes));
  }
  if (request.cuda_device() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda_device is ", request.cuda_device(), ": must be >= 0"));
  }
  return registry.RegisterDevice(
      owner, request.name(), request.byte_size(),
      [&]() -> absl::StatusOr<std::shared_ptr<DeviceMemoryLease>> {
        ROPE_ASSIGN_OR_RETURN(DeviceMemory* const memory,
                              engine.DeviceMemoryFor("cuda_ipc_handle"));
        return memory->OpenIpcHandle(request.cuda_ipc_handle(), request.cuda_device(),
                                     request.byte_size());
      });
}

absl::Status AnswerUnregisterSharedMemory(ShmRegistry& registry, const std::string& owner,
                                          const v1::UnregisterSharedMemoryRequest& request) {
  return registry.Unregister(owner, request.name());
}

absl::Status AnswerSharedMemoryStatus(const ShmRegistry& registry, const std::string& owner,
                                      const v1::SharedMemoryStatusRequest& request,
                                      v1::SharedMemoryStatusResponse* reply) {
  ROPE_ASSIGN_OR_RETURN(std::vector<ShmRegionInfo> regions, registry.Status(owner, request.name()));
  for (const ShmRegionInfo& info : regions) {
    v1::SharedMemoryRegionStatus* status = reply->add_regions();
    status->set_name(info.name);
    status->set_key(info.key);
    status->set_offset(info.offset);
    status->set_byte_size(info.byte_size);
    status->set_cuda_ipc(info.cuda_ipc);
    status->set_cuda_device(info.cuda_device);
  }
  return absl::OkStatus();
}

}  // namespace rope
