#include "client/load/channel_pool.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"

namespace rope {
namespace load {

absl::StatusOr<std::unique_ptr<ChannelPool>> ChannelPool::Create(const std::string& target,
                                                                client::ClientOptions options,
                                                                int connections) {
  if (connections < 1) {
    return absl::InvalidArgumentError(absl::StrCat("connections is ", connections,
                                                   ": must be >= 1"));
  }
  options.own_connections = true;
  std::unique_ptr<ChannelPool> pool(new ChannelPool());
  for (int i = 0; i < connections; ++i) {
    ROPE_ASSIGN_OR_RETURN(std::unique_ptr<client::RopeClient> c,
                          client::RopeClient::Create(target, options));
    pool->stubs_.push_back(std::make_unique<grpc::GenericStub>(c->channel()));
    pool->clients_.push_back(std::move(c));
  }
  return pool;
}

absl::StatusOr<v1::ServerInfo> ChannelPool::Connect() const {
  v1::ServerInfo first;
  for (size_t i = 0; i < clients_.size(); ++i) {
    absl::StatusOr<v1::ServerInfo> info = clients_[i]->GetServerInfo();
    if (!info.ok()) {
      return absl::Status(info.status().code(),
                          absl::StrCat("connection ", i, ": GetServerInfo: ",
                                       info.status().message()));
    }
    if (i == 0) first = *std::move(info);
  }
  return first;
}

void ChannelPool::KeepUntilExit(std::unique_ptr<ChannelPool> pool) {
  // Never destroyed (not even by exit's static destructors, which would
  // release the channels then); reachable, so LeakSanitizer does not count it.
  static auto* const kept = new std::vector<std::unique_ptr<ChannelPool>>;
  static absl::Mutex mu(absl::kConstInit);
  absl::MutexLock lock(&mu);
  kept->push_back(std::move(pool));
}

}  // namespace load
}  // namespace rope
