// Rotate and AttentionScores whose tensors reference shared-memory regions
// (Tensor.shm, RotateRequest.q_out/k_out, AttentionScoresRequest.scores_out/
// output_out), and the three region RPCs over a ShmRegistry.
//
// Every reference is checked before any work (ShmCallScope::Resolve): the
// region is the caller's, offset + byte_size lies within it without
// overflow, the address is aligned for the dtype, the backing object still
// covers the region (fstat), and no output partially overlaps an input or
// another output (an output equal to its own input is in place). After the
// work, a region whose backing object shrank during the call
// (shm_fault_guard.h) turns the call's status into FAILED_PRECONDITION. On
// error the contents of an output range are unspecified.
//
// No gRPC: the caller's identity (`owner`) is the service's to derive.
#ifndef ROPE_PROTO_ENGINE_SHM_CALLS_H_
#define ROPE_PROTO_ENGINE_SHM_CALLS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rope/v1/rope.pb.h"
#include "core/proto_engine/shm_registry.h"
#include "core/engine/engine.h"
#include "core/engine/interrupt.h"

namespace rope {

// Whether the request references shared memory anywhere (the service then
// routes it here; plain requests keep the bytes path unchanged).
bool UsesSharedMemory(const v1::RotateRequest& request);
bool UsesSharedMemory(const v1::AttentionScoresRequest& request);

// Bytes the request's references name (inputs and outputs), saturating at
// INT64_MAX: what the request moves though its message is small. The seam
// for a bytes-in-flight budget.
int64_t ReferencedBytes(const v1::RotateRequest& request);
int64_t ReferencedBytes(const v1::AttentionScoresRequest& request);

absl::Status AnswerRotateShared(Engine& engine, const ShmRegistry& registry,
                                const std::string& owner, v1::RotateRequest* request,
                                v1::RotateResponse* reply);
absl::Status AnswerAttentionScoresShared(Engine& engine, const ShmRegistry& registry,
                                         const std::string& owner,
                                         const v1::AttentionScoresRequest& request,
                                         v1::AttentionScoresResponse* reply,
                                         const Interrupt* interrupt = nullptr);

// sizeof(cudaIpcMemHandle_t): the size of RegisterSharedMemoryRequest's
// cuda_ipc_handle (this layer does not include CUDA's headers; the CUDA
// backend checks it against the real type).
inline constexpr size_t kCudaIpcHandleBytes = 64;

// A host region (key, offset) through `registry`, or, with cuda_ipc_handle
// set, a CUDA region that `engine`'s backend opens (FAILED_PRECONDITION on a
// backend without device memory). A Rotate or AttentionScores naming a CUDA
// region must have every tensor in CUDA regions, AttentionScores its
// scores_out (and output_out with v) too (INVALID_ARGUMENT otherwise): the
// backend then reads and writes them on the device.
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
