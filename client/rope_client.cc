#include "client/rope_client.h"

#include <thread>
#include <utility>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/grpc_status.h"
#include "common/status_macros.h"

namespace rope {
namespace client {
namespace {

// Plaintext unless the caller supplied credentials (see ClientOptions).
std::shared_ptr<grpc::ChannelCredentials> CredentialsFor(const ClientOptions& options) {
  if (options.credentials != nullptr) return options.credentials;
  return grpc::InsecureChannelCredentials();
}

}  // namespace

absl::StatusOr<std::unique_ptr<RopeClient>> RopeClient::Create(const std::string& target,
                                                             const ClientOptions& options) {
  if (target.empty()) return absl::InvalidArgumentError("target is empty");
  ROPE_RETURN_IF_ERROR(ValidateClientOptions(options));

  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(options.max_send_message_bytes);
  args.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  args.SetServiceConfigJSON(ServiceConfigJson(options));
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, options.retry_max_attempts > 1 ? 1 : 0);
  // The retry buffer must hold a whole request for it to be replayed on
  // another replica; the default (256 KiB) would disable retries of large
  // tensors.
  args.SetInt(GRPC_ARG_PER_RPC_RETRY_BUFFER_SIZE, options.max_send_message_bytes);
  if (options.own_connections) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (!options.tls_server_name.empty()) args.SetSslTargetNameOverride(options.tls_server_name);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(target, CredentialsFor(options), args);
  return std::make_unique<RopeClient>(std::move(channel), options);
}

RopeClient::RopeClient(std::shared_ptr<grpc::Channel> channel, const ClientOptions& options)
    : channel_(std::move(channel)),
      stub_(v1::RopeService::NewStub(channel_)),
      health_stub_(grpc::health::v1::Health::NewStub(channel_)),
      deadline_(options.deadline) {}

void RopeClient::PrepareContext(grpc::ClientContext* context) const {
  context->set_deadline(absl::ToChronoTime(absl::Now() + deadline_));
}

absl::StatusOr<v1::RotateResponse> RopeClient::Rotate(const v1::RotateRequest& request) {
  grpc::ClientContext context;
  PrepareContext(&context);
  v1::RotateResponse response;
  ROPE_RETURN_IF_ERROR(FromGrpcStatus(stub_->Rotate(&context, request, &response)));
  return response;
}

absl::StatusOr<v1::AttentionScoresResponse> RopeClient::AttentionScores(
    const v1::AttentionScoresRequest& request) {
  grpc::ClientContext context;
  PrepareContext(&context);
  v1::AttentionScoresResponse response;
  ROPE_RETURN_IF_ERROR(FromGrpcStatus(stub_->AttentionScores(&context, request, &response)));
  return response;
}

absl::Status RopeClient::RegisterSharedMemory(const v1::RegisterSharedMemoryRequest& request) {
  grpc::ClientContext context;
  PrepareContext(&context);
  v1::RegisterSharedMemoryResponse response;
  return FromGrpcStatus(stub_->RegisterSharedMemory(&context, request, &response));
}

absl::Status RopeClient::RegisterSharedMemory(const SharedRegion& region) {
  return RegisterSharedMemory(region.RegisterRequest());
}

absl::Status RopeClient::UnregisterSharedMemory(const std::string& name) {
  grpc::ClientContext context;
  PrepareContext(&context);
  v1::UnregisterSharedMemoryRequest request;
  request.set_name(name);
  v1::UnregisterSharedMemoryResponse response;
  return FromGrpcStatus(stub_->UnregisterSharedMemory(&context, request, &response));
}

absl::StatusOr<v1::SharedMemoryStatusResponse> RopeClient::SharedMemoryStatus(
    const std::string& name) {
  grpc::ClientContext context;
  PrepareContext(&context);
  v1::SharedMemoryStatusRequest request;
  request.set_name(name);
  v1::SharedMemoryStatusResponse response;
  ROPE_RETURN_IF_ERROR(FromGrpcStatus(stub_->SharedMemoryStatus(&context, request, &response)));
  return response;
}

absl::StatusOr<v1::GetTableResponse> RopeClient::GetTable(const v1::GetTableRequest& request) {
  grpc::ClientContext context;
  PrepareContext(&context);
  v1::GetTableResponse response;
  ROPE_RETURN_IF_ERROR(FromGrpcStatus(stub_->GetTable(&context, request, &response)));
  return response;
}

absl::StatusOr<v1::ResolvedConfig> RopeClient::ResolveConfig(const v1::RopeConfig& config) {
  grpc::ClientContext context;
  PrepareContext(&context);
  v1::ResolvedConfig response;
  absl::Status status = FromGrpcStatus(stub_->ResolveConfig(&context, config, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::BuildPositionsResponse> RopeClient::BuildPositions(
    const v1::BuildPositionsRequest& request) {
  grpc::ClientContext context;
  PrepareContext(&context);
  v1::BuildPositionsResponse response;
  absl::Status status = FromGrpcStatus(stub_->BuildPositions(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::ServerInfo> RopeClient::GetServerInfo() {
  grpc::ClientContext context;
  PrepareContext(&context);
  v1::ServerInfo response;
  ROPE_RETURN_IF_ERROR(
      FromGrpcStatus(stub_->GetServerInfo(&context, v1::GetServerInfoRequest(), &response)));
  return response;
}

absl::StatusOr<std::vector<v1::RotateResponse>> RopeClient::RotateStream(
    const std::vector<v1::RotateRequest>& requests) {
  grpc::ClientContext context;
  PrepareContext(&context);
  std::unique_ptr<grpc::ClientReaderWriter<v1::RotateRequest, v1::RotateResponse>> stream =
      stub_->RotateStream(&context);
  // Write on a second thread while this one reads: writing every request
  // before reading could fill both directions' flow-control windows and
  // stall. gRPC allows one concurrent writer and one reader on a stream.
  std::thread writer([&stream, &requests] {
    for (const v1::RotateRequest& request : requests) {
      if (!stream->Write(request)) break;  // the stream ended: Finish() says why
    }
    stream->WritesDone();
  });
  std::vector<v1::RotateResponse> responses;
  responses.reserve(requests.size());
  v1::RotateResponse response;
  while (stream->Read(&response)) responses.push_back(std::move(response));
  writer.join();
  ROPE_RETURN_IF_ERROR(FromGrpcStatus(stream->Finish()));
  if (responses.size() != requests.size()) {
    return absl::InternalError(absl::StrCat("RotateStream: the server sent ", responses.size(),
                                            " replies for ", requests.size(), " requests"));
  }
  return responses;
}

absl::StatusOr<RopeClient::ServingStatus> RopeClient::Health(const std::string& service) {
  grpc::ClientContext context;
  PrepareContext(&context);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  ROPE_RETURN_IF_ERROR(FromGrpcStatus(health_stub_->Check(&context, request, &response)));
  return response.status();
}

std::string ServingStatusName(RopeClient::ServingStatus status) {
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(status);
}

}  // namespace client
}  // namespace rope
