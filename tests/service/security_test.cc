// TLS, mutual TLS and bearer tokens through a real ropeserve (RopeServer on
// 127.0.0.1) and real RopeClient channels, with certificates made by the
// openssl CLI for this run (test_certs.h).
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "client/channel_security.h"
#include "client/rope_client.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "core/backends/cpu/cpu_backend.h"
#include "server/service/caller_identity.h"
#include "server/service/rope_server.h"
#include "tests/support/grpc_test_util.h"
#include "tests/support/test_certs.h"
#include "tests/support/wait_until.h"

namespace rope {
namespace test {
namespace {

using client::ChannelSecurityFiles;
using client::ClientOptions;
using client::RopeClient;

constexpr char kToken[] = "tok-3f9a1c0e5b7d";
constexpr char kNextToken[] = "tok-rotated-88e2";

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<TestCerts> made = MakeTestCerts();
    ASSERT_TRUE(made.ok()) << made.status();
    certs_ = new TestCerts(*std::move(made));
  }
  static void TearDownTestSuite() {
    if (certs_ != nullptr) std::filesystem::remove_all(certs_->dir);
    delete certs_;
    certs_ = nullptr;
  }

  static ServerSecurity Tls() {
    ServerSecurity security;
    security.cert_chain_pem = ReadWholeFile(certs_->server_cert);
    security.private_key_pem = ReadWholeFile(certs_->server_key);
    return security;
  }
  static ServerSecurity MutualTls() {
    ServerSecurity security = Tls();
    security.client_ca_pem = ReadWholeFile(certs_->ca_cert);
    return security;
  }
  static ServerSecurity TlsWithTokens() {
    ServerSecurity security = Tls();
    security.bearer_tokens = {kToken, kNextToken};
    return security;
  }

  void Start(const ServerSecurity& security, bool metrics = false,
             const std::string& health_listen = "", int64_t max_calls_per_client = 0) {
    if (certs_ == nullptr) GTEST_SKIP() << "no test certificates";
    absl::StatusOr<std::unique_ptr<Backend>> cpu = NewCpuBackend(1);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    ServerOptions options;
    options.listen_address = "127.0.0.1:0";
    options.work_threads = 2;
    options.security = security;
    if (metrics) options.metrics_address = "127.0.0.1:0";
    options.health_listen_address = health_listen;
    options.max_calls_per_client = max_calls_per_client;
    absl::StatusOr<std::unique_ptr<RopeServer>> server =
        RopeServer::Start(std::make_unique<Engine>(*std::move(cpu), EngineLimits()), options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  // A client of the server with `files`; ADD_FAILURE when it cannot be made.
  std::unique_ptr<RopeClient> Client(const ChannelSecurityFiles& files,
                                     bool own_connection = false) {
    ClientOptions options;
    options.own_connections = own_connection;
    options.deadline = absl::Seconds(10);
    options.retry_max_attempts = 1;
    absl::Status applied = client::ApplyChannelSecurity(files, &options);
    EXPECT_TRUE(applied.ok()) << applied;
    if (!applied.ok()) return nullptr;
    absl::StatusOr<std::unique_ptr<RopeClient>> c =
        RopeClient::Create(absl::StrCat("127.0.0.1:", server_->port()), options);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  static ChannelSecurityFiles TrustingCa() {
    ChannelSecurityFiles files;
    files.tls_ca_file = certs_->ca_cert;
    return files;
  }
  static ChannelSecurityFiles WithClientCert() {
    ChannelSecurityFiles files = TrustingCa();
    files.tls_cert_file = certs_->client_cert;
    files.tls_key_file = certs_->client_key;
    return files;
  }
  static ChannelSecurityFiles WithToken(const std::string& token) {
    ChannelSecurityFiles files = TrustingCa();
    files.token_file = WriteTestFile(certs_->dir, absl::StrCat("token-", token), token + "\n");
    return files;
  }

  // A small Rotate through `c`: its status.
  static absl::Status RotateThrough(RopeClient* c) {
    if (c == nullptr) return absl::InternalError("no client");
    return c->Rotate(MakeRotateRequest(1, 4, 2, 16, 64)).status();
  }

  static TestCerts* certs_;
  std::unique_ptr<RopeServer> server_;
};

TestCerts* SecurityTest::certs_ = nullptr;

TEST_F(SecurityTest, TlsServesClientsThatTrustItsCa) {
  Start(Tls());
  std::unique_ptr<RopeClient> c = Client(TrustingCa());
  EXPECT_TRUE(RotateThrough(c.get()).ok()) << RotateThrough(c.get());
}

TEST_F(SecurityTest, TlsChecksTheNameGivenByTlsServerName) {
  Start(Tls());
  ChannelSecurityFiles files = TrustingCa();
  files.tls_server_name = "localhost";  // in the certificate's SAN
  std::unique_ptr<RopeClient> good = Client(files);
  EXPECT_TRUE(RotateThrough(good.get()).ok());
  files.tls_server_name = "not-this-server.example";
  std::unique_ptr<RopeClient> bad = Client(files);
  EXPECT_EQ(RotateThrough(bad.get()).code(), absl::StatusCode::kUnavailable);
}

TEST_F(SecurityTest, TlsRefusesPlaintextClients) {
  Start(Tls());
  std::unique_ptr<RopeClient> c = Client(ChannelSecurityFiles());
  EXPECT_EQ(RotateThrough(c.get()).code(), absl::StatusCode::kUnavailable);
}

TEST_F(SecurityTest, ClientsRefuseAServerTheirCaDidNotSign) {
  Start(Tls());
  ChannelSecurityFiles files;
  files.tls_ca_file = certs_->other_ca_cert;
  std::unique_ptr<RopeClient> c = Client(files);
  EXPECT_EQ(RotateThrough(c.get()).code(), absl::StatusCode::kUnavailable);
}

TEST_F(SecurityTest, MutualTlsServesClientsWithACertificateFromItsCa) {
  Start(MutualTls());
  std::unique_ptr<RopeClient> c = Client(WithClientCert());
  EXPECT_TRUE(RotateThrough(c.get()).ok()) << RotateThrough(c.get());
}

TEST_F(SecurityTest, MutualTlsRefusesClientsWithoutACertificate) {
  Start(MutualTls());
  std::unique_ptr<RopeClient> c = Client(TrustingCa());
  EXPECT_EQ(RotateThrough(c.get()).code(), absl::StatusCode::kUnavailable);
  // Health too: the handshake comes before any method.
  absl::StatusOr<RopeClient::ServingStatus> health = c->Health();
  EXPECT_EQ(health.status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(SecurityTest, MutualTlsRefusesClientsWithACertificateFromAnotherCa) {
  Start(MutualTls());
  ChannelSecurityFiles files = TrustingCa();
  files.tls_cert_file = certs_->other_client_cert;
  files.tls_key_file = certs_->other_client_key;
  std::unique_ptr<RopeClient> c = Client(files);
  EXPECT_EQ(RotateThrough(c.get()).code(), absl::StatusCode::kUnavailable);
  // The server keeps serving the clients it should.
  std::unique_ptr<RopeClient> good = Client(WithClientCert());
  EXPECT_TRUE(RotateThrough(good.get()).ok());
}

TEST_F(SecurityTest, TokenAuthAcceptsEveryListedToken) {
  Start(TlsWithTokens());
  for (const char* token : {kToken, kNextToken}) {
    std::unique_ptr<RopeClient> c = Client(WithToken(token));
    EXPECT_TRUE(RotateThrough(c.get()).ok()) << token << ": " << RotateThrough(c.get());
    ASSERT_NE(c, nullptr);
    EXPECT_TRUE(c->GetServerInfo().ok()) << token;
  }
}

// Shared-memory regions belong to the token (any connection presenting it),
// not to the connection; another token does not see them.
TEST_F(SecurityTest, SharedMemoryRegionsBelongToTheBearerToken) {
  Start(TlsWithTokens());
  absl::StatusOr<std::unique_ptr<client::SharedRegion>> region =
      client::SharedRegion::Create("tokened", 4096);
  ASSERT_TRUE(region.ok()) << region.status();
  std::unique_ptr<RopeClient> owner = Client(WithToken(kToken), true);
  std::unique_ptr<RopeClient> same_token = Client(WithToken(kToken), true);
  std::unique_ptr<RopeClient> other_token = Client(WithToken(kNextToken), true);
  ASSERT_TRUE(owner != nullptr && same_token != nullptr && other_token != nullptr);
  ASSERT_TRUE(owner->RegisterSharedMemory(**region).ok());
  v1::RotateRequest request = MakeRotateRequest(1, 4, 2, 16, 64);
  std::memcpy((*region)->data(), request.q().data().data(), request.q().data().size());
  *request.mutable_q()->mutable_shm() = (*region)->Ref(0, request.q().data().size());
  request.mutable_q()->clear_data();
  EXPECT_TRUE(same_token->Rotate(request).ok());
  const absl::Status refused = other_token->Rotate(request).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kNotFound) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "q.shm.region \"tokened\" is not registered"))
      << refused;
  EXPECT_TRUE(same_token->UnregisterSharedMemory("tokened").ok());
  EXPECT_EQ(owner->UnregisterSharedMemory("tokened").code(), absl::StatusCode::kNotFound);
}

TEST_F(SecurityTest, SharedMemoryRegionsBelongToTheClientCertificateSubject) {
  Start(MutualTls());
  absl::StatusOr<std::unique_ptr<client::SharedRegion>> region =
      client::SharedRegion::Create("certified", 4096);
  ASSERT_TRUE(region.ok()) << region.status();
  std::unique_ptr<RopeClient> owner = Client(WithClientCert(), true);
  std::unique_ptr<RopeClient> same_subject = Client(WithClientCert(), true);
  ASSERT_TRUE(owner != nullptr && same_subject != nullptr);
  ASSERT_TRUE(owner->RegisterSharedMemory(**region).ok());
  absl::StatusOr<v1::SharedMemoryStatusResponse> status = same_subject->SharedMemoryStatus();
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->regions_size(), 1);
  EXPECT_EQ(status->regions(0).name(), "certified");
}

TEST_F(SecurityTest, TokenAuthRefusesCallsWithoutAToken) {
  Start(TlsWithTokens());
  std::unique_ptr<RopeClient> c = Client(TrustingCa());
  const absl::Status status = RotateThrough(c.get());
  EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "missing bearer token")) << status;
}

TEST_F(SecurityTest, TokenAuthRefusesAWrongTokenWithoutEchoingIt) {
  Start(TlsWithTokens());
  const std::string wrong = std::string(kToken) + "x";
  std::unique_ptr<RopeClient> c = Client(WithToken(wrong));
  const absl::Status status = RotateThrough(c.get());
  EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "not accepted")) << status;
  EXPECT_FALSE(absl::StrContains(status.message(), wrong)) << status;
}

TEST_F(SecurityTest, HealthNeedsNoToken) {
  Start(TlsWithTokens());
  std::unique_ptr<RopeClient> c = Client(TrustingCa());
  ASSERT_NE(c, nullptr);
  absl::StatusOr<RopeClient::ServingStatus> health = c->Health();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(SecurityTest, RefusedTokensAreCountedByReason) {
  Start(TlsWithTokens(), /*metrics=*/true);
  std::unique_ptr<RopeClient> none = Client(TrustingCa());
  std::unique_ptr<RopeClient> wrong = Client(WithToken("nope"));
  EXPECT_EQ(RotateThrough(none.get()).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(RotateThrough(wrong.get()).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(RotateThrough(wrong.get()).code(), absl::StatusCode::kUnauthenticated);
  const std::string metrics = HttpGetMetrics(server_->metrics_port());
  EXPECT_EQ(MetricValue(metrics, "rope_auth_failures_total{reason=\"missing_token\"}"), 1);
  EXPECT_EQ(MetricValue(metrics, "rope_auth_failures_total{reason=\"invalid_token\"}"), 2);
}

// Probes that speak plaintext without credentials (Kubernetes' gRPC probes)
// get health, and only health, from --health_listen.
TEST_F(SecurityTest, HealthPortServesOnlyHealthInPlaintextAndFollowsDraining) {
  Start(MutualTls(), /*metrics=*/false, "127.0.0.1:0");
  ASSERT_NE(server_->health_port(), 0);
  ASSERT_NE(server_->health_port(), server_->port());
  std::shared_ptr<grpc::Channel> plain = grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", server_->health_port()), grpc::InsecureChannelCredentials());
  auto health = grpc::health::v1::Health::NewStub(plain);
  auto check = [&health](const std::string& service) {
    grpc::ClientContext context;
    SetDeadline(&context, absl::Seconds(10));
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    grpc::Status status = health->Check(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.status();
  };
  EXPECT_EQ(check(""), grpc::health::v1::HealthCheckResponse::SERVING);

  auto rope_stub = v1::RopeService::NewStub(plain);
  grpc::ClientContext context;
  SetDeadline(&context, absl::Seconds(10));
  v1::RotateResponse reply;
  EXPECT_EQ(rope_stub->Rotate(&context, MakeRotateRequest(1, 4, 2, 16, 64), &reply).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);

  server_->StartDraining();
  EXPECT_EQ(check(""), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
}

TEST_F(SecurityTest, StartRefusesAKeyThatIsNotTheCertificates) {
  if (certs_ == nullptr) GTEST_SKIP();
  ServerSecurity security = Tls();
  security.private_key_pem = ReadWholeFile(certs_->client_key);
  const absl::Status status = ValidateServerSecurity(security);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "does not belong")) << status;
}

TEST_F(SecurityTest, StartRefusesAnExpiredCertificate) {
  if (certs_ == nullptr) GTEST_SKIP();
  ServerSecurity security = Tls();
  security.cert_chain_pem = ReadWholeFile(certs_->expired_server_cert);
  ASSERT_FALSE(security.cert_chain_pem.empty());
  const absl::Status status = ValidateServerSecurity(security);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "has expired")) << status;
}

TEST_F(SecurityTest, StartRefusesTokensOrAClientCaWithoutTls) {
  ServerSecurity tokens;
  tokens.bearer_tokens = {kToken};
  EXPECT_EQ(ValidateServerSecurity(tokens).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(ValidateServerSecurity(tokens).message(), "--auth_token_file"));
  ServerSecurity ca;
  ca.client_ca_pem = "-----BEGIN CERTIFICATE-----";
  EXPECT_TRUE(
      absl::StrContains(ValidateServerSecurity(ca).message(), "--tls_client_ca_file needs TLS"));
  ServerSecurity half;
  half.cert_chain_pem = "x";
  EXPECT_EQ(ValidateServerSecurity(half).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SecurityTest, StartRefusesPemThatDoesNotParse) {
  ServerSecurity security;
  security.cert_chain_pem = "not a certificate";
  security.private_key_pem = "not a key";
  const absl::Status status = ValidateServerSecurity(security);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "--tls_cert_file: no PEM certificate")) << status;
}

TEST_F(SecurityTest, LoadNamesTheFlagAndPathOfAMissingFile) {
  ServerSecurityFiles files;
  files.tls_cert_file = "/nonexistent/server.pem";
  files.tls_key_file = "/nonexistent/server.key";
  const absl::StatusOr<ServerSecurity> loaded = LoadServerSecurity(files);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(loaded.status().message(),
                                "--tls_cert_file=/nonexistent/server.pem"))
      << loaded.status();
}

TEST_F(SecurityTest, LoadReadsEveryFile) {
  if (certs_ == nullptr) GTEST_SKIP();
  ServerSecurityFiles files;
  files.tls_cert_file = certs_->server_cert;
  files.tls_key_file = certs_->server_key;
  files.tls_client_ca_file = certs_->ca_cert;
  files.auth_token_file =
      WriteTestFile(certs_->dir, "tokens", "# current\nalpha-1\n\n  beta-2  \n");
  absl::StatusOr<ServerSecurity> loaded = LoadServerSecurity(files);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->bearer_tokens, (std::vector<std::string>{"alpha-1", "beta-2"}));
  EXPECT_EQ(loaded->client_ca_pem, ReadWholeFile(certs_->ca_cert));
  files.auth_token_file = WriteTestFile(certs_->dir, "no-tokens", "# none yet\n\n");
  EXPECT_EQ(LoadServerSecurity(files).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SecurityTest, ClientSecurityRefusesATokenWithoutTls) {
  ChannelSecurityFiles files;
  files.token_file = "/dev/null";
  ClientOptions options;
  const absl::Status status = client::ApplyChannelSecurity(files, &options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "--token_file needs TLS")) << status;
}

TEST_F(SecurityTest, ClientSecurityNamesTheFlagOfAMissingFile) {
  ChannelSecurityFiles files;
  files.tls_ca_file = "/nonexistent/ca.pem";
  ClientOptions options;
  const absl::Status status = client::ApplyChannelSecurity(files, &options);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(status.message(), "--tls_ca_file=/nonexistent/ca.pem")) << status;
  files.tls_ca_file.clear();
  files.tls_cert_file = "/nonexistent/client.pem";
  EXPECT_TRUE(absl::StrContains(client::ApplyChannelSecurity(files, &options).message(),
                                "go together"));
}

// ---- Per-client share of calls in flight (client_share.h) -----------------

// The flooding client holds its two calls in flight with two RotateStreams,
// each with one message whose 32 MiB reply it does not read: the server's
// write waits on HTTP/2 flow control, so the message keeps its call slot
// with no timing involved (a slow call could finish before the check under
// load; an idle stream holds no slot).
TEST_F(SecurityTest, AClientOverItsShareIsRefusedWhileOthersAreServed) {
  Start(TlsWithTokens(), /*metrics=*/false, /*health_listen=*/"", /*max_calls_per_client=*/2);
  std::unique_ptr<RopeClient> flood = Client(WithToken(kToken));
  std::unique_ptr<RopeClient> steady = Client(WithToken(kNextToken));
  ASSERT_NE(flood, nullptr);
  ASSERT_NE(steady, nullptr);
  const std::string flood_id = TokenFingerprint(kToken);
  // The flood's channel carries its token (composite channel credentials).
  std::unique_ptr<v1::RopeService::Stub> flood_stub = v1::RopeService::NewStub(flood->channel());
  grpc::ClientContext held_context[2];
  std::unique_ptr<grpc::ClientReaderWriter<v1::RotateRequest, v1::RotateResponse>> held[2];
  const v1::RotateRequest unread_reply = MakeRotateRequest(1, 4096, 32, 64, /*max_len=*/4096);
  for (int i = 0; i < 2; ++i) {
    SetDeadline(&held_context[i]);
    held[i] = flood_stub->RotateStream(&held_context[i]);
    ASSERT_TRUE(held[i]->Write(unread_reply));
  }
  EXPECT_TRUE(WaitUntil([&] { return server_->gate().in_flight_of(flood_id) == 2; }))
      << server_->gate().in_flight_of(flood_id);
  // The flooding client's third call is over its share...
  const absl::Status over = RotateThrough(flood.get());
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted) << over;
  EXPECT_TRUE(absl::StrContains(over.message(), "its share is max_calls_per_client 2")) << over;
  EXPECT_TRUE(absl::StrContains(over.message(), flood_id)) << over;
  EXPECT_FALSE(absl::StrContains(over.message(), kToken)) << over;  // never the token
  // ... while another client is served.
  EXPECT_TRUE(RotateThrough(steady.get()).ok());
  EXPECT_TRUE(RotateThrough(steady.get()).ok());
  for (auto& stream : held) {
    v1::RotateResponse reply;
    EXPECT_TRUE(stream->Read(&reply));
    stream->WritesDone();
    EXPECT_FALSE(stream->Read(&reply));
    const grpc::Status closed = stream->Finish();
    EXPECT_TRUE(closed.ok()) << closed.error_message();
  }
  EXPECT_TRUE(WaitUntil([&] { return server_->gate().in_flight_of(flood_id) == 0; }))
      << server_->gate().in_flight_of(flood_id);
  EXPECT_TRUE(RotateThrough(flood.get()).ok());  // its share is free again
}

// ---- Live reload (credential_reloader.h) ----------------------------------

// Files as Kubernetes mounts a Secret: dir/live is a symlink to a generation
// directory, swapped in one rename, so that a certificate and its key change
// together.
class SecretDir {
 public:
  explicit SecretDir(std::string dir) : dir_(std::move(dir)) {
    std::filesystem::create_directories(dir_);
  }
  // Publishes a new generation holding `files` (name -> contents).
  void Publish(const std::vector<std::pair<std::string, std::string>>& files) {
    const std::string generation = absl::StrCat("gen", ++count_);
    std::filesystem::create_directories(absl::StrCat(dir_, "/", generation));
    for (const auto& [name, contents] : files) {
      WriteTestFile(absl::StrCat(dir_, "/", generation), name, contents);
    }
    const std::string link = dir_ + "/live.new";
    std::filesystem::remove(link);
    std::filesystem::create_directory_symlink(generation, link);
    std::filesystem::rename(link, dir_ + "/live");
  }
  std::string Path(const std::string& name) const { return dir_ + "/live/" + name; }

 private:
  std::string dir_;
  int count_ = 0;
};

// The common name of the certificate the server presents on a new
// connection (a channel of its own), or the error.
std::string PresentedCommonName(int port, const std::string& ca_pem) {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ca_pem;
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto channel = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                           grpc::SslCredentials(ssl), args);
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  SetDeadline(&context);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status =
      health->Check(&context, grpc::health::v1::HealthCheckRequest(), &response);
  if (!status.ok()) return "error: " + status.error_message();
  std::vector<grpc::string_ref> names =
      context.auth_context()->FindPropertyValues("x509_common_name");
  return names.empty() ? "none" : std::string(names[0].data(), names[0].size());
}

double Metric(int port, absl::string_view series) {
  return MetricValue(HttpGetMetrics(port), series);
}

// Polls `series` on /metrics until it reaches `value` (bounded).
bool WaitForMetric(int port, absl::string_view series, double value) {
  return WaitUntil([&] { return Metric(port, series) >= value; }, kSettleTimeout,
                   absl::Milliseconds(50));
}

TEST_F(SecurityTest, RotatesCertificateAndTokensUnderLoadWithoutAFailedCall) {
  if (certs_ == nullptr) GTEST_SKIP() << "no test certificates";
  SecretDir secret(certs_->dir + "/secret-rotation");
  secret.Publish({{"tls.crt", ReadWholeFile(certs_->server_cert)},
                  {"tls.key", ReadWholeFile(certs_->server_key)},
                  {"tokens", absl::StrCat(kToken, "\n", kNextToken, "\n")}});
  ServerSecurityFiles files;
  files.tls_cert_file = secret.Path("tls.crt");
  files.tls_key_file = secret.Path("tls.key");
  files.auth_token_file = secret.Path("tokens");
  absl::StatusOr<ServerSecurity> loaded = LoadServerSecurity(files);
  ASSERT_TRUE(loaded.ok()) << loaded.status();

  absl::StatusOr<std::unique_ptr<Backend>> cpu = NewCpuBackend(1);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.work_threads = 2;
  options.metrics_address = "127.0.0.1:0";
  options.security = *loaded;
  options.security_files = files;
  options.security_reload_interval = absl::Milliseconds(100);
  options.security_staging_dir = certs_->dir;
  absl::StatusOr<std::unique_ptr<RopeServer>> started =
      RopeServer::Start(std::make_unique<Engine>(*std::move(cpu), EngineLimits()), options);
  ASSERT_TRUE(started.ok()) << started.status();
  server_ = *std::move(started);
  const int metrics_port = server_->metrics_port();
  const std::string ca_pem = ReadWholeFile(certs_->ca_cert);
  EXPECT_EQ(PresentedCommonName(server_->port(), ca_pem), "localhost");

  // Load with the token that survives the rotation: long-lived channels and
  // a fresh connection (a new handshake) for every call of the last worker.
  std::atomic<bool> stop{false};
  std::atomic<int64_t> ok{0}, failed{0};
  std::string first_failure;
  absl::Mutex failure_mu;
  std::vector<std::thread> workers;
  // Written once, before the workers read it (WithToken rewrites the file).
  const ChannelSecurityFiles next_token = WithToken(kNextToken);
  for (int w = 0; w < 3; ++w) {
    workers.emplace_back([&, w] {
      std::unique_ptr<RopeClient> steady = Client(next_token);
      while (!stop.load()) {
        std::unique_ptr<RopeClient> fresh;
        RopeClient* c = steady.get();
        if (w == 2) {
          ClientOptions o;
          o.deadline = absl::Seconds(10);
          o.retry_max_attempts = 1;
          o.own_connections = true;
          ASSERT_TRUE(client::ApplyChannelSecurity(next_token, &o).ok());
          fresh = *RopeClient::Create(absl::StrCat("127.0.0.1:", server_->port()), o);
          c = fresh.get();
        }
        const absl::Status status = RotateThrough(c);
        if (status.ok()) {
          ++ok;
        } else {
          ++failed;
          absl::MutexLock lock(&failure_mu);
          if (first_failure.empty()) first_failure = status.ToString();
        }
      }
    });
  }
  // The load runs before the rotation, and again after each change below:
  // waited for in calls answered, not in time, so that a slow machine
  // cannot pass the changes with no call made across them.
  constexpr int64_t kCallsBetweenChanges = 5;
  auto failure = [&] {
    absl::MutexLock lock(&failure_mu);
    return first_failure;
  };
  auto answers_more = [&](int64_t calls) {
    const int64_t from = ok.load();
    return WaitUntil([&] { return ok.load() >= from + calls || failed.load() > 0; }) &&
           failed.load() == 0;
  };
  EXPECT_TRUE(answers_more(kCallsBetweenChanges)) << failure();

  // Rotate: a new certificate and key, and the first token withdrawn.
  secret.Publish({{"tls.crt", ReadWholeFile(certs_->rotated_server_cert)},
                  {"tls.key", ReadWholeFile(certs_->rotated_server_key)},
                  {"tokens", absl::StrCat(kNextToken, "\n")}});
  EXPECT_TRUE(WaitForMetric(metrics_port,
                            "rope_credential_reloads_total{part=\"tls\",result=\"ok\"}", 1));
  EXPECT_TRUE(WaitForMetric(metrics_port,
                            "rope_credential_reloads_total{part=\"tokens\",result=\"ok\"}", 1));
  // New handshakes present the new certificate (gRPC's provider looks at
  // its copies every second).
  std::string name;
  WaitUntil(
      [&] {
        name = PresentedCommonName(server_->port(), ca_pem);
        return name == "localhost-rotated";
      },
      kSettleTimeout, absl::Milliseconds(100));
  EXPECT_EQ(name, "localhost-rotated");
  EXPECT_TRUE(answers_more(kCallsBetweenChanges)) << failure();

  // A malformed set keeps the current credentials; it is counted.
  secret.Publish({{"tls.crt", "-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n"},
                  {"tls.key", ReadWholeFile(certs_->rotated_server_key)},
                  {"tokens", "bad token with spaces\n"}});
  EXPECT_TRUE(WaitForMetric(
      metrics_port, "rope_credential_reloads_total{part=\"tls\",result=\"refused\"}", 1));
  EXPECT_TRUE(WaitForMetric(
      metrics_port, "rope_credential_reloads_total{part=\"tokens\",result=\"refused\"}", 1));
  absl::SleepFor(absl::Milliseconds(1500));  // past the provider's next look
  EXPECT_EQ(PresentedCommonName(server_->port(), ca_pem), "localhost-rotated");
  EXPECT_TRUE(answers_more(kCallsBetweenChanges)) << failure();

  stop.store(true);
  for (std::thread& t : workers) t.join();
  EXPECT_EQ(failed.load(), 0) << first_failure;

  // The withdrawn token is refused; the kept one still works.
  std::unique_ptr<RopeClient> old_token = Client(WithToken(kToken));
  const absl::Status refused = RotateThrough(old_token.get());
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnauthenticated) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "bearer token not accepted")) << refused;
  std::unique_ptr<RopeClient> new_token = Client(WithToken(kNextToken));
  EXPECT_TRUE(RotateThrough(new_token.get()).ok());
  EXPECT_EQ(Metric(metrics_port, "rope_credential_reloads_total{part=\"tls\",result=\"ok\"}"), 1);
}

}  // namespace
}  // namespace test
}  // namespace rope
