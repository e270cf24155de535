// Throw-away PKI for the TLS tests, made with the openssl CLI at test time
// (no key is ever committed): a CA with a server certificate for localhost /
// 127.0.0.1 (and an expired one for the same key) and a client
// certificate, and a second, unrelated CA with its
// own client certificate (which the first CA's server must refuse).
#ifndef ROPE_TESTS_SUPPORT_TEST_CERTS_H_
#define ROPE_TESTS_SUPPORT_TEST_CERTS_H_

#include <string>

#include "absl/status/statusor.h"

namespace rope {
namespace test {

// Paths of PEM files under `dir`.
struct TestCerts {
  std::string dir;
  std::string ca_cert;
  std::string server_cert;
  std::string server_key;
  // server_key's certificate, valid only in January 2020.
  std::string expired_server_cert;
  // A second server certificate and key for the same names from the same CA
  // (subject CN=localhost-rotated): what a rotation brings.
  std::string rotated_server_cert;
  std::string rotated_server_key;
  std::string client_cert;
  std::string client_key;
  std::string other_ca_cert;
  std::string other_client_cert;
  std::string other_client_key;
};

// Creates a fresh directory under $TMPDIR (or /tmp) and the files in it.
// INTERNAL naming the openssl command that failed.
absl::StatusOr<TestCerts> MakeTestCerts();

// Reads a whole file; empty when it cannot be read.
std::string ReadWholeFile(const std::string& path);
// Writes `contents` to dir/name and returns the path.
std::string WriteTestFile(const std::string& dir, const std::string& name,
                          const std::string& contents);

}  // namespace test
}  // namespace rope

#endif  // ROPE_TESTS_SUPPORT_TEST_CERTS_H_
