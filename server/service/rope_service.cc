#include "server/service/rope_service.h"

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/retry_metadata.h"
#include "core/proto_engine/request_conversion.h"
#include "core/proto_engine/rope_calls.h"
#include "core/engine/table_block.h"
#include "server/service/caller_identity.h"
#include "server/service/status_conversion.h"
#include "server/service/unary_call.h"

#ifndef ROPE_VERSION
#error "ROPE_VERSION must be defined by the build (the project version)"
#endif

namespace rope {

namespace {

absl::Status CancelledBeforeRun(Rpc rpc) {
  return absl::CancelledError(
      absl::StrCat(RpcName(rpc), " was cancelled (or its deadline passed) before it ran"));
}

// Echoes the attempt number gRPC's retries send to the server back to the
// client in a trailer (common/retry_metadata.h), so that it can count them.
void EchoPreviousAttempts(grpc::CallbackServerContext* context) {
  const std::multimap<grpc::string_ref, grpc::string_ref>& metadata = context->client_metadata();
  auto it = metadata.find(kGrpcPreviousAttemptsHeader);
  if (it == metadata.end()) return;
  context->AddTrailingMetadata(kPreviousAttemptsTrailer,
                               std::string(it->second.data(), it->second.size()));
}

// A table cache's counters, in blocks (TableCacheStats in rope.proto).
void SetTableCacheStats(const TableCacheStats& stats, v1::TableCacheStats* out) {
  out->set_hits(stats.hits);
  out->set_misses(stats.misses);
  out->set_evictions(stats.evictions);
  out->set_entries(stats.entries);
  out->set_bytes(stats.bytes);
  out->set_budget_bytes(stats.budget_bytes);
  out->set_blocks_built(stats.built);
  out->set_blocks_resident(stats.entries);
  out->set_blocks_evicted(stats.evictions);
  out->set_block_rows(int64_t{1} << kMaxTableBlockShift);
}

}  // namespace

// One RotateStream call. Strictly one message at a time: read, rotate on the
// work queue, write, read the next; so replies come in request order. Each
// message is admitted like a unary call: it takes a gate slot (refused with
// RESOURCE_EXHAUSTED, ending the stream, when none is free) and its bytes in
// the byte budget, both held until its reply is written. An idle stream (one
// waiting for its next message) holds neither, so streams that never send
// cannot take the slots from other calls; what bounds them is the
// per-connection stream cap (--max_streams_per_connection) and the
// connection's age. Deletes itself in OnDone.
class RopeServiceImpl::RotateStreamReactor final
    : public grpc::ServerBidiReactor<v1::RotateRequest, v1::RotateResponse> {
 public:
  RotateStreamReactor(RopeServiceImpl& service, grpc::CallbackServerContext* context)
      : service_(service), context_(context) {
    client_ = service_.ClientOf(*context);
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client half-closed (or the call is gone): end cleanly
      Finish(grpc::Status::OK);
      return;
    }
    message_start_ = absl::Now();
    if (service_.gate_.draining()) {
      // Answering one more message would extend the drain indefinitely; the
      // client retries this message elsewhere.
      FinishStream(DrainingError());
      return;
    }
    absl::Status admitted = service_.gate_.TryEnter(client_);
    if (!admitted.ok()) {
      bytes_in_ = static_cast<int64_t>(request_.ByteSizeLong());
      FinishStream(admitted);
      return;
    }
    admitted_ = true;
    // Per message: its request's bytes and its reply's serialized copy,
    // returned once the reply is written.
    const int64_t held_bytes = static_cast<int64_t>(request_.ByteSizeLong());
    const int64_t more_bytes = EstimateRotate(request_).more_bytes;
    service_.budget_.Reserve(RpcName(Rpc::kRotateStream), held_bytes, more_bytes,
                             absl::FromChrono(context_->deadline()),
                             [this, held_bytes, more_bytes](absl::Status granted) {
                               if (!granted.ok()) {
                                 bytes_in_ = held_bytes;
                                 FinishStream(granted);
                                 return;
                               }
                               bytes_charged_ = held_bytes + more_bytes;
                               service_.work_.Schedule([this] { RotateCurrent(); }, client_);
                             });
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                          "RotateStream: a reply could not be sent (the client has gone)"));
      return;
    }
    LeaveGate();
    ReleaseBytes();
    if (request_.ByteSizeLong() + response_.ByteSizeLong() <= kKeptCapacityBytes) {
      // Clear keeps the strings' capacity: the next parse reuses it.
      request_.Clear();
      response_.Clear();
    } else {
      // An idle stream holds no budget, so it must not keep a large
      // message's buffers either.
      request_ = v1::RotateRequest();
      response_ = v1::RotateResponse();
    }
    StartRead(&request_);
  }

  void OnDone() override {
    LeaveGate();
    ReleaseBytes();
    delete this;
  }

 private:
  // Buffers an idle stream may keep for its next message (uncharged).
  static constexpr size_t kKeptCapacityBytes = size_t{1} << 20;

  void LeaveGate() {
    if (!admitted_) return;
    service_.gate_.Leave(client_);
    admitted_ = false;
  }

  void ReleaseBytes() {
    if (bytes_charged_ == 0) return;
    service_.budget_.Release(bytes_charged_);
    bytes_charged_ = 0;
  }

  void RotateCurrent() {
    const int64_t bytes_in = static_cast<int64_t>(request_.ByteSizeLong());
    grpc::CallbackServerContext* const context = context_;
    const Interrupt interrupt([context] { return context->IsCancelled(); },
                              absl::FromChrono(context_->deadline()));
    CallContext call = service_.CallOf(context_);
    call.interrupt = &interrupt;
    absl::Status status =
        context_->IsCancelled()
            ? CancelledBeforeRun(Rpc::kRotateStream)
            : AnswerRotate(service_.engine_, &request_, &response_, call);
    if (!status.ok()) {
      bytes_in_ = bytes_in;
      FinishStream(status);
      return;
    }
    service_.metrics_.RecordRequest(Rpc::kRotateStream, grpc::StatusCode::OK,
                                    absl::Now() - message_start_, bytes_in,
                                    static_cast<int64_t>(response_.ByteSizeLong()));
    StartWrite(&response_);
  }

  // Ends the stream with the status of the message in hand.
  void FinishStream(const absl::Status& status) {
    grpc::Status grpc_status = ToGrpcStatus(status);
    service_.metrics_.RecordRequest(Rpc::kRotateStream, grpc_status.error_code(),
                                    absl::Now() - message_start_, bytes_in_, 0);
    Finish(std::move(grpc_status));
  }

  RopeServiceImpl& service_;
  grpc::CallbackServerContext* const context_;
  v1::RotateRequest request_;
  v1::RotateResponse response_;
  absl::Time message_start_;
  int64_t bytes_in_ = 0;
  int64_t bytes_charged_ = 0;  // of the message in hand, in the byte budget
  bool admitted_ = false;  // the message in hand holds a gate slot
  std::string client_;  // for the per-client share
};

RopeServiceImpl::RopeServiceImpl(Engine& engine, CallGate& gate, ByteBudget& budget,
                                 ServiceMetrics& metrics, WorkQueue& work, ServiceOptions options)
    : engine_(engine),
      gate_(gate),
      budget_(budget),
      metrics_(metrics),
      work_(work),
      options_(options) {
  SetMessageAllocatorFor_Rotate(&rotate_allocator_);
}

template <typename Request, typename Response, typename Answer>
grpc::ServerUnaryReactor* RopeServiceImpl::ServeUnary(Rpc rpc, grpc::CallbackServerContext* context,
                                                      const Request& request, int64_t more_bytes,
                                                      Response* response, Answer answer,
                                                      RunOn run_on) {
  EchoPreviousAttempts(context);
  auto* call = new UnaryCall(rpc, gate_, metrics_, options_.max_message_bytes);
  std::string client = ClientOf(*context);
  if (!call->Admit(request, client)) return call;
  call->ReserveBytes(
      budget_, more_bytes, absl::FromChrono(context->deadline()),
      [this, call, rpc, context, response, run_on, client = std::move(client),
       answer = std::move(answer)]() mutable {
        auto run = [call, rpc, context, response, answer = std::move(answer)]() mutable {
          if (context->IsCancelled()) {
            call->FinishWith(CancelledBeforeRun(rpc), nullptr);
            return;
          }
          call->FinishWith(answer(), response);
        };
        if (run_on == RunOn::kThisThread) {
          run();
        } else {
          work_.Schedule(std::move(run), client);
        }
      });
  return call;
}

void RopeServiceImpl::FillServerInfo(v1::ServerInfo* info) const {
  const BackendInfo backend = engine_.backend_info();
  info->set_version(ROPE_VERSION);
  info->set_backend(backend.name);
  info->set_device(backend.device);
  info->set_threads(backend.threads);
  info->set_cpu_simd(backend.cpu_simd);

  const EngineLimits& engine_limits = engine_.limits();
  v1::ServerLimits* limits = info->mutable_limits();
  limits->set_max_message_bytes(options_.max_message_bytes);
  limits->set_max_len_cap(engine_limits.max_len_cap);
  limits->set_max_elements_per_request(engine_limits.max_elements_per_request);
  limits->set_max_concurrent_calls(gate_.max_in_flight());
  limits->set_table_cache_bytes(engine_limits.table_cache_bytes);
  limits->set_max_table_blocks_per_call(engine_limits.max_table_blocks_per_call);
  limits->set_max_inflight_bytes(std::max<int64_t>(options_.max_inflight_bytes, 0));
  v1::InflightBytesStats* inflight = info->mutable_inflight_bytes();
  inflight->set_budget_bytes(std::max<int64_t>(budget_.budget_bytes(), 0));
  inflight->set_bytes(budget_.in_use_bytes());
  inflight->set_waiters(budget_.waiters());
  inflight->set_refusals(budget_.refusals());

  SetTableCacheStats(engine_.cache_stats(), info->mutable_table_cache());

  info->set_device_memory_total_bytes(backend.device_memory_total_bytes);
  info->set_device_memory_used_bytes(backend.device_memory_used_bytes);
  if (backend.device_table_cache.has_value()) {
    const TableCacheStats& device = *backend.device_table_cache;
    SetTableCacheStats(device, info->mutable_device_table_cache());
  }

  FillShmInfo(info);
  for (const std::string& name : SupportedScalingNames()) info->add_supported_scalings(name);
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    info->add_supported_dtypes(v1::DType_Name(DTypeToProto(dtype)));
  }
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat8E4M3,
                      DType::kFloat8E5M2}) {
    info->add_supported_output_dtypes(v1::DType_Name(DTypeToProto(dtype)));
  }
}

bool AnswersInline(const ServiceOptions& options, const Engine& engine,
                   const CallEstimate& estimate, int64_t request_bytes) {
  return estimate.may_run_inline && options.inline_rotate_max_bytes > 0 &&
         engine.backend_calls_never_wait() && request_bytes <= options.inline_rotate_max_bytes;
}

CallContext CallContextOf(const ServiceOptions& options,
                          const grpc::CallbackServerContext* context) {
  CallContext call;
  call.regions.registry = options.shm;
  call.regions.owner = [tokens_verified = options.tokens_verified, context] {
    return CallerIdentity(*context, tokens_verified, IdentityUse::kOwnership);
  };
  return call;
}

bool RopeServiceImpl::RunsInline(const CallEstimate& estimate,
                                  const google::protobuf::Message& request) const {
  return AnswersInline(options_, engine_, estimate,
                       static_cast<int64_t>(request.ByteSizeLong()));
}

CallContext RopeServiceImpl::CallOf(grpc::CallbackServerContext* context) const {
  return CallContextOf(options_, context);
}

grpc::ServerUnaryReactor* RopeServiceImpl::Rotate(grpc::CallbackServerContext* context,
                                                  const v1::RotateRequest* request,
                                                  v1::RotateResponse* response) {
  // The same object as `request`, owned by this call through the allocator
  // installed in the constructor: rotated in place, its bytes moved into the
  // reply.
  v1::RotateRequest* owned = MutableRequest<v1::RotateRequest, v1::RotateResponse>(context);
  const CallEstimate estimate = EstimateRotate(*request);
  // A small call is admitted and charged like every call, and answered on
  // this thread (or, if it had to wait for bytes, on the thread that freed
  // them).
  return ServeUnary(
      Rpc::kRotate, context, *request, estimate.more_bytes, response,
      [this, context, owned, response] {
        if (owned == nullptr) {
          return absl::InternalError("Rotate: the owning message allocator is not installed");
        }
        // Stops the parse of an hf_config_json when the caller goes or its
        // deadline passes.
        const Interrupt interrupt([context] { return context->IsCancelled(); },
                                  absl::FromChrono(context->deadline()));
        CallContext call = CallOf(context);
        call.interrupt = &interrupt;
        return AnswerRotate(engine_, owned, response, call);
      },
      owned != nullptr && RunsInline(estimate, *request) ? RunOn::kThisThread
                                                         : RunOn::kWorkQueue);
}

grpc::ServerBidiReactor<v1::RotateRequest, v1::RotateResponse>* RopeServiceImpl::RotateStream(
    grpc::CallbackServerContext* context) {
  return new RotateStreamReactor(*this, context);
}

grpc::ServerUnaryReactor* RopeServiceImpl::AttentionScores(
    grpc::CallbackServerContext* context, const v1::AttentionScoresRequest* request,
    v1::AttentionScoresResponse* response) {
  const ReplyLimit limit(options_.max_message_bytes);
  return ServeUnary(Rpc::kAttentionScores, context, *request,
                    EstimateAttentionScores(*request, limit).more_bytes, response,
                    [this, context, request, response, limit] {
                      // The longest call there is: let the backend stop when the
                      // client cancels or its deadline passes (gRPC marks the call
                      // cancelled then).
                      const Interrupt interrupt([context] { return context->IsCancelled(); },
                                                absl::FromChrono(context->deadline()));
                      CallContext call = CallOf(context);
                      call.interrupt = &interrupt;
                      call.reply_limit = limit;
                      return AnswerAttentionScores(engine_, *request, response, call);
                    });
}

grpc::ServerUnaryReactor* RopeServiceImpl::GetTable(grpc::CallbackServerContext* context,
                                                    const v1::GetTableRequest* request,
                                                    v1::GetTableResponse* response) {
  // A miss builds a whole table: off gRPC's threads too.
  const ReplyLimit limit(options_.max_message_bytes);
  return ServeUnary(Rpc::kGetTable, context, *request,
                    EstimateGetTable(*request, engine_.limits().max_len_cap, limit).more_bytes,
                    response, [this, context, request, response, limit] {
                      const Interrupt interrupt([context] { return context->IsCancelled(); },
                                                absl::FromChrono(context->deadline()));
                      return AnswerGetTable(engine_, *request, limit, response, &interrupt);
                    });
}

grpc::ServerUnaryReactor* RopeServiceImpl::ResolveConfig(grpc::CallbackServerContext* context,
                                                         const v1::RopeConfig* request,
                                                         v1::ResolvedConfig* response) {
  // A miss parses a config.json: off gRPC's threads too.
  return ServeUnary(
      Rpc::kResolveConfig, context, *request, EstimateResolveConfig(*request).more_bytes,
      response,
      [this, context, request, response] {
        const Interrupt interrupt([context] { return context->IsCancelled(); },
                                  absl::FromChrono(context->deadline()));
        return AnswerResolveConfig(engine_, *request, response, &interrupt);
      });
}

grpc::ServerUnaryReactor* RopeServiceImpl::BuildPositions(
    grpc::CallbackServerContext* context, const v1::BuildPositionsRequest* request,
    v1::BuildPositionsResponse* response) {
  // A Qwen form parses a config.json: off gRPC's threads too.
  const ReplyLimit limit(options_.max_message_bytes);
  return ServeUnary(Rpc::kBuildPositions, context, *request,
                    EstimateBuildPositions(*request, limit).more_bytes, response,
                    [this, context, request, response, limit] {
                      const Interrupt interrupt([context] { return context->IsCancelled(); },
                                                absl::FromChrono(context->deadline()));
                      return AnswerBuildPositions(engine_, *request, limit, response, &interrupt);
                    });
}

std::string RopeServiceImpl::ClientOf(const grpc::CallbackServerContext& context) const {
  return gate_.max_per_client() > 0
             ? CallerIdentity(context, options_.tokens_verified, IdentityUse::kShare)
             : std::string();
}

grpc::ServerUnaryReactor* RopeServiceImpl::GetServerInfo(grpc::CallbackServerContext* context,
                                                         const v1::GetServerInfoRequest* request,
                                                         v1::ServerInfo* response) {
  auto* call = new UnaryCall(Rpc::kGetServerInfo, gate_, metrics_, options_.max_message_bytes);
  if (!call->Admit(*request, ClientOf(*context))) return call;
  // Cheap and non-blocking: answered on the gRPC thread.
  FillServerInfo(response);
  call->FinishWith(absl::OkStatus(), response);
  return call;
}

}  // namespace rope
