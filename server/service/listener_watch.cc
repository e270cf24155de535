#include "server/service/listener_watch.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace rope {
namespace {

// /proc/net/tcp's state column (include/net/tcp_states.h).
constexpr absl::string_view kEstablished = "01";
constexpr absl::string_view kCloseWait = "08";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::vector<std::string> UnacceptedConnections(absl::string_view proc_net_tcp, int port) {
  // "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"
  std::vector<std::string> out;
  const std::string port_suffix = absl::StrFormat(":%04X", port);
  for (absl::string_view line : absl::StrSplit(proc_net_tcp, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (fields.size() < 10 || !absl::EndsWith(fields[0], ":")) continue;  // the header
    const absl::string_view local = fields[1];
    const absl::string_view state = fields[3];
    if (!absl::EndsWith(local, port_suffix)) continue;
    if (state != kEstablished && state != kCloseWait) continue;
    if (fields[9] != "0") continue;
    out.push_back(absl::StrCat(local, "->", fields[2]));
  }
  return out;
}

ListenerWatch::ListenerWatch(Options options, std::function<void(const std::string&)> on_stuck)
    : options_(std::move(options)), on_stuck_(std::move(on_stuck)) {
  thread_ = std::thread([this] { Run(); });
}

ListenerWatch::~ListenerWatch() {
  stop_.Notify();
  thread_.join();
}

void ListenerWatch::Run() {
  // When each connection now waiting was first seen waiting.
  absl::flat_hash_map<std::string, absl::Time> first_seen;
  while (!stop_.WaitForNotificationWithTimeout(options_.interval)) {
    const absl::Time now = absl::Now();
    absl::flat_hash_map<std::string, absl::Time> waiting;
    for (const char* file : {"tcp", "tcp6"}) {
      const std::string text = ReadFile(absl::StrCat(options_.proc_net_dir, "/", file));
      for (std::string& connection : UnacceptedConnections(text, options_.port)) {
        auto it = first_seen.find(connection);
        waiting.emplace(std::move(connection), it == first_seen.end() ? now : it->second);
      }
    }
    first_seen = std::move(waiting);
    absl::Duration oldest = absl::ZeroDuration();
    for (const auto& [connection, since] : first_seen) oldest = std::max(oldest, now - since);
    if (oldest >= options_.stuck_after) {
      on_stuck_(absl::StrCat("the listener on port ", options_.port, " has stopped accepting: ",
                             first_seen.size(), " connection(s) waiting, the oldest for ",
                             absl::FormatDuration(absl::Trunc(oldest, absl::Seconds(1))),
                             " (accept failed for good, e.g. EMFILE: more connections than "
                             "RLIMIT_NOFILE)"));
      return;
    }
  }
}

}  // namespace rope
