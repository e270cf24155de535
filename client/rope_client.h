// RopeClient: a typed client of rope.v1.RopeService and grpc.health.v1.
//
//   ROPE_ASSIGN_OR_RETURN(std::unique_ptr<RopeClient> client,
//                         RopeClient::Create("dns:///ropeserve:50051", {}));
//   ROPE_ASSIGN_OR_RETURN(v1::RotateResponse reply, client->Rotate(request));
//
// Every method returns the server's status as an absl::Status with the same
// code and message (INVALID_ARGUMENT, OUT_OF_RANGE, ... as documented in
// rope.proto); DEADLINE_EXCEEDED when options.deadline passes; UNAVAILABLE
// when no server answers after the retries of ClientOptions.
//
// Thread-safe: one RopeClient (one channel) may serve any number of
// concurrent calls, and should be shared rather than recreated per call.
#ifndef ROPE_CLIENT_ROPE_CLIENT_H_
#define ROPE_CLIENT_ROPE_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/channel.h>

#include "absl/status/statusor.h"
#include "client/client_options.h"
#include "client/shared_region.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "rope/v1/rope.grpc.pb.h"

namespace rope {
namespace client {

class RopeClient {
 public:
  using ServingStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

  // Creates a channel to `target` (any gRPC target: "host:port",
  // "ipv4:a:p1,b:p2", "dns:///host:port", "unix:path"). Does not contact the
  // server: the channel connects on the first call. INVALID_ARGUMENT for an
  // empty target or bad options.
  static absl::StatusOr<std::unique_ptr<RopeClient>> Create(const std::string& target,
                                                           const ClientOptions& options);

  // A client over an existing channel (tests: an in-process channel). Only
  // options.deadline is used; the channel's own settings stay as they are.
  RopeClient(std::shared_ptr<grpc::Channel> channel, const ClientOptions& options);

  RopeClient(const RopeClient&) = delete;
  RopeClient& operator=(const RopeClient&) = delete;

  absl::StatusOr<v1::RotateResponse> Rotate(const v1::RotateRequest& request);
  absl::StatusOr<v1::AttentionScoresResponse> AttentionScores(
      const v1::AttentionScoresRequest& request);
  absl::StatusOr<v1::GetTableResponse> GetTable(const v1::GetTableRequest& request);
  // What `config` resolves to on the server: with hf_config_json, the
  // explicit config a model's config.json becomes (and its inverse
  // frequencies, attention factor and table-cache key).
  absl::StatusOr<v1::ResolvedConfig> ResolveConfig(const v1::RopeConfig& config);
  // Positions the server builds: Qwen2-VL-family M-RoPE positions from a
  // token sequence and its grids, or axial positions from grids.
  absl::StatusOr<v1::BuildPositionsResponse> BuildPositions(
      const v1::BuildPositionsRequest& request);
  absl::StatusOr<v1::ServerInfo> GetServerInfo();

  // Shared memory (same host only): see SharedRegion and rope.proto.
  absl::Status RegisterSharedMemory(const v1::RegisterSharedMemoryRequest& request);
  absl::Status RegisterSharedMemory(const SharedRegion& region);
  absl::Status UnregisterSharedMemory(const std::string& name);  // "": all of this client's
  absl::StatusOr<v1::SharedMemoryStatusResponse> SharedMemoryStatus(const std::string& name = "");

  // Sends every request on one RotateStream call and returns the replies in
  // order (one per request). The deadline covers the whole stream. On error
  // returns that status (the server ends the stream at the first bad
  // request); INTERNAL if the server ends the stream early with OK.
  absl::StatusOr<std::vector<v1::RotateResponse>> RotateStream(
      const std::vector<v1::RotateRequest>& requests);

  // grpc.health.v1.Health/Check for `service` ("" = the whole server).
  // Returns the reported status (SERVING, NOT_SERVING, ...); a server that
  // does not know `service` gives NOT_FOUND. The channel itself watches the
  // whole server's health (client-side health checking), so a server that
  // is NOT_SERVING is out of the rotation and the call gets UNAVAILABLE
  // ("backend unhealthy") instead.
  absl::StatusOr<ServingStatus> Health(const std::string& service = "");

  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

 private:
  void PrepareContext(grpc::ClientContext* context) const;

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::RopeService::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_stub_;
  absl::Duration deadline_;
};

// "SERVING", "NOT_SERVING", "UNKNOWN", "SERVICE_UNKNOWN".
std::string ServingStatusName(RopeClient::ServingStatus status);

}  // namespace client
}  // namespace rope

#endif  // ROPE_CLIENT_ROPE_CLIENT_H_
