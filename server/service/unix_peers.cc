#include "server/service/unix_peers.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"

namespace rope {
namespace {

struct PeerTable {
  absl::Mutex mu;
  // Bounded by the process's descriptor numbers.
  absl::flat_hash_map<int, uint32_t> uid_by_fd ABSL_GUARDED_BY(mu);
};

PeerTable& Table() {
  static PeerTable* const table = new PeerTable();  // never destroyed: used until exit
  return *table;
}

}  // namespace

void NoteUnixPeer(int fd, uint32_t uid) {
  PeerTable& table = Table();
  absl::MutexLock lock(&table.mu);
  table.uid_by_fd[fd] = uid;
}

std::optional<uint32_t> UnixPeerUid(absl::string_view peer) {
  if (!absl::ConsumePrefix(&peer, "fd:")) return std::nullopt;
  int fd = -1;
  if (!absl::SimpleAtoi(peer, &fd)) return std::nullopt;
  PeerTable& table = Table();
  absl::MutexLock lock(&table.mu);
  auto it = table.uid_by_fd.find(fd);
  if (it == table.uid_by_fd.end()) return std::nullopt;
  return it->second;
}

}  // namespace rope
