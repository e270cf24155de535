#include "server/kserve/kserve_service.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/engine/interrupt.h"
#include "server/kserve/kserve_describe.h"
#include "server/service/caller_identity.h"
#include "server/service/status_conversion.h"
#include "server/service/unary_call.h"

#ifndef ROPE_VERSION
#error "ROPE_VERSION must be defined by the build (the project version)"
#endif

namespace rope {
namespace kserve {
namespace {

absl::Status CancelledBeforeRun(Rpc rpc) {
  return absl::CancelledError(
      absl::StrCat(RpcName(rpc), " was cancelled (or its deadline passed) before it ran"));
}

}  // namespace

// One ModelStreamInfer call: strictly one message at a time (read, plan,
// run on the work queue, write, read the next), so responses come in
// request order. Holds one gate slot for the whole stream and each
// message's bytes in the byte budget until its response is written. A
// message that fails gets a response with its error_message and the stream
// goes on, as in Triton; a refusal by the gate or a drain ends the stream
// with its status. Deletes itself in OnDone.
class KServeServiceImpl::StreamReactor final
    : public grpc::ServerBidiReactor<inference::ModelInferRequest,
                                     inference::ModelStreamInferResponse> {
 public:
  StreamReactor(KServeServiceImpl& service, grpc::CallbackServerContext* context)
      : service_(service), context_(context) {
    client_ = service_.ClientOf(*context);
    absl::Status admitted = service_.gate_.TryEnter(client_);
    if (!admitted.ok()) {
      message_start_ = absl::Now();
      FinishStream(admitted);
      return;
    }
    admitted_ = true;
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client half-closed (or the call is gone)
      Finish(grpc::Status::OK);
      return;
    }
    message_start_ = absl::Now();
    if (service_.gate_.draining()) {
      FinishStream(DrainingError());
      return;
    }
    bytes_in_ = static_cast<int64_t>(request_.ByteSizeLong());
    absl::StatusOr<const Model*> model =
        service_.models_.Find(request_.model_name(), request_.model_version());
    if (!model.ok()) {
      Respond(model.status());
      return;
    }
    model_ = *model;
    absl::StatusOr<InferPlan> plan =
        PlanModelInfer(*model_, &request_, service_.engine_.limits().max_elements_per_request);
    if (!plan.ok()) {
      Respond(plan.status());
      return;
    }
    plan_ = *std::move(plan);
    input_time_ = absl::Now() - message_start_;
    const int64_t more_bytes = PlanEstimate(plan_).more_bytes;
    const std::string rpc_name(RpcName(Rpc::kModelStreamInfer));
    service_.budget_.Reserve(rpc_name, bytes_in_, more_bytes,
                             absl::FromChrono(context_->deadline()),
                             [this, more_bytes](absl::Status granted) {
                               if (!granted.ok()) {
                                 Respond(granted);
                                 return;
                               }
                               bytes_charged_ = bytes_in_ + more_bytes;
                               service_.work_.Schedule([this] { RunCurrent(); }, client_);
                             });
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                          "ModelStreamInfer: a response could not be sent (the client has gone)"));
      return;
    }
    ReleaseBytes();
    request_.Clear();
    response_.Clear();
    plan_ = InferPlan();
    model_ = nullptr;
    StartRead(&request_);
  }

  void OnDone() override {
    if (admitted_) service_.gate_.Leave(client_);
    ReleaseBytes();
    delete this;
  }

 private:
  void ReleaseBytes() {
    if (bytes_charged_ == 0) return;
    service_.budget_.Release(bytes_charged_);
    bytes_charged_ = 0;
  }

  void RunCurrent() {
    const absl::Time run_start = absl::Now();
    if (context_->IsCancelled()) {
      FinishStream(CancelledBeforeRun(Rpc::kModelStreamInfer));
      return;
    }
    const Interrupt interrupt([this] { return context_->IsCancelled(); },
                              absl::FromChrono(context_->deadline()));
    CallContext call = CallContextOf(service_.options_, context_);
    call.interrupt = &interrupt;
    InferTimings timings;
    absl::Status status = RunModelInfer(service_.engine_, call, &plan_,
                                        response_.mutable_infer_response(), &timings);
    InferenceRecord record;
    record.ok = status.ok();
    record.total = absl::Now() - message_start_;
    record.queue = run_start - message_start_ - input_time_;
    record.input = input_time_;
    record.infer = timings.infer;
    record.output = timings.output;
    service_.statistics_.Record(*model_, record);
    Respond(status);
  }

  // Writes the message in hand's response: its results, or its error.
  void Respond(const absl::Status& status) {
    if (model_ != nullptr && !status.ok()) {
      InferenceRecord record;
      record.total = absl::Now() - message_start_;
      service_.statistics_.Record(*model_, record);
    }
    grpc::Status grpc_status = ToGrpcStatus(status);
    if (!status.ok()) {
      response_.Clear();
      response_.set_error_message(grpc_status.error_message());
      inference::ModelInferResponse* infer = response_.mutable_infer_response();
      infer->set_model_name(request_.model_name());
      infer->set_model_version(request_.model_version());
      infer->set_id(request_.id());
    }
    service_.metrics_.RecordRequest(
        Rpc::kModelStreamInfer, grpc_status.error_code(), absl::Now() - message_start_, bytes_in_,
        status.ok() ? static_cast<int64_t>(response_.ByteSizeLong()) : 0);
    StartWrite(&response_);
  }

  // Ends the stream with `status` (gate refusal, drain, cancellation).
  void FinishStream(const absl::Status& status) {
    grpc::Status grpc_status = ToGrpcStatus(status);
    service_.metrics_.RecordRequest(Rpc::kModelStreamInfer, grpc_status.error_code(),
                                    absl::Now() - message_start_, bytes_in_, 0);
    Finish(std::move(grpc_status));
  }

  KServeServiceImpl& service_;
  grpc::CallbackServerContext* const context_;
  inference::ModelInferRequest request_;
  inference::ModelStreamInferResponse response_;
  InferPlan plan_;
  const Model* model_ = nullptr;
  absl::Time message_start_;
  absl::Duration input_time_;
  int64_t bytes_in_ = 0;
  int64_t bytes_charged_ = 0;
  bool admitted_ = false;
  std::string client_;
};

KServeServiceImpl::KServeServiceImpl(Engine& engine, CallGate& gate, ByteBudget& budget,
                                     ServiceMetrics& metrics, WorkQueue& work,
                                     const ModelRepository& models, ServiceOptions options)
    : engine_(engine),
      gate_(gate),
      budget_(budget),
      metrics_(metrics),
      work_(work),
      models_(models),
      options_(std::move(options)),
      statistics_(models.models().size()) {
  SetMessageAllocatorFor_ModelInfer(&infer_allocator_);
}

bool KServeServiceImpl::Ready() const {
  return !gate_.draining() && engine_.backend_info().fault.empty();
}

std::string KServeServiceImpl::ClientOf(const grpc::CallbackServerContext& context) const {
  return gate_.max_per_client() > 0
             ? CallerIdentity(context, options_.tokens_verified, IdentityUse::kShare)
             : std::string();
}

std::string KServeServiceImpl::OwnerOf(const grpc::CallbackServerContext& context) const {
  return CallerIdentity(context, options_.tokens_verified, IdentityUse::kOwnership);
}

grpc::ServerUnaryReactor* KServeServiceImpl::AnswerProbe(Rpc rpc,
                                                         grpc::CallbackServerContext* context,
                                                         const google::protobuf::Message& request,
                                                         google::protobuf::Message* response,
                                                         const absl::Status& status) {
  (void)context;
  const absl::Time start = absl::Now();
  grpc::Status grpc_status = ToGrpcStatus(status);
  metrics_.RecordRequest(rpc, grpc_status.error_code(), absl::Now() - start,
                         static_cast<int64_t>(request.ByteSizeLong()),
                         status.ok() ? static_cast<int64_t>(response->ByteSizeLong()) : 0);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(std::move(grpc_status));
  return reactor;
}

template <typename Answer>
grpc::ServerUnaryReactor* KServeServiceImpl::AnswerAdmitted(
    Rpc rpc, grpc::CallbackServerContext* context, const google::protobuf::Message& request,
    google::protobuf::Message* response, Answer answer) {
  auto* call = new UnaryCall(rpc, gate_, metrics_, options_.max_message_bytes);
  if (!call->Admit(request, ClientOf(*context))) return call;
  call->FinishWith(answer(), response);
  return call;
}

grpc::ServerUnaryReactor* KServeServiceImpl::ServerLive(grpc::CallbackServerContext* context,
                                                        const inference::ServerLiveRequest* request,
                                                        inference::ServerLiveResponse* response) {
  response->set_live(true);
  return AnswerProbe(Rpc::kServerLive, context, *request, response, absl::OkStatus());
}

grpc::ServerUnaryReactor* KServeServiceImpl::ServerReady(
    grpc::CallbackServerContext* context, const inference::ServerReadyRequest* request,
    inference::ServerReadyResponse* response) {
  response->set_ready(Ready());
  return AnswerProbe(Rpc::kServerReady, context, *request, response, absl::OkStatus());
}

grpc::ServerUnaryReactor* KServeServiceImpl::ModelReady(grpc::CallbackServerContext* context,
                                                        const inference::ModelReadyRequest* request,
                                                        inference::ModelReadyResponse* response) {
  // A probe, as in Triton: a model (or version) that does not exist is not
  // ready, which is no error.
  const bool known = models_.Find(request->name(), request->version()).ok();
  response->set_ready(known && Ready());
  return AnswerProbe(Rpc::kModelReady, context, *request, response, absl::OkStatus());
}

grpc::ServerUnaryReactor* KServeServiceImpl::ServerMetadata(
    grpc::CallbackServerContext* context, const inference::ServerMetadataRequest* request,
    inference::ServerMetadataResponse* response) {
  return AnswerAdmitted(Rpc::kServerMetadata, context, *request, response, [response] {
    response->set_name(kPlatform);
    response->set_version(ROPE_VERSION);
    for (const char* extension :
         {"model_configuration", "statistics", "system_shared_memory", "cuda_shared_memory"}) {
      response->add_extensions(extension);
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* KServeServiceImpl::ModelMetadata(
    grpc::CallbackServerContext* context, const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  return AnswerAdmitted(Rpc::kModelMetadata, context, *request, response,
                        [this, request, response]() -> absl::Status {
                          absl::StatusOr<const Model*> model =
                              models_.Find(request->name(), request->version());
                          if (!model.ok()) return model.status();
                          DescribeModel(**model, response);
                          return absl::OkStatus();
                        });
}

grpc::ServerUnaryReactor* KServeServiceImpl::ModelConfig(
    grpc::CallbackServerContext* context, const inference::ModelConfigRequest* request,
    inference::ModelConfigResponse* response) {
  return AnswerAdmitted(
      Rpc::kModelConfig, context, *request, response, [this, request, response]() -> absl::Status {
        absl::StatusOr<const Model*> model = models_.Find(request->name(), request->version());
        if (!model.ok()) return model.status();
        const bool gpu = engine_.backend_info().name == "cuda";
        ConfigureModel(**model,
                       gpu ? ::inference::ModelInstanceGroup::KIND_GPU
                           : ::inference::ModelInstanceGroup::KIND_CPU,
                       response->mutable_config());
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* KServeServiceImpl::ModelStatistics(
    grpc::CallbackServerContext* context, const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  return AnswerAdmitted(Rpc::kModelStatistics, context, *request, response,
                        [this, request, response]() -> absl::Status {
                          if (request->name().empty()) {
                            for (const Model& model : models_.models()) {
                              statistics_.Fill(model, response->add_model_stats());
                            }
                            return absl::OkStatus();
                          }
                          absl::StatusOr<const Model*> model =
                              models_.Find(request->name(), request->version());
                          if (!model.ok()) return model.status();
                          statistics_.Fill(**model, response->add_model_stats());
                          return absl::OkStatus();
                        });
}

grpc::ServerUnaryReactor* KServeServiceImpl::RepositoryIndex(
    grpc::CallbackServerContext* context, const inference::RepositoryIndexRequest* request,
    inference::RepositoryIndexResponse* response) {
  return AnswerAdmitted(Rpc::kRepositoryIndex, context, *request, response,
                        [this, request, response] {
                          const bool ready = Ready();
                          if (request->ready() && !ready) return absl::OkStatus();
                          for (const Model& model : models_.models()) {
                            auto* entry = response->add_models();
                            entry->set_name(model.name);
                            entry->set_version(kModelVersion);
                            entry->set_state(ready ? "READY" : "UNAVAILABLE");
                            if (!ready) entry->set_reason("the server is draining");
                          }
                          return absl::OkStatus();
                        });
}

grpc::ServerUnaryReactor* KServeServiceImpl::ModelInfer(grpc::CallbackServerContext* context,
                                                        const inference::ModelInferRequest* request,
                                                        inference::ModelInferResponse* response) {
  auto* call = new UnaryCall(Rpc::kModelInfer, gate_, metrics_, options_.max_message_bytes);
  std::string client = ClientOf(*context);
  if (!call->Admit(*request, client)) return call;
  const absl::Time start = absl::Now();
  // Admit measured the request: its size is cached now.
  const int64_t request_bytes = request->GetCachedSize();
  absl::StatusOr<const Model*> model =
      models_.Find(request->model_name(), request->model_version());
  if (!model.ok()) {
    call->FinishWith(model.status(), nullptr);
    return call;
  }
  // The same object as `request`, owned by this call through the allocator
  // installed in the constructor: its bytes are moved into the rope.v1
  // request, and from its reply into `response`.
  inference::ModelInferRequest* owned =
      MutableRequest<inference::ModelInferRequest, inference::ModelInferResponse>(context);
  if (owned == nullptr) {
    call->FinishWith(
        absl::InternalError("ModelInfer: the owning message allocator is not installed"), nullptr);
    return call;
  }
  absl::StatusOr<InferPlan> planned =
      PlanModelInfer(**model, owned, engine_.limits().max_elements_per_request);
  if (!planned.ok()) {
    InferenceRecord record;
    record.total = absl::Now() - start;
    statistics_.Record(**model, record);
    call->FinishWith(planned.status(), nullptr);
    return call;
  }
  auto plan = std::make_shared<InferPlan>(*std::move(planned));
  const absl::Duration input_time = absl::Now() - start;
  // Admitted as the rope.v1 call it stands for: the same estimate, the same
  // rule for running on this thread.
  const CallEstimate estimate = PlanEstimate(*plan);
  const bool inline_run = AnswersInline(options_, engine_, estimate, request_bytes);
  call->ReserveBytes(
      budget_, estimate.more_bytes, absl::FromChrono(context->deadline()),
      [this, call, context, response, plan, start, input_time, inline_run,
       client = std::move(client)]() mutable {
        auto run = [this, call, context, response, plan, start, input_time]() mutable {
          const absl::Time run_start = absl::Now();
          InferenceRecord record;
          if (context->IsCancelled()) {
            record.total = run_start - start;
            statistics_.Record(*plan->model, record);
            call->FinishWith(CancelledBeforeRun(Rpc::kModelInfer), nullptr);
            return;
          }
          const Interrupt interrupt([context] { return context->IsCancelled(); },
                                    absl::FromChrono(context->deadline()));
          CallContext call_context = CallContextOf(options_, context);
          call_context.interrupt = &interrupt;
          InferTimings timings;
          const absl::Status status =
              RunModelInfer(engine_, call_context, plan.get(), response, &timings);
          record.ok = status.ok();
          record.total = absl::Now() - start;
          record.queue = run_start - start - input_time;
          record.input = input_time;
          record.infer = timings.infer;
          record.output = timings.output;
          statistics_.Record(*plan->model, record);
          call->FinishWith(status, response);
        };
        if (inline_run) {
          run();
        } else {
          work_.Schedule(std::move(run), client);
        }
      });
  return call;
}

grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
KServeServiceImpl::ModelStreamInfer(grpc::CallbackServerContext* context) {
  return new StreamReactor(*this, context);
}

}  // namespace kserve
}  // namespace rope
