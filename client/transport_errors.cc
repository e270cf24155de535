#include "client/transport_errors.h"

#include <arpa/inet.h>
#include <grpc/support/log.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "client/rope_client.h"

namespace rope {
namespace client {
namespace {

// gRPC's words for a connection that ended before (or during) the handshake.
bool ConnectionCut(absl::string_view message) {
  return absl::StrContains(message, "Socket closed") ||
         absl::StrContains(message, "Connection reset") ||
         absl::StrContains(message, "End of TCP stream") ||
         absl::StrContains(message, "Broken pipe");
}

std::string Cause(absl::string_view message, const ChannelSecurityFiles& security) {
  if (!security.UsesTls()) {
    // A TLS server reads the HTTP/2 preface as a bad TLS record and hangs up.
    if (ConnectionCut(message)) {
      return "the server requires TLS, or is not a gRPC server (give --tls, or --tls_ca_file "
             "for a private CA)";
    }
    return "";
  }
  if (absl::StrContains(message, "WRONG_VERSION_NUMBER") ||
      absl::StrContains(message, "wrong version number") ||
      absl::StrContains(message, "HTTP_REQUEST") ||
      absl::StrContains(message, "packet length too long")) {
    return "the server does not speak TLS (it is plaintext: drop the --tls flags)";
  }
  if (absl::StrContains(message, "CERTIFICATE_VERIFY_FAILED") ||
      absl::StrContains(message, "certificate verify failed")) {
    return "the server's certificate is not signed by a CA the client trusts (check "
           "--tls_ca_file)";
  }
  if (absl::StrContains(message, "not in peer certificate") ||
      absl::StrContains(message, "Peer name")) {
    return "the server's certificate does not name the target host (give --tls_server_name "
           "with a name the certificate holds)";
  }
  if (security.tls_cert_file.empty() &&
      (ConnectionCut(message) || absl::StrContains(message, "CERTIFICATE_REQUIRED") ||
       absl::StrContains(message, "HANDSHAKE_FAILURE"))) {
    return "the server requires a client certificate (mutual TLS: give --tls_cert_file and "
           "--tls_key_file)";
  }
  if (!security.tls_cert_file.empty() &&
      (absl::StrContains(message, "UNKNOWN_CA") || absl::StrContains(message, "BAD_CERTIFICATE") ||
       ConnectionCut(message))) {
    return "the server refused the client certificate (is it signed by the CA the server "
           "trusts, and still valid?)";
  }
  return "";
}

extern "C" void DiscardGrpcLog(gpr_log_func_args* /*args*/) {}

}  // namespace

absl::Status ExplainTransportFailure(const absl::Status& status,
                                     const ChannelSecurityFiles& security) {
  if (status.code() != absl::StatusCode::kUnavailable) return status;
  const std::string cause = Cause(status.message(), security);
  if (cause.empty()) return status;
  return absl::UnavailableError(absl::StrCat(cause, "; gRPC said: ", status.message()));
}

namespace {

// The gRPC targets ("ipv6:[::1]:50051", "ipv4:127.0.0.1:50051") a
// "host:port" or "dns:///host:port" target resolves to (for localhost both
// loopbacks, as gRPC's resolver has them whatever /etc/hosts says); empty
// for other targets or when it resolves to fewer than two.
std::vector<std::string> AddressTargets(const std::string& target) {
  absl::string_view rest = target;
  absl::ConsumePrefix(&rest, "dns:///");
  if (absl::StrContains(rest, ":/") || absl::StartsWith(rest, "unix:") ||
      absl::StartsWith(rest, "ipv4:") || absl::StartsWith(rest, "ipv6:") || absl::StartsWith(rest, "[")) {
    return {};
  }
  const size_t colon = rest.rfind(':');
  if (colon == absl::string_view::npos) return {};
  const std::string host(rest.substr(0, colon));
  const std::string port(rest.substr(colon + 1));
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0) return {};
  std::vector<std::string> targets;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ai_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr, text,
                sizeof(text));
      targets.push_back(absl::StrCat("ipv4:", text, ":", port));
    } else if (a->ai_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr, text,
                sizeof(text));
      targets.push_back(absl::StrCat("ipv6:[", text, "]:", port));
    }
  }
  freeaddrinfo(found);
  if (host == "localhost") {
    for (const std::string& loopback : {absl::StrCat("ipv6:[::1]:", port),
                                       absl::StrCat("ipv4:127.0.0.1:", port)}) {
      if (std::find(targets.begin(), targets.end(), loopback) == targets.end()) {
        targets.push_back(loopback);
      }
    }
  }
  if (targets.size() < 2) return {};
  return targets;
}

}  // namespace

absl::Status ExplainTransportFailure(const absl::Status& status,
                                     const ChannelSecurityFiles& security,
                                     const std::string& target) {
  absl::Status explained = ExplainTransportFailure(status, security);
  if (status.code() != absl::StatusCode::kUnavailable || explained.message() != status.message() ||
      !absl::StrContains(status.message(), "Connection refused")) {
    return explained;
  }
  const std::vector<std::string> addresses = AddressTargets(target);
  if (addresses.empty()) return explained;
  std::vector<std::string> refused;
  for (const std::string& address : addresses) {
    ClientOptions options;
    options.deadline = absl::Seconds(3);
    options.retry_max_attempts = 1;
    options.health_check = false;
    options.load_balancing_policy = "pick_first";
    ChannelSecurityFiles files = security;
    if (files.UsesTls() && files.tls_server_name.empty()) {
      // The certificate names the target's host, not the address.
      absl::string_view host = target;
      absl::ConsumePrefix(&host, "dns:///");
      files.tls_server_name = std::string(host.substr(0, host.rfind(':')));
    }
    if (!ApplyChannelSecurity(files, &options).ok()) return explained;
    absl::StatusOr<std::unique_ptr<RopeClient>> client = RopeClient::Create(address, options);
    if (!client.ok()) return explained;
    absl::StatusOr<RopeClient::ServingStatus> health = (*client)->Health();
    if (health.ok()) continue;  // this one works: the failure was elsewhere
    if (absl::StrContains(health.status().message(), "Connection refused")) {
      refused.push_back(address);
      continue;
    }
    const absl::Status cause = ExplainTransportFailure(health.status(), security);
    return absl::Status(status.code(),
                        absl::StrCat(target, " is ", absl::StrJoin(addresses, " and "), ": ",
                                     refused.empty() ? "" : absl::StrCat(absl::StrJoin(refused, ", "),
                                                                         " refused the connection; "),
                                     address, " answered: ", cause.message()));
  }
  return explained;
}

void QuietGrpcLogging() {
  if (std::getenv("GRPC_VERBOSITY") != nullptr || std::getenv("GRPC_TRACE") != nullptr) return;
  gpr_set_log_function(DiscardGrpcLog);
}

}  // namespace client
}  // namespace rope
