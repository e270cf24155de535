// The three region RPCs (RegisterSharedMemory, UnregisterSharedMemory,
// SharedMemoryStatus) over a ShmRegistry. Calls that reference regions
// (Tensor.shm and the *_out references) are the ordinary entries of
// rope_calls.h, whose tensors tensor_resolver.h resolves.
//
// No gRPC: the caller's identity (`owner`) is the service's to derive.
#ifndef ROPE_PROTO_ENGINE_SHM_CALLS_H_
#define ROPE_PROTO_ENGINE_SHM_CALLS_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "core/engine/engine.h"
#include "core/proto_engine/shm_registry.h"
#include "rope/v1/rope.pb.h"

namespace rope {

// sizeof(cudaIpcMemHandle_t): the size of RegisterSharedMemoryRequest's
// cuda_ipc_handle (this layer does not include CUDA's headers; the CUDA
// backend checks it against the real type).
inline constexpr size_t kCudaIpcHandleBytes = 64;

// A host region (key, offset) through `registry`, or, with cuda_ipc_handle
// set, a CUDA region that `engine`'s backend opens (FAILED_PRECONDITION on a
// backend without device memory: Engine::DeviceMemoryFor). A Rotate or
// AttentionScores naming a CUDA region must have every tensor in CUDA
// regions, AttentionScores its scores_out (and output_out with v) too
// (INVALID_ARGUMENT otherwise, tensor_resolver.h): the backend then reads
// and writes them on the device.
absl::Status AnswerRegisterSharedMemory(Engine& engine, ShmRegistry& registry,
                                        const std::string& owner,
                                        const v1::RegisterSharedMemoryRequest& request);
absl::Status AnswerUnregisterSharedMemory(ShmRegistry& registry, const std::string& owner,
                                          const v1::UnregisterSharedMemoryRequest& request);
absl::Status AnswerSharedMemoryStatus(const ShmRegistry& registry, const std::string& owner,
                                      const v1::SharedMemoryStatusRequest& request,
                                      v1::SharedMemoryStatusResponse* reply);

}  // namespace rope

#endif  // ROPE_PROTO_ENGINE_SHM_CALLS_H_
