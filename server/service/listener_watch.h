// ListenerWatch: notices a TCP listener that has stopped accepting
// connections, so that the server can say so and be restarted instead of
// staying healthy by its own account and unreachable.
//
// gRPC 1.51's POSIX listener stops for good when accept4() fails with
// anything but EAGAIN/EINTR, EMFILE included (CVE-2023-4785 class): once more
// connections than RLIMIT_NOFILE have arrived at once, no later connection
// is ever accepted, while calls on connections already open still succeed
// and health still says SERVING. The kernel keeps completing handshakes into
// the listen queue, and a connection there that nobody accepted has no
// socket file: /proc/net/tcp lists it ESTABLISHED (or CLOSE_WAIT, once its
// client gave up) with inode 0. A healthy listener takes each within
// milliseconds; the watch reads /proc/net/tcp and tcp6 every `interval` and
// reports when one such connection to the listener's port has waited longer
// than `stuck_after`. Passive: it opens no connection and costs the server
// nothing but the read.
//
// Thread-safe; the callback runs on the watch's own thread, at most once.
#ifndef ROPE_SERVICE_LISTENER_WATCH_H_
#define ROPE_SERVICE_LISTENER_WATCH_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace rope {

// The connections to local port `port` in a /proc/net/tcp or tcp6 text that
// no process has accepted yet (ESTABLISHED or CLOSE_WAIT with inode 0), each
// as "LOCAL->REMOTE" in the file's own hex spelling.
std::vector<std::string> UnacceptedConnections(absl::string_view proc_net_tcp, int port);

class ListenerWatch {
 public:
  struct Options {
    int port = 0;  // the listener's TCP port
    absl::Duration interval = absl::Seconds(1);
    absl::Duration stuck_after = absl::Seconds(10);
    // Where tcp and tcp6 are read from (tests point it elsewhere).
    std::string proc_net_dir = "/proc/net";
  };

  // Starts the watch's thread. `on_stuck` gets a one-line description (the
  // port, how long the oldest connection waited).
  ListenerWatch(Options options, std::function<void(const std::string&)> on_stuck);
  // Stops the thread.
  ~ListenerWatch();
  ListenerWatch(const ListenerWatch&) = delete;
  ListenerWatch& operator=(const ListenerWatch&) = delete;

 private:
  void Run();

  const Options options_;
  const std::function<void(const std::string&)> on_stuck_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace rope

#endif  // ROPE_SERVICE_LISTENER_WATCH_H_
