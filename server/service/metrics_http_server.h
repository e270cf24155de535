// MetricsHttpServer: the Prometheus /metrics endpoint, served by GNU
// libmicrohttpd (Debian's libmicrohttpd-dev) over prometheus-cpp's
// collectables and its text serializer.
//
// It replaces prometheus-cpp's civetweb Exposer, which Debian 12 builds
// against civetweb 1.15: any request other than GET /metrics (GET /, HEAD,
// POST, a favicon probe) crashed the process in civetweb's error page, and
// ~200 idle connections holding half a request line took every civetweb
// worker thread so that scrapes timed out. Here:
//   - GET and HEAD /metrics answer 200 with the text exposition format
//     (version 0.0.4); any other path is 404, any other method 405 with
//     "Allow: GET, HEAD";
//   - one event-driven thread (epoll) serves every connection, so idle
//     connections cost a socket and a small buffer each, not a thread;
//   - a connection with no traffic for `client_timeout` is closed (half a
//     request line held open, a client that never reads the reply);
//   - at most `max_connections` connections in all and
//     `max_connections_per_address` from one IP address: past either, new
//     connections are closed at once, so one host cannot take the slots a
//     scraper on another host needs;
//   - a request's line and headers may take at most kRequestBufferBytes.
//
// Plaintext only: the endpoint is meant for a scraper on the pod's or the
// host's network, and binds 127.0.0.1 unless told otherwise.
//
// Thread-safe: collectables are called from the server's thread while
// scrapes run; they must outlive the server.
#ifndef ROPE_SERVICE_METRICS_HTTP_SERVER_H_
#define ROPE_SERVICE_METRICS_HTTP_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace prometheus {
class Collectable;
}  // namespace prometheus

struct MHD_Daemon;

namespace rope {

struct MetricsHttpOptions {
  // host:port, host a numeric IPv4 or IPv6 address (IPv6 in brackets) or a
  // name; port 0 picks a free port (see MetricsHttpServer::port()).
  std::string address = "127.0.0.1:0";
  // A connection with no traffic for this long is closed; rounded up to
  // whole seconds (libmicrohttpd's unit), at least 1 s.
  absl::Duration client_timeout = absl::Seconds(10);
  int max_connections = 256;
  int max_connections_per_address = 16;
};

// Bytes a connection's request line and headers may use; a larger request
// is answered with 431 or 414 and closed.
inline constexpr size_t kRequestBufferBytes = 16 << 10;

class MetricsHttpServer {
 public:
  // Serves the union of `collectables` (each scraped in order at every
  // request). INVALID_ARGUMENT for a malformed address or limit;
  // UNAVAILABLE naming the address when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const MetricsHttpOptions& options,
      std::vector<std::shared_ptr<prometheus::Collectable>> collectables);

  // Stops serving: closes the listening socket and every connection, and
  // returns once the server's thread has ended.
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }

  // The body of GET /metrics: every collectable's families in the text
  // exposition format.
  std::string Scrape() const;

 private:
  explicit MetricsHttpServer(std::vector<std::shared_ptr<prometheus::Collectable>> collectables)
      : collectables_(std::move(collectables)) {}

  const std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;
  MHD_Daemon* daemon_ = nullptr;
  int port_ = 0;
};

}  // namespace rope

#endif  // ROPE_SERVICE_METRICS_HTTP_SERVER_H_
