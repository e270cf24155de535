#include "server/service/metrics_http_server.h"

#include <microhttpd.h>
#include <netdb.h>
#include <sys/socket.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <exception>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"

namespace rope {
namespace {

constexpr char kMetricsPath[] = "/metrics";
constexpr char kTextFormat[] = "text/plain; version=0.0.4; charset=utf-8";

// A host and a port split out of "host:port" or "[v6]:port".
struct HostPort {
  std::string host;
  std::string port;
};

absl::StatusOr<HostPort> SplitHostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address is \"", address, "\": expected host:port"));
  }
  HostPort out{address.substr(0, colon), address.substr(colon + 1)};
  if (out.host.size() >= 2 && out.host.front() == '[' && out.host.back() == ']') {
    out.host = out.host.substr(1, out.host.size() - 2);
  }
  int port = 0;
  if (!absl::SimpleAtoi(out.port, &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("metrics address is \"", address,
                                                   "\": the port must be in [0, 65535]"));
  }
  return out;
}

// Queues a small plain-text response; MHD_NO (the connection is closed) if
// even that cannot be made.
MHD_Result Reply(MHD_Connection* connection, unsigned int status, absl::string_view body,
                 const char* content_type, const char* allow = nullptr) {
  MHD_Response* response = MHD_create_response_from_buffer(
      body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
  if (allow != nullptr) MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, allow);
  const MHD_Result queued = MHD_queue_response(connection, status, response);
  MHD_destroy_response(response);
  return queued;
}

// Leaves percent-escapes in the path as they are: the one path served has
// none, and decoding would let "/metrics%00" pass as "/metrics". Returns the
// length libmicrohttpd asks for.
size_t KeepEscapes(void* /*cls*/, MHD_Connection* /*connection*/, char* text) {
  return std::strlen(text);
}

// libmicrohttpd's request handler. Answers on its first call for a request
// (before any body is read: a body is never wanted, and libmicrohttpd closes
// the connection instead of reading one that was not consumed).
MHD_Result HandleRequest(void* cls, MHD_Connection* connection, const char* url,
                         const char* method, const char* /*version*/,
                         const char* /*upload_data*/, size_t* /*upload_data_size*/,
                         void** /*request_context*/) {
  const auto* server = static_cast<const MetricsHttpServer*>(cls);
  const absl::string_view path(url != nullptr ? url : "");
  const absl::string_view verb(method != nullptr ? method : "");
  if (path != kMetricsPath) {
    return Reply(connection, MHD_HTTP_NOT_FOUND, "not found: this server serves /metrics only\n",
                 "text/plain; charset=utf-8");
  }
  if (verb != MHD_HTTP_METHOD_GET && verb != MHD_HTTP_METHOD_HEAD) {
    return Reply(connection, MHD_HTTP_METHOD_NOT_ALLOWED,
                 "method not allowed: /metrics answers GET and HEAD\n",
                 "text/plain; charset=utf-8", "GET, HEAD");
  }
  std::string body;
  try {
    body = server->Scrape();
  } catch (const std::exception& e) {
    // A collector that throws must cost one scrape, not the process.
    return Reply(connection, MHD_HTTP_INTERNAL_SERVER_ERROR,
                 absl::StrCat("collecting metrics failed: ", e.what(), "\n"),
                 "text/plain; charset=utf-8");
  }
  // libmicrohttpd sends the headers alone (with this Content-Length) for HEAD.
  return Reply(connection, MHD_HTTP_OK, body, kTextFormat);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const MetricsHttpOptions& options,
    std::vector<std::shared_ptr<prometheus::Collectable>> collectables) {
  if (options.max_connections <= 0 || options.max_connections_per_address <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics connection limits are ", options.max_connections, " in all and ",
        options.max_connections_per_address, " per address: both must be > 0"));
  }
  if (options.client_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics client timeout is ", absl::FormatDuration(options.client_timeout),
                     ": must be > 0"));
  }
  absl::StatusOr<HostPort> host_port = SplitHostPort(options.address);
  if (!host_port.ok()) return host_port.status();
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* resolved = nullptr;
  const int gai = getaddrinfo(host_port->host.c_str(), host_port->port.c_str(), &hints, &resolved);
  if (gai != 0 || resolved == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("metrics address is \"", options.address,
                                                   "\": ", gai_strerror(gai)));
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> owned(resolved, freeaddrinfo);

  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer(std::move(collectables)));
  unsigned int flags = MHD_USE_EPOLL_INTERNAL_THREAD;
  if (resolved->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
  const double seconds = std::ceil(absl::ToDoubleSeconds(options.client_timeout));
  const unsigned int timeout_s = seconds > 86400.0 ? 86400u : static_cast<unsigned int>(seconds);
  server->daemon_ = MHD_start_daemon(
      flags, 0, /*accept policy*/ nullptr, nullptr, &HandleRequest, server.get(),
      MHD_OPTION_SOCK_ADDR, resolved->ai_addr,
      MHD_OPTION_CONNECTION_TIMEOUT, timeout_s,
      MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned int>(options.max_connections),
      MHD_OPTION_PER_IP_CONNECTION_LIMIT,
      static_cast<unsigned int>(options.max_connections_per_address),
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, kRequestBufferBytes,
      MHD_OPTION_UNESCAPE_CALLBACK, &KeepEscapes, nullptr,
      MHD_OPTION_END);
  if (server->daemon_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", options.address,
                                               ": the address is in use or not local"));
  }
  const MHD_DaemonInfo* info = MHD_get_daemon_info(server->daemon_, MHD_DAEMON_INFO_BIND_PORT);
  server->port_ = info != nullptr ? info->port : 0;
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
}

std::string MetricsHttpServer::Scrape() const {
  std::vector<prometheus::MetricFamily> families;
  for (const std::shared_ptr<prometheus::Collectable>& collectable : collectables_) {
    std::vector<prometheus::MetricFamily> some = collectable->Collect();
    families.insert(families.end(), std::make_move_iterator(some.begin()),
                    std::make_move_iterator(some.end()));
  }
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace rope
