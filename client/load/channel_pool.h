// ChannelPool: `connections` RopeClients to one target, each with its own
// HTTP/2 connection(s) (ClientOptions.own_connections), and a generic stub
// over each channel for the load's byte-level calls.
//
// Thread-safe after Create: stubs and clients may be used concurrently.
#ifndef ROPE_CLIENT_LOAD_CHANNEL_POOL_H_
#define ROPE_CLIENT_LOAD_CHANNEL_POOL_H_

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/generic/generic_stub.h>

#include "absl/status/statusor.h"
#include "client/client_options.h"
#include "client/rope_client.h"

namespace rope {
namespace load {

class ChannelPool {
 public:
  // Creates the channels; does not contact the server. INVALID_ARGUMENT for
  // an empty target, connections < 1 or bad options.
  static absl::StatusOr<std::unique_ptr<ChannelPool>> Create(const std::string& target,
                                                            client::ClientOptions options,
                                                            int connections);

  int size() const { return static_cast<int>(clients_.size()); }
  // The stub and client of lane `lane` (lane % size()).
  grpc::GenericStub& stub(int lane) const { return *stubs_[lane % stubs_.size()]; }
  client::RopeClient& client(int lane) const { return *clients_[lane % clients_.size()]; }

  // Connects every channel by calling GetServerInfo on each (so that no
  // measured call pays for a connection set-up) and returns the first
  // channel's answer; the first failure otherwise.
  absl::StatusOr<v1::ServerInfo> Connect() const;

  // Keeps `pool` (its channels) alive until the process exits, never
  // destroying it. gRPC 1.51 (Debian 12) runs the callback API's reactions
  // on a shared, reference-counted completion queue polled by its own
  // threads when the poller cannot run callbacks in the background; the
  // last channel's release shuts that queue down, and one of its threads
  // then freed the queue twice (AddressSanitizer, bounded_shutdown_test:
  // about 1 run in 25 of ropeload under ASan, and an occasional ropeload
  // that never exited). Without a release there is no such shutdown.
  static void KeepUntilExit(std::unique_ptr<ChannelPool> pool);

 private:
  ChannelPool() = default;
  std::vector<std::unique_ptr<client::RopeClient>> clients_;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs_;
};

}  // namespace load
}  // namespace rope

#endif  // ROPE_CLIENT_LOAD_CHANNEL_POOL_H_
