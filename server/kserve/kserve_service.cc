#include "server/kserve/kserve_service.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/engine/interrupt.h"
#include "server/kserve/kserve_describe.h"
#include "server/kserve/kserve_reply_wire.h"
#include "server/service/admitted_stream.h"
#include "server/service/call_admission.h"
#include "server/service/caller_identity.h"
#include "server/service/status_conversion.h"
#include "server/service/unary_call.h"

#ifndef ROPE_VERSION
#error "ROPE_VERSION must be defined by the build (the project version)"
#endif

namespace rope {
namespace kserve {
// One ModelStreamInfer call (admitted_stream.h: each message admitted and
// parsed like a ModelInfer, an idle stream holding nothing). A message that
// fails (an unknown model, a bad request, the byte budget, the engine; a
// refusal before its parse names no model or id) gets a response
// with its error_message and the stream goes on, as in Triton; a refusal by
// the gate (a full server, a drain) or a cancelled call ends the stream with
// its status.
class KServeServiceImpl::StreamReactor final
    : public AdmittedStream<inference::ModelInferRequest, inference::ModelStreamInferResponse> {
 public:
  StreamReactor(KServeServiceImpl& service, grpc::CallbackServerContext* context)
      : AdmittedStream(service.serving_.admission, service.work_, Rpc::kModelStreamInfer, context,
                       service.ClientOf(*context)),
        service_(service) {
    StartReading();
  }

 private:
  absl::StatusOr<int64_t> Prepare() override {
    absl::StatusOr<const Model*> model =
        service_.models_.Find(request_.model_name(), request_.model_version());
    if (!model.ok()) return model.status();
    model_ = *model;
    absl::StatusOr<InferPlan> plan =
        PlanModelInfer(*model_, &request_, service_.engine_.limits().max_elements_per_request);
    if (!plan.ok()) return plan.status();
    plan_ = *std::move(plan);
    input_time_ = absl::Now() - admission().start();
    return PlanEstimate(plan_).more_bytes;
  }

  absl::Status Answer() override {
    const absl::Time run_start = absl::Now();
    const Interrupt interrupt = InterruptOf(context());
    CallContext call = CallContextOf(service_.options_, context());
    call.interrupt = &interrupt;
    InferTimings timings;
    absl::Status status = RunModelInfer(service_.engine_, call, &plan_, reply_.reply(), &timings);
    if (!status.ok()) return status;  // counted as a failure by MessageFailed
    InferenceRecord record;
    record.ok = true;
    record.total = absl::Now() - admission().start();
    record.queue = run_start - admission().start() - input_time_;
    record.input = input_time_;
    record.infer = timings.infer;
    record.output = timings.output;
    service_.statistics_.Record(*model_, record);
    return absl::OkStatus();
  }

  // Tells the error in band: a response with its error_message.
  void MessageFailed(const absl::Status& status) override {
    if (model_ != nullptr) {
      InferenceRecord record;
      record.total = absl::Now() - admission().start();
      service_.statistics_.Record(*model_, record);
    }
    grpc::Status grpc_status = ToGrpcStatus(status);
    response_.Clear();
    response_.set_error_message(grpc_status.error_message());
    inference::ModelInferResponse* infer = response_.mutable_infer_response();
    infer->set_model_name(request_.model_name());
    infer->set_model_version(request_.model_version());
    infer->set_id(request_.id());
    Reply(grpc_status.error_code());
  }

  // An answered message's reply: written by reply_ (the one ModelInfer
  // writes, as a ModelStreamInferResponse's infer_response).
  ReplyWriter* AnsweredReply() override { return &reply_; }

  void ClearMessage() override {
    plan_ = InferPlan();
    *reply_.reply() = InferReply();
    model_ = nullptr;
  }

  KServeServiceImpl& service_;
  InferPlan plan_;
  InferReplyWriter reply_{InferReplyWriter::Form::kModelStreamInferResponse};
  const Model* model_ = nullptr;
  absl::Duration input_time_;
};

KServeServiceImpl::KServeServiceImpl(Engine& engine, CallGate& gate, ByteBudget& budget,
                                     ServiceMetrics& metrics, WorkQueue& work,
                                     const ModelRepository& models, ServiceOptions options)
    : engine_(engine),
      gate_(gate),
      metrics_(metrics),
      work_(work),
      models_(models),
      options_(std::move(options)),
      serving_{
          AdmissionParts{&gate, &budget, &metrics, options_.send_watch, options_.streams},
          &work, options_.max_message_bytes},
      statistics_(models.models().size()) {}

bool KServeServiceImpl::Ready() const {
  return !gate_.draining() && engine_.backend_info().fault.empty();
}

std::string KServeServiceImpl::ClientOf(const grpc::CallbackServerContext& context) const {
  const bool shares = gate_.max_per_client() > 0 ||
                      serving_.admission.budget->per_client_bytes() > 0;
  return shares ? CallerIdentity(context, options_.tokens_verified, IdentityUse::kShare)
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
  UnaryCallSpec spec;
  spec.rpc = rpc;
  spec.client = ClientOf(*context);
  spec.run_on = RunOn::kThisThread;
  return ServeUnary(serving_, context, request, std::move(spec), response, std::move(answer));
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
                                                        const grpc::ByteBuffer* request,
                                                        grpc::ByteBuffer* response) {
  RawUnarySpec spec;
  spec.rpc = Rpc::kModelInfer;
  spec.client = ClientOf(*context);
  return ServeRawUnary<inference::ModelInferRequest, inference::ModelInferResponse>(
      serving_, context, request, response, std::move(spec),
      [this, context](inference::ModelInferRequest* parsed, inference::ModelInferResponse*,
                      int64_t request_bytes) -> absl::StatusOr<UnaryWork> {
        const absl::Time start = absl::Now();
        absl::StatusOr<const Model*> model =
            models_.Find(parsed->model_name(), parsed->model_version());
        if (!model.ok()) return model.status();
        // The request is this call's own: its bytes are moved into the
        // rope.v1 request, and from its reply into the reply's writer.
        absl::StatusOr<InferPlan> planned =
            PlanModelInfer(**model, parsed, engine_.limits().max_elements_per_request);
        if (!planned.ok()) {
          InferenceRecord record;
          record.total = absl::Now() - start;
          statistics_.Record(**model, record);
          return planned.status();
        }
        auto plan = std::make_shared<InferPlan>(*std::move(planned));
        const absl::Duration input_time = absl::Now() - start;
        // Admitted as the rope.v1 call it stands for: the same estimate, the
        // same rule for running on this thread.
        const CallEstimate estimate = PlanEstimate(*plan);
        UnaryWork work;
        // The reply's wire bytes are written from what the answer leaves
        // here (kserve_reply_wire.h), not from `reply`.
        auto writer =
            std::make_unique<InferReplyWriter>(InferReplyWriter::Form::kModelInferResponse);
        InferReply* results = writer->reply();
        work.reply = std::move(writer);
        work.more_bytes = estimate.more_bytes;
        work.run_on = AnswersInline(options_, engine_, estimate, request_bytes) ? RunOn::kThisThread
                                                                                : RunOn::kWorkQueue;
        work.not_run = [this, plan, start] {
          InferenceRecord record;
          record.total = absl::Now() - start;
          statistics_.Record(*plan->model, record);
        };
        work.answer = [this, context, results, plan, start, input_time] {
          const absl::Time run_start = absl::Now();
          const Interrupt interrupt = InterruptOf(context);
          CallContext call_context = CallContextOf(options_, context);
          call_context.interrupt = &interrupt;
          InferTimings timings;
          const absl::Status status =
              RunModelInfer(engine_, call_context, plan.get(), results, &timings);
          InferenceRecord record;
          record.ok = status.ok();
          record.total = absl::Now() - start;
          record.queue = run_start - start - input_time;
          record.input = input_time;
          record.infer = timings.infer;
          record.output = timings.output;
          statistics_.Record(*plan->model, record);
          return status;
        };
        return work;
      });
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* KServeServiceImpl::ModelStreamInfer(
    grpc::CallbackServerContext* context) {
  return new StreamReactor(*this, context);
}

}  // namespace kserve
}  // namespace rope
