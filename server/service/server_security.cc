#include "server/service/server_security.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/security/auth_metadata_processor.h"

namespace rope {
namespace {

struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Free {
  void operator()(X509* cert) const { X509_free(cert); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

// OpenSSL's reason for the last failure, and the error queue emptied.
std::string OpenSslReason() {
  const unsigned long code = ERR_get_error();  // NOLINT(runtime/int): OpenSSL's type
  ERR_clear_error();
  if (code == 0) return "no PEM block found";
  const char* reason = ERR_reason_error_string(code);
  return reason != nullptr ? reason : absl::StrCat("OpenSSL error ", code);
}

BioPtr MemoryBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

absl::StatusOr<X509Ptr> FirstCertificate(const std::string& pem, absl::string_view flag) {
  BioPtr bio = MemoryBio(pem);
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": no PEM certificate (", OpenSslReason(), ")"));
  }
  return cert;
}

absl::Status CheckValidityPeriod(X509* cert, absl::string_view flag) {
  if (X509_cmp_current_time(X509_get0_notBefore(cert)) > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(flag, ": the certificate is not valid yet (notBefore is in the future)"));
  }
  if (X509_cmp_current_time(X509_get0_notAfter(cert)) < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(flag, ": the certificate has expired (notAfter is in the past)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(absl::string_view flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    const std::string where = absl::StrCat(flag, "=", path, ": ", std::strerror(error));
    if (error == ENOENT) return absl::NotFoundError(where);
    if (error == EACCES) return absl::PermissionDeniedError(where);
    return absl::InvalidArgumentError(where);
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return absl::InvalidArgumentError(absl::StrCat(flag, "=", path, ": read failed"));
  return contents.str();
}

}  // namespace

absl::StatusOr<std::string> ReadSecurityFile(absl::string_view flag, const std::string& path) {
  return ReadFile(flag, path);
}

absl::Status ValidateServerSecurity(const ServerSecurity& security) {
  if (security.cert_chain_pem.empty() != security.private_key_pem.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert_file and --tls_key_file go together: give both or neither");
  }
  if (!security.tls()) {
    if (!security.client_ca_pem.empty()) {
      return absl::InvalidArgumentError(
          "--tls_client_ca_file needs TLS: give --tls_cert_file and --tls_key_file too");
    }
    if (!security.bearer_tokens.empty()) {
      return absl::InvalidArgumentError(
          "--auth_token_file needs TLS (a bearer token sent in plaintext can be read by "
          "anyone on the path): give --tls_cert_file and --tls_key_file too");
    }
    return absl::OkStatus();
  }
  absl::StatusOr<X509Ptr> cert = FirstCertificate(security.cert_chain_pem, "--tls_cert_file");
  if (!cert.ok()) return cert.status();
  BioPtr key_bio = MemoryBio(security.private_key_pem);
  // Without a callback OpenSSL asks for a pass-phrase on the terminal (and
  // the server would hang at start); this one gives none and remembers it
  // was asked, so an encrypted key is refused with the same message with or
  // without a terminal.
  bool asked_for_passphrase = false;
  pem_password_cb* no_passphrase = [](char*, int, int, void* asked) -> int {
    *static_cast<bool*>(asked) = true;
    return 0;
  };
  PkeyPtr key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, no_passphrase, &asked_for_passphrase));
  if (key == nullptr && asked_for_passphrase) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        "--tls_key_file: the private key is encrypted (pass-phrase protected); ropeserve "
        "needs an unencrypted PEM key (openssl pkey -in KEY -out PLAIN_KEY), kept safe by "
        "file permissions or a Kubernetes Secret");
  }
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_key_file: no unencrypted PEM private key (", OpenSslReason(), ")"));
  }
  if (X509_check_private_key(cert->get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        "--tls_key_file: the key does not belong to the certificate in --tls_cert_file");
  }
  absl::Status period = CheckValidityPeriod(cert->get(), "--tls_cert_file");
  if (!period.ok()) return period;
  if (!security.client_ca_pem.empty()) {
    absl::StatusOr<X509Ptr> ca = FirstCertificate(security.client_ca_pem, "--tls_client_ca_file");
    if (!ca.ok()) return ca.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<ServerSecurity> LoadServerSecurity(const ServerSecurityFiles& files) {
  ServerSecurity security;
  // An unset flag leaves `contents` empty; a set one must name a non-empty file.
  auto read_pem = [](absl::string_view flag, const std::string& path,
                     std::string* contents) -> absl::Status {
    if (path.empty()) return absl::OkStatus();
    absl::StatusOr<std::string> read = ReadFile(flag, path);
    if (!read.ok()) return read.status();
    if (read->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(flag, "=", path, ": the file is empty"));
    }
    *contents = *std::move(read);
    return absl::OkStatus();
  };
  for (absl::Status s :
       {read_pem("--tls_cert_file", files.tls_cert_file, &security.cert_chain_pem),
        read_pem("--tls_key_file", files.tls_key_file, &security.private_key_pem),
        read_pem("--tls_client_ca_file", files.tls_client_ca_file, &security.client_ca_pem)}) {
    if (!s.ok()) return s;
  }
  if (!files.auth_token_file.empty()) {
    absl::StatusOr<std::string> read = ReadFile("--auth_token_file", files.auth_token_file);
    if (!read.ok()) return read.status();
    absl::StatusOr<std::vector<std::string>> tokens =
        ParseTokenFile(*read, absl::StrCat("--auth_token_file=", files.auth_token_file));
    if (!tokens.ok()) return tokens.status();
    security.bearer_tokens = *std::move(tokens);
  }
  absl::Status valid = ValidateServerSecurity(security);
  if (!valid.ok()) return valid;
  return security;
}

std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(
    const ServerSecurity& security, std::function<void(AuthFailure)> on_auth_failure) {
  if (!security.tls()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      security.client_ca_pem.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                     : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = security.client_ca_pem;
  options.pem_key_cert_pairs.push_back({security.private_key_pem, security.cert_chain_pem});
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::SslServerCredentials(options);
  if (!security.bearer_tokens.empty()) {
    credentials->SetAuthMetadataProcessor(std::make_shared<BearerTokenProcessor>(
        security.bearer_tokens, std::move(on_auth_failure)));
  }
  return credentials;
}

}  // namespace rope
