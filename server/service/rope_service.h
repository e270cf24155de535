// RopeServiceImpl: the rope.v1.RopeService over gRPC's callback API.
//
// gRPC glue only: each handler admits the call (call_admission.h: a CallGate
// slot, its request's bytes and its reply's estimated bytes in the
// ByteBudget; a stream per message, admitted_stream.h), runs the
// RPC's entry of core/proto_engine/rope_calls.h (request message to reply message
// over the Engine) on the WorkQueue so the library's threads stay free for
// I/O and admission, converts the status (ToGrpcStatus), and records metrics.
//
// Rotate and RotateStream rotate in the request's own bytes and move them
// into the reply: the payload is never copied by the service (beyond the
// parse and the serialization, as with any gRPC message).
//
// Thread-safe. The collaborators must outlive the server the service is
// registered on.
#ifndef ROPE_SERVICE_ROPE_SERVICE_H_
#define ROPE_SERVICE_ROPE_SERVICE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/defaults.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "rope/v1/rope.grpc.pb.h"
#include "rope/v1/rope.pb.h"
#include "core/engine/engine.h"
#include "core/proto_engine/rope_calls.h"
#include "core/proto_engine/shm_registry.h"
#include "server/service/byte_budget.h"
#include "server/service/call_gate.h"
#include "server/service/send_watch.h"
#include "server/service/stream_limits.h"
#include "server/service/service_metrics.h"
#include "server/service/unary_call.h"
#include "server/service/work_queue.h"

namespace rope {

struct ServiceOptions {
  // The server's limit on one message each way; replies over it are refused
  // with RESOURCE_EXHAUSTED. Reported by GetServerInfo.
  int64_t max_message_bytes = kDefaultMaxMessageBytes;
  // --max_inflight_bytes (both halves; 0: none). Reported by GetServerInfo.
  int64_t max_inflight_bytes = 0;
  // Whether every call's bearer token was checked (token_auth.h), so that
  // it may name the client for the per-client share (caller_identity.h).
  bool tokens_verified = false;
  // Shared-memory regions (owned by the server); null: the region RPCs and
  // references answer FAILED_PRECONDITION.
  ShmRegistry* shm = nullptr;
  // A Rotate request of at most this many bytes that may run inline
  // (CallEstimate::may_run_inline: no reference, a table of at most
  // kInlineMaxLen rows from explicit fields), on a backend whose calls never
  // wait (Backend::CallsNeverWait: the CPU), is answered on the gRPC thread
  // that received it, as Echo is: its arithmetic (a few microseconds) costs
  // less than handing it to the work queue and back
  // (bench/results/service_bench.md). 0 sends every call to the queue.
  int64_t inline_rotate_max_bytes = 64 << 10;
  // The send deadline of replies (send_watch.h, owned by the server); null:
  // none.
  SendWatch* send_watch = nullptr;
  // The per-client count and idle timeout of streams (stream_limits.h,
  // owned by the server); null: none.
  StreamLimits* streams = nullptr;
};

// Whether a call of `estimate` whose request is `request_bytes` long is
// answered on the gRPC thread that received it
// (ServiceOptions::inline_rotate_max_bytes). The one rule for every service
// on the port (rope.v1 Rotate, and ModelInfer, which runs a Rotate).
bool AnswersInline(const ServiceOptions& options, const Engine& engine,
                   const CallEstimate& estimate, int64_t request_bytes);

// What a call brings to its rope_calls.h entry, minus the interrupt (the
// caller adds it): the caller's regions, its identity derived only if the
// call references one. `context` must outlive the returned value's use.
CallContext CallContextOf(const ServiceOptions& options,
                          const grpc::CallbackServerContext* context);

// The methods whose requests can be large or amplify once parsed (packed
// repeated fields, submessages) are registered raw: gRPC hands them the
// wire bytes, parsed only after admission with their parsed size charged
// first (unary_call.h ServeRawUnary). The region calls too, for one rule
// on malformed bytes. RotateStream is raw too, each message parsed after
// its admission (admitted_stream.h). GetServerInfo (an empty request) stays
// typed. The chain starts from the typed GetServerInfo alone, not from
// CallbackService: a typed bidi method's handler has the raw one's
// signature (only the context), so the two cannot be stacked.
using RopeServiceBase = v1::RopeService::WithRawCallbackMethod_Rotate<
    v1::RopeService::WithRawCallbackMethod_RotateStream<
    v1::RopeService::WithRawCallbackMethod_AttentionScores<
        v1::RopeService::WithRawCallbackMethod_GetTable<
            v1::RopeService::WithRawCallbackMethod_ResolveConfig<
                v1::RopeService::WithRawCallbackMethod_BuildPositions<
                    v1::RopeService::WithRawCallbackMethod_RegisterSharedMemory<
                        v1::RopeService::WithRawCallbackMethod_UnregisterSharedMemory<
                            v1::RopeService::WithRawCallbackMethod_SharedMemoryStatus<
                                v1::RopeService::WithCallbackMethod_GetServerInfo<
                                    v1::RopeService::Service>>>>>>>>>>;

class RopeServiceImpl final : public RopeServiceBase {
 public:
  RopeServiceImpl(Engine& engine, CallGate& gate, ByteBudget& budget, ServiceMetrics& metrics,
                  WorkQueue& work, ServiceOptions options);

  grpc::ServerUnaryReactor* Rotate(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* RotateStream(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* AttentionScores(grpc::CallbackServerContext* context,
                                            const grpc::ByteBuffer* request,
                                            grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetTable(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* context,
                                          const v1::GetServerInfoRequest* request,
                                          v1::ServerInfo* response) override;
  grpc::ServerUnaryReactor* ResolveConfig(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* BuildPositions(grpc::CallbackServerContext* context,
                                           const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) override;
  // Shared memory: rope_service_shm.cc.
  grpc::ServerUnaryReactor* RegisterSharedMemory(grpc::CallbackServerContext* context,
                                                 const grpc::ByteBuffer* request,
                                                 grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* UnregisterSharedMemory(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* request,
                                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* SharedMemoryStatus(grpc::CallbackServerContext* context,
                                               const grpc::ByteBuffer* request,
                                               grpc::ByteBuffer* response) override;

 private:
  class RotateStreamReactor;

  // Whether a call of `estimate` is answered on the receiving gRPC thread
  // (ServiceOptions::inline_rotate_max_bytes).
  bool RunsInline(const CallEstimate& estimate, int64_t request_bytes) const;
  // What a call brings to its rope_calls.h entry: the caller's regions (its
  // identity derived only if the call references one).
  CallContext CallOf(grpc::CallbackServerContext* context) const;

  // ServeRawUnary with this service's serving pieces and the caller's
  // share (`charged` false: the request is not charged, the region calls).
  template <typename Request, typename Response, typename Plan>
  grpc::ServerUnaryReactor* ServeRaw(Rpc rpc, grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request, grpc::ByteBuffer* response,
                                     Plan plan, bool charged = true);
  // The skeleton of the region calls (rope_service_shm.cc): `answer` is
  // (const Request&, Response*) -> absl::Status.
  template <typename Request, typename Response, typename Answer>
  grpc::ServerUnaryReactor* ServeRegionCall(Rpc rpc, grpc::CallbackServerContext* context,
                                            const grpc::ByteBuffer* request,
                                            grpc::ByteBuffer* response, Answer answer);
  void FillServerInfo(v1::ServerInfo* info) const;
  // The caller's identity for the gate's per-client share (caller_identity.h),
  // or "" when there is no share (nothing to compute).
  std::string ClientOf(const grpc::CallbackServerContext& context) const;
  // The caller's identity as the owner of shared-memory regions
  // (caller_identity.h, IdentityUse::kOwnership).
  std::string OwnerOf(const grpc::CallbackServerContext& context) const;
  void FillShmInfo(v1::ServerInfo* info) const;

  Engine& engine_;
  CallGate& gate_;
  ByteBudget& budget_;
  ServiceMetrics& metrics_;
  WorkQueue& work_;
  const ServiceOptions options_;
  const UnaryServing serving_;  // the pieces above, as every call is admitted with them
};

template <typename Request, typename Response, typename Plan>
grpc::ServerUnaryReactor* RopeServiceImpl::ServeRaw(Rpc rpc, grpc::CallbackServerContext* context,
                                                    const grpc::ByteBuffer* request,
                                                    grpc::ByteBuffer* response, Plan plan,
                                                    bool charged) {
  RawUnarySpec spec;
  spec.rpc = rpc;
  spec.client = ClientOf(*context);
  spec.charged = charged;
  return ServeRawUnary<Request, Response>(serving_, context, request, response, std::move(spec),
                                          std::move(plan));
}

}  // namespace rope

#endif  // ROPE_SERVICE_ROPE_SERVICE_H_
