#include "server/service/rope_service.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/time/time.h"
#include "core/proto_engine/request_conversion.h"
#include "core/proto_engine/rope_calls.h"
#include "core/engine/table_block.h"
#include "server/service/admitted_stream.h"
#include "server/service/call_admission.h"
#include "server/service/caller_identity.h"
#include "server/service/unary_call.h"

#ifndef ROPE_VERSION
#error "ROPE_VERSION must be defined by the build (the project version)"
#endif

namespace rope {

namespace {

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

// One RotateStream call (admitted_stream.h: each message admitted and
// parsed like a raw unary call, an idle stream holding nothing). Any failure
// of a message ends the stream with its status.
class RopeServiceImpl::RotateStreamReactor final
    : public AdmittedStream<v1::RotateRequest, v1::RotateResponse> {
 public:
  RotateStreamReactor(RopeServiceImpl& service, grpc::CallbackServerContext* context)
      : AdmittedStream(service.serving_.admission, service.work_, Rpc::kRotateStream, context,
                       service.ClientOf(*context)),
        service_(service) {
    StartReading();
  }

 private:
  absl::StatusOr<int64_t> Prepare() override { return EstimateRotate(request_).more_bytes; }

  absl::Status Answer() override {
    // Stops the parse of an hf_config_json when the caller goes or its
    // deadline passes.
    const Interrupt interrupt = InterruptOf(context());
    CallContext call = service_.CallOf(context());
    call.interrupt = &interrupt;
    return AnswerRotate(service_.engine_, &request_, &response_, call);
  }

  void MessageFailed(const absl::Status& status) override { EndStream(status); }

  RopeServiceImpl& service_;
};

RopeServiceImpl::RopeServiceImpl(Engine& engine, CallGate& gate, ByteBudget& budget,
                                 ServiceMetrics& metrics, WorkQueue& work, ServiceOptions options)
    : engine_(engine),
      gate_(gate),
      budget_(budget),
      metrics_(metrics),
      work_(work),
      options_(options),
      serving_{AdmissionParts{&gate, &budget, &metrics, options.send_watch, options.streams},
               &work, options.max_message_bytes} {}

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
  limits->set_max_inflight_bytes_per_client(budget_.per_client_bytes());
  if (options_.streams != nullptr) {
    limits->set_max_streams_per_client(std::max<int64_t>(options_.streams->max_per_client(), 0));
    const absl::Duration idle = options_.streams->idle_timeout();
    limits->set_stream_idle_timeout_ms(
        idle == absl::InfiniteDuration() ? 0 : absl::ToInt64Milliseconds(idle));
  }
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
  for (const std::string& name : SupportedAttentionResultNames()) {
    info->add_supported_attention_results(name);
  }
  for (const std::string& name : AttentionMaskRules()) info->add_supported_attention_masks(name);
  for (const std::string& name : AttentionLogitTransforms()) {
    info->add_supported_attention_transforms(name);
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

bool RopeServiceImpl::RunsInline(const CallEstimate& estimate, int64_t request_bytes) const {
  return AnswersInline(options_, engine_, estimate, request_bytes);
}

CallContext RopeServiceImpl::CallOf(grpc::CallbackServerContext* context) const {
  return CallContextOf(options_, context);
}

grpc::ServerUnaryReactor* RopeServiceImpl::Rotate(grpc::CallbackServerContext* context,
                                                  const grpc::ByteBuffer* request,
                                                  grpc::ByteBuffer* response) {
  return ServeRaw<v1::RotateRequest, v1::RotateResponse>(
      Rpc::kRotate, context, request, response,
      [this, context](v1::RotateRequest* parsed, v1::RotateResponse* reply,
                      int64_t request_bytes) -> absl::StatusOr<UnaryWork> {
        const CallEstimate estimate = EstimateRotate(*parsed);
        UnaryWork work;
        work.more_bytes = estimate.more_bytes;
        // A small call is admitted and charged like every call, and answered
        // on this thread (or, if it had to wait for bytes, on the thread that
        // freed them).
        work.run_on = RunsInline(estimate, request_bytes) ? RunOn::kThisThread : RunOn::kWorkQueue;
        // The request is this call's own: rotated in place, its bytes moved
        // into the reply.
        work.answer = [this, context, parsed, reply] {
          // Stops the parse of an hf_config_json when the caller goes or its
          // deadline passes.
          const Interrupt interrupt = InterruptOf(context);
          CallContext call = CallOf(context);
          call.interrupt = &interrupt;
          return AnswerRotate(engine_, parsed, reply, call);
        };
        return work;
      });
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* RopeServiceImpl::RotateStream(
    grpc::CallbackServerContext* context) {
  return new RotateStreamReactor(*this, context);
}

grpc::ServerUnaryReactor* RopeServiceImpl::AttentionScores(grpc::CallbackServerContext* context,
                                                           const grpc::ByteBuffer* request,
                                                           grpc::ByteBuffer* response) {
  return ServeRaw<v1::AttentionScoresRequest, v1::AttentionScoresResponse>(
      Rpc::kAttentionScores, context, request, response,
      [this, context](v1::AttentionScoresRequest* parsed, v1::AttentionScoresResponse* reply,
                      int64_t) -> absl::StatusOr<UnaryWork> {
        const ReplyLimit limit(options_.max_message_bytes);
        UnaryWork work;
        work.more_bytes = EstimateAttentionScores(*parsed, limit).more_bytes;
        work.answer = [this, context, parsed, reply, limit] {
          // The longest call there is: let the backend stop when the client
          // cancels or its deadline passes (gRPC marks the call cancelled
          // then).
          const Interrupt interrupt = InterruptOf(context);
          CallContext call = CallOf(context);
          call.interrupt = &interrupt;
          call.reply_limit = limit;
          return AnswerAttentionScores(engine_, *parsed, reply, call);
        };
        return work;
      });
}

grpc::ServerUnaryReactor* RopeServiceImpl::GetTable(grpc::CallbackServerContext* context,
                                                    const grpc::ByteBuffer* request,
                                                    grpc::ByteBuffer* response) {
  // A miss builds a whole table: off gRPC's threads too.
  return ServeRaw<v1::GetTableRequest, v1::GetTableResponse>(
      Rpc::kGetTable, context, request, response,
      [this, context](v1::GetTableRequest* parsed, v1::GetTableResponse* reply,
                      int64_t) -> absl::StatusOr<UnaryWork> {
        const ReplyLimit limit(options_.max_message_bytes);
        UnaryWork work;
        work.more_bytes = EstimateGetTable(*parsed, engine_.limits().max_len_cap, limit).more_bytes;
        work.answer = [this, context, parsed, reply, limit] {
          const Interrupt interrupt = InterruptOf(context);
          return AnswerGetTable(engine_, *parsed, limit, reply, &interrupt);
        };
        return work;
      });
}

grpc::ServerUnaryReactor* RopeServiceImpl::ResolveConfig(grpc::CallbackServerContext* context,
                                                         const grpc::ByteBuffer* request,
                                                         grpc::ByteBuffer* response) {
  // A miss parses a config.json: off gRPC's threads too.
  return ServeRaw<v1::RopeConfig, v1::ResolvedConfig>(
      Rpc::kResolveConfig, context, request, response,
      [this, context](v1::RopeConfig* parsed, v1::ResolvedConfig* reply,
                      int64_t) -> absl::StatusOr<UnaryWork> {
        UnaryWork work;
        work.more_bytes = EstimateResolveConfig(*parsed).more_bytes;
        work.answer = [this, context, parsed, reply] {
          const Interrupt interrupt = InterruptOf(context);
          return AnswerResolveConfig(engine_, *parsed, reply, &interrupt);
        };
        return work;
      });
}

grpc::ServerUnaryReactor* RopeServiceImpl::BuildPositions(grpc::CallbackServerContext* context,
                                                          const grpc::ByteBuffer* request,
                                                          grpc::ByteBuffer* response) {
  // A Qwen form parses a config.json: off gRPC's threads too.
  return ServeRaw<v1::BuildPositionsRequest, v1::BuildPositionsResponse>(
      Rpc::kBuildPositions, context, request, response,
      [this, context](v1::BuildPositionsRequest* parsed, v1::BuildPositionsResponse* reply,
                      int64_t) -> absl::StatusOr<UnaryWork> {
        const ReplyLimit limit(options_.max_message_bytes);
        UnaryWork work;
        work.more_bytes = EstimateBuildPositions(*parsed, limit).more_bytes;
        work.answer = [this, context, parsed, reply, limit] {
          const Interrupt interrupt = InterruptOf(context);
          return AnswerBuildPositions(engine_, *parsed, limit, reply, &interrupt);
        };
        return work;
      });
}

std::string RopeServiceImpl::ClientOf(const grpc::CallbackServerContext& context) const {
  const bool shares = gate_.max_per_client() > 0 || budget_.per_client_bytes() > 0;
  return shares ? CallerIdentity(context, options_.tokens_verified, IdentityUse::kShare)
                : std::string();
}

grpc::ServerUnaryReactor* RopeServiceImpl::GetServerInfo(grpc::CallbackServerContext* context,
                                                         const v1::GetServerInfoRequest* request,
                                                         v1::ServerInfo* response) {
  // Cheap and non-blocking: answered on the gRPC thread, not charged.
  UnaryCallSpec spec;
  spec.rpc = Rpc::kGetServerInfo;
  spec.client = ClientOf(*context);
  spec.run_on = RunOn::kThisThread;
  return rope::ServeUnary(serving_, context, *request, std::move(spec), response, [this, response] {
    FillServerInfo(response);
    return absl::OkStatus();
  });
}

}  // namespace rope
