// CredentialReloader: live rotation of ropeserve's certificate, key, client
// CA and token files, without a restart, a dropped connection or a failed
// call (cert-manager renews certificates every few weeks; tokens rotate).
//
// gRPC's FileWatcherCertificateProvider swaps TLS credentials atomically for
// new handshakes (connections already open keep theirs), but it reads the
// files it is given as they are, and reports nothing a server could count.
// So the provider watches private copies (in a directory of its own under
// `staging_dir`), and this class polls the operator's files every
// `interval`: a set that passes the start-up checks (ValidateServerSecurity:
// PEM that parses, a key that is the certificate's, a certificate within
// its validity period) is copied there (written aside, then renamed); a set
// that does not keeps the current credentials, and is logged and counted.
// Tokens are swapped the same way into the BearerTokenProcessor's TokenSet.
//
// Thread-safe; the polling runs on a thread of its own until destruction.
#ifndef ROPE_SERVICE_CREDENTIAL_RELOADER_H_
#define ROPE_SERVICE_CREDENTIAL_RELOADER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/security/server_credentials.h"
#include "server/service/server_security.h"
#include "server/service/token_auth.h"

namespace rope {

// What a reload covered: "tls" (certificate, key, client CA) or "tokens".
enum class ReloadedPart { kTls, kTokens };
// "TLS" or "tokens".
std::string ReloadedPartName(ReloadedPart part);

class CredentialReloader {
 public:
  struct Callbacks {
    // A changed, valid file set was taken into use.
    std::function<void(ReloadedPart)> on_reload;
    // A changed file set was refused (the current credentials stay);
    // `status` names the flag and the problem.
    std::function<void(ReloadedPart, const absl::Status& status)> on_failure;
    // Refused token calls (see BearerTokenProcessor).
    std::function<void(AuthFailure)> on_auth_failure;
  };

  // `files` name the operator's files and `initial` their validated contents
  // (LoadServerSecurity); initial.tls() must hold. INTERNAL naming
  // `staging_dir` when the private copies cannot be written.
  static absl::StatusOr<std::unique_ptr<CredentialReloader>> Start(
      const ServerSecurityFiles& files, const ServerSecurity& initial, absl::Duration interval,
      const std::string& staging_dir, Callbacks callbacks);

  ~CredentialReloader();
  CredentialReloader(const CredentialReloader&) = delete;
  CredentialReloader& operator=(const CredentialReloader&) = delete;

  // Credentials for the gRPC port that follow the reloads.
  std::shared_ptr<grpc::ServerCredentials> credentials() const { return credentials_; }

  // Checks the files now (the thread does so every `interval`).
  void CheckNow();

 private:
  CredentialReloader(const ServerSecurityFiles& files, absl::Duration interval,
                     Callbacks callbacks);
  absl::Status WriteStaged(const ServerSecurity& security);
  void CheckTls() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckTokens() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ServerSecurityFiles files_;
  const absl::Duration interval_;
  const Callbacks callbacks_;
  std::string staging_dir_;  // private copies the provider watches
  std::shared_ptr<TokenSet> tokens_;
  std::shared_ptr<grpc::ServerCredentials> credentials_;

  absl::Mutex mu_;
  // What was last seen in the operator's files (taken or refused), so that
  // an unchanged bad file is reported once, not every interval.
  std::string seen_tls_ ABSL_GUARDED_BY(mu_);
  std::string seen_tokens_ ABSL_GUARDED_BY(mu_);

  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace rope

#endif  // ROPE_SERVICE_CREDENTIAL_RELOADER_H_
