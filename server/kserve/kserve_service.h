// KServeServiceImpl: inference.GRPCInferenceService, the KServe v2 /
// Open Inference Protocol as Triton Inference Server serves it, on
// ropeserve's port beside rope.v1.RopeService.
//
// It shares everything with rope.v1: the port's TLS and bearer tokens (the
// transport checks them before any service), the CallGate (calls in flight,
// per-client shares, refusal while draining), the ByteBudget of bytes in
// flight, the WorkQueue, the metrics (rope_requests_total{rpc="ModelInfer"}
// ...), and the shared-memory regions. ModelInfer and ModelStreamInfer are
// converted into the rope.v1 request they stand for and run through the
// rope.v1 entries (kserve_infer.h), so they give the same bits; a small
// rotation is answered on the gRPC thread exactly when its rope.v1 Rotate
// would be (ServiceOptions::inline_rotate_max_bytes).
//
// ServerLive, ServerReady and ModelReady are probes: answered on the gRPC
// thread without a gate slot, so that a full or draining server still says
// what it is (ready false once it drains; ModelReady of a model that does
// not exist is ready false too, as in Triton). The other calls are admitted
// as every rope.v1 call, and name an unknown model NOT_FOUND.
//
// Thread-safe. The collaborators must outlive the server the service is
// registered on.
#ifndef ROPE_SERVER_KSERVE_KSERVE_SERVICE_H_
#define ROPE_SERVER_KSERVE_KSERVE_SERVICE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "core/engine/engine.h"
#include "core/proto_engine/shm_registry.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/server_callback.h"
#include "inference/grpc_service.grpc.pb.h"
#include "inference/grpc_service.pb.h"
#include "server/kserve/kserve_infer.h"
#include "server/kserve/kserve_models.h"
#include "server/kserve/kserve_statistics.h"
#include "server/service/byte_budget.h"
#include "server/service/call_gate.h"
#include "server/service/rope_service.h"
#include "server/service/service_metrics.h"
#include "server/service/unary_call.h"
#include "server/service/work_queue.h"

namespace rope {
namespace kserve {

// ModelInfer is registered raw: gRPC hands it the wire bytes, parsed only
// after admission with their parsed size charged first (unary_call.h
// ServeRawUnary). The other unary calls stay typed: the probes and the
// metadata, statistics and region calls carry names and numbers (parsed
// about their wire size), are cheap, and are never charged to the byte
// budget. ModelStreamInfer is raw too: it admits each message and parses
// it after its admission (admitted_stream.h). The typed methods are named
// one by one rather than through CallbackService: a typed bidi method's
// handler has the raw one's signature (only the context), so the two
// cannot be stacked.
namespace kserve_base {
using S = inference::GRPCInferenceService;
using KServeServiceBase = S::WithRawCallbackMethod_ModelInfer<
    S::WithRawCallbackMethod_ModelStreamInfer<S::WithCallbackMethod_ServerLive<
        S::WithCallbackMethod_ServerReady<S::WithCallbackMethod_ModelReady<
            S::WithCallbackMethod_ServerMetadata<S::WithCallbackMethod_ModelMetadata<
                S::WithCallbackMethod_ModelConfig<S::WithCallbackMethod_ModelStatistics<
                    S::WithCallbackMethod_RepositoryIndex<
                        S::WithCallbackMethod_SystemSharedMemoryStatus<
                            S::WithCallbackMethod_SystemSharedMemoryRegister<
                                S::WithCallbackMethod_SystemSharedMemoryUnregister<
                                    S::WithCallbackMethod_CudaSharedMemoryStatus<
                                        S::WithCallbackMethod_CudaSharedMemoryRegister<
                                            S::WithCallbackMethod_CudaSharedMemoryUnregister<
                                                S::Service>>>>>>>>>>>>>>>>;
}  // namespace kserve_base
using kserve_base::KServeServiceBase;

class KServeServiceImpl final : public KServeServiceBase {
 public:
  // `options` are the rope.v1 service's (rope_service.h): the same limits,
  // shared-memory registry and inline threshold.
  KServeServiceImpl(Engine& engine, CallGate& gate, ByteBudget& budget, ServiceMetrics& metrics,
                    WorkQueue& work, const ModelRepository& models, ServiceOptions options);

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const inference::ServerLiveRequest* request,
                                       inference::ServerLiveResponse* response) override;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const inference::ServerReadyRequest* request,
                                        inference::ServerReadyResponse* response) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context,
                                       const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* context,
                                           const inference::ServerMetadataRequest* request,
                                           inference::ServerMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ModelStreamInfer(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* context,
                                        const inference::ModelConfigRequest* request,
                                        inference::ModelConfigResponse* response) override;
  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* context,
                                            const inference::ModelStatisticsRequest* request,
                                            inference::ModelStatisticsResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* context,
                                            const inference::RepositoryIndexRequest* request,
                                            inference::RepositoryIndexResponse* response) override;
  // Shared memory: kserve_shm.cc.
  grpc::ServerUnaryReactor* SystemSharedMemoryStatus(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryStatusRequest* request,
      inference::SystemSharedMemoryStatusResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryRegister(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryRegisterRequest* request,
      inference::SystemSharedMemoryRegisterResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryUnregister(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryUnregisterRequest* request,
      inference::SystemSharedMemoryUnregisterResponse* response) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryStatus(
      grpc::CallbackServerContext* context, const inference::CudaSharedMemoryStatusRequest* request,
      inference::CudaSharedMemoryStatusResponse* response) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryRegister(
      grpc::CallbackServerContext* context,
      const inference::CudaSharedMemoryRegisterRequest* request,
      inference::CudaSharedMemoryRegisterResponse* response) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryUnregister(
      grpc::CallbackServerContext* context,
      const inference::CudaSharedMemoryUnregisterRequest* request,
      inference::CudaSharedMemoryUnregisterResponse* response) override;

 private:
  class StreamReactor;

  // Whether the server takes calls (not draining, backend healthy).
  bool Ready() const;
  // The caller's identity for the gate's per-client share ("" without one)
  // and as the owner of regions (caller_identity.h).
  std::string ClientOf(const grpc::CallbackServerContext& context) const;
  std::string OwnerOf(const grpc::CallbackServerContext& context) const;
  // A probe's answer: metrics recorded, no gate slot.
  grpc::ServerUnaryReactor* AnswerProbe(Rpc rpc, grpc::CallbackServerContext* context,
                                        const google::protobuf::Message& request,
                                        google::protobuf::Message* response,
                                        const absl::Status& status);
  // A cheap call admitted through the gate (not charged to the byte budget)
  // and answered on the gRPC thread by `answer` (() -> absl::Status).
  template <typename Answer>
  grpc::ServerUnaryReactor* AnswerAdmitted(Rpc rpc, grpc::CallbackServerContext* context,
                                           const google::protobuf::Message& request,
                                           google::protobuf::Message* response, Answer answer);
  // A region call: admitted, not charged to the byte budget, run on the work
  // queue (open and mmap may block).
  template <typename Answer>
  grpc::ServerUnaryReactor* ServeRegionCall(Rpc rpc, grpc::CallbackServerContext* context,
                                            const google::protobuf::Message& request,
                                            google::protobuf::Message* response, Answer answer);
  absl::Status RegisterRegion(grpc::CallbackServerContext* context,
                              const v1::RegisterSharedMemoryRequest& request);
  // Unregisters the caller's regions of one kind (CUDA or host): `name`, or
  // every one of that kind when empty. A name the caller does not hold (of
  // that kind) is no error, as in Triton.
  absl::Status UnregisterRegions(grpc::CallbackServerContext* context, const std::string& name,
                                 bool cuda);

  Engine& engine_;
  CallGate& gate_;
  ServiceMetrics& metrics_;
  WorkQueue& work_;
  const ModelRepository& models_;
  const ServiceOptions options_;
  const UnaryServing serving_;  // the pieces above, as every call is admitted with them
  ModelStatisticsTable statistics_;
};

}  // namespace kserve
}  // namespace rope

#endif  // ROPE_SERVER_KSERVE_KSERVE_SERVICE_H_
