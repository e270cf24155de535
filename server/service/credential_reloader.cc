#include "server/service/credential_reloader.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "grpcpp/security/server_credentials.h"

namespace rope {
namespace {

// How often gRPC's provider looks at the private copies: they change only
// when this class renames a new set in, so a short interval costs a stat.
constexpr unsigned kProviderRefreshSeconds = 1;

absl::Status WriteFileExclusive(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  out << contents;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  chmod(path.c_str(), 0600);
  return absl::OkStatus();
}

std::string Describe(ReloadedPart part) { return part == ReloadedPart::kTls ? "TLS" : "tokens"; }

}  // namespace

CredentialReloader::CredentialReloader(const ServerSecurityFiles& files, absl::Duration interval,
                                       Callbacks callbacks)
    : files_(files), interval_(interval), callbacks_(std::move(callbacks)) {}

absl::StatusOr<std::unique_ptr<CredentialReloader>> CredentialReloader::Start(
    const ServerSecurityFiles& files, const ServerSecurity& initial, absl::Duration interval,
    const std::string& staging_dir, Callbacks callbacks) {
  std::unique_ptr<CredentialReloader> reloader(
      new CredentialReloader(files, interval, std::move(callbacks)));
  std::string pattern = absl::StrCat(staging_dir.empty() ? "/tmp" : staging_dir,
                                     "/ropeserve-credentials-XXXXXX");
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (mkdtemp(buffer.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot make a directory for the private copies of "
                                            "the certificates like ", pattern, ": ",
                                            std::strerror(errno)));
  }
  reloader->staging_dir_ = buffer.data();
  absl::Status staged = reloader->WriteStaged(initial);
  if (!staged.ok()) return staged;

  const std::string current = reloader->staging_dir_ + "/current";
  const std::string ca = initial.client_ca_pem.empty() ? "" : current + "/ca.pem";
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      current + "/key.pem", current + "/cert.pem", ca, kProviderRefreshSeconds);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (!ca.empty()) {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  reloader->credentials_ = grpc::experimental::TlsServerCredentials(options);
  if (!initial.bearer_tokens.empty()) {
    reloader->tokens_ = std::make_shared<TokenSet>(initial.bearer_tokens);
    reloader->credentials_->SetAuthMetadataProcessor(std::make_shared<BearerTokenProcessor>(
        reloader->tokens_, reloader->callbacks_.on_auth_failure));
  }
  {
    // What the operator's files hold now is in use: only changes count.
    absl::MutexLock lock(&reloader->mu_);
    reloader->seen_tls_ =
        absl::StrCat(initial.cert_chain_pem, "\n--\n", initial.private_key_pem, "\n--\n",
                     initial.client_ca_pem);
    if (!files.auth_token_file.empty()) {
      absl::StatusOr<std::string> tokens = ReadSecurityFile("--auth_token_file",
                                                            files.auth_token_file);
      if (tokens.ok()) reloader->seen_tokens_ = *tokens;
    }
  }
  CredentialReloader* self = reloader.get();
  reloader->thread_ = std::thread([self] {
    while (!self->stop_.WaitForNotificationWithTimeout(self->interval_)) self->CheckNow();
  });
  return reloader;
}

CredentialReloader::~CredentialReloader() {
  stop_.Notify();
  if (thread_.joinable()) thread_.join();
  // The provider may still read the copies until the server is gone; the
  // server is destroyed first (RopeServer's member order), then these go.
  if (!staging_dir_.empty()) {
    for (const char* name : {"/current", "/a/key.pem", "/a/cert.pem", "/a/ca.pem", "/b/key.pem",
                             "/b/cert.pem", "/b/ca.pem", "/a", "/b"}) {
      remove((staging_dir_ + name).c_str());
    }
    rmdir(staging_dir_.c_str());
  }
}

// Writes the set into the generation directory not in use ("a" or "b"),
// then points "current" at it with a rename, so that the provider never
// reads a key from one set and a certificate from another.
absl::Status CredentialReloader::WriteStaged(const ServerSecurity& security) {
  char target[8] = {0};
  const std::string current = staging_dir_ + "/current";
  const ssize_t n = readlink(current.c_str(), target, sizeof(target) - 1);
  const std::string next = (n > 0 && std::string(target, n) == "a") ? "b" : "a";
  const std::string dir = staging_dir_ + "/" + next;
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::InternalError(absl::StrCat("cannot make ", dir, ": ", std::strerror(errno)));
  }
  for (absl::Status s : {WriteFileExclusive(dir + "/key.pem", security.private_key_pem),
                         WriteFileExclusive(dir + "/cert.pem", security.cert_chain_pem),
                         WriteFileExclusive(dir + "/ca.pem", security.client_ca_pem)}) {
    if (!s.ok()) return s;
  }
  const std::string link = staging_dir_ + "/current.new";
  remove(link.c_str());
  if (symlink(next.c_str(), link.c_str()) != 0 || rename(link.c_str(), current.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot switch ", current, " to ", next, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

void CredentialReloader::CheckNow() {
  absl::MutexLock lock(&mu_);
  CheckTls();
  if (tokens_ != nullptr) CheckTokens();
}

void CredentialReloader::CheckTls() {
  ServerSecurityFiles tls_files = files_;
  tls_files.auth_token_file.clear();
  // Raw contents first: an unchanged set (good or bad) is not looked at again.
  std::string seen;
  for (const auto& [flag, path] : {std::pair<const char*, const std::string&>{
                                       "--tls_cert_file", tls_files.tls_cert_file},
                                   {"--tls_key_file", tls_files.tls_key_file},
                                   {"--tls_client_ca_file", tls_files.tls_client_ca_file}}) {
    if (path.empty()) {
      absl::StrAppend(&seen, "\n--\n");
      continue;
    }
    absl::StatusOr<std::string> contents = ReadSecurityFile(flag, path);
    absl::StrAppend(&seen, contents.ok() ? *contents : contents.status().ToString(), "\n--\n");
  }
  seen.resize(seen.size() - 4);  // the last separator
  if (seen == seen_tls_) return;
  seen_tls_ = seen;
  absl::StatusOr<ServerSecurity> loaded = LoadServerSecurity(tls_files);
  absl::Status status = loaded.status();
  if (loaded.ok()) status = WriteStaged(*loaded);
  if (!status.ok()) {
    if (callbacks_.on_failure) callbacks_.on_failure(ReloadedPart::kTls, status);
    return;
  }
  if (callbacks_.on_reload) callbacks_.on_reload(ReloadedPart::kTls);
}

void CredentialReloader::CheckTokens() {
  absl::StatusOr<std::string> contents = ReadSecurityFile("--auth_token_file",
                                                          files_.auth_token_file);
  const std::string seen = contents.ok() ? *contents : contents.status().ToString();
  if (seen == seen_tokens_) return;
  seen_tokens_ = seen;
  absl::StatusOr<std::vector<std::string>> tokens =
      contents.ok() ? ParseTokenFile(*contents,
                                     absl::StrCat("--auth_token_file=", files_.auth_token_file))
                    : absl::StatusOr<std::vector<std::string>>(contents.status());
  if (!tokens.ok()) {
    if (callbacks_.on_failure) callbacks_.on_failure(ReloadedPart::kTokens, tokens.status());
    return;
  }
  tokens_->Set(*std::move(tokens));
  if (callbacks_.on_reload) callbacks_.on_reload(ReloadedPart::kTokens);
}

std::string ReloadedPartName(ReloadedPart part) { return Describe(part); }

}  // namespace rope
