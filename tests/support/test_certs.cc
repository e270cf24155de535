#include "tests/support/test_certs.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"

namespace rope {
namespace test {
namespace {

absl::Status Run(const std::string& command) {
  // The output goes to a log beside the files: quiet tests, and a place to
  // look when openssl fails.
  const int rc = std::system(command.c_str());
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("`", command, "` failed (status ", rc, ")"));
  }
  return absl::OkStatus();
}

// A P-256 key and a certificate signed by the CA at ca_prefix (or
// self-signed when ca_prefix is empty, with CA:TRUE).
absl::Status MakeCert(const std::string& dir, const std::string& name, const std::string& subject,
                      const std::string& ca_prefix, const std::string& extensions) {
  const std::string prefix = absl::StrCat(dir, "/", name);
  const std::string log = absl::StrCat(" >>", dir, "/openssl.log 2>&1");
  const std::string newkey =
      "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj ";
  if (ca_prefix.empty()) {
    return Run(absl::StrCat(newkey, subject, " -x509 -days 2 -keyout ", prefix, ".key -out ",
                            prefix, ".pem -addext basicConstraints=critical,CA:TRUE", log));
  }
  absl::Status s = Run(absl::StrCat(newkey, subject, " -keyout ", prefix, ".key -out ", prefix,
                                    ".csr", log));
  if (!s.ok()) return s;
  const std::string ext_file = absl::StrCat(prefix, ".ext");
  std::ofstream(ext_file) << extensions << "\n";
  return Run(absl::StrCat("openssl x509 -req -in ", prefix, ".csr -CA ", ca_prefix,
                          ".pem -CAkey ", ca_prefix, ".key -CAcreateserial -days 2 -extfile ",
                          ext_file, " -out ", prefix, ".pem", log));
}

// Signs dir/server.csr again with fixed dates in the past: `openssl x509`
// only counts days from now, `openssl ca` takes dates (and wants a database).
absl::Status MakeExpiredServerCert(const std::string& dir) {
  const std::string db = dir + "/expired-ca-db";
  const std::string config = dir + "/expired-ca.cnf";
  std::ofstream(config) << "[ca]\ndefault_ca = test\n[test]\ndatabase = " << db
                        << "/index.txt\nnew_certs_dir = " << db << "\nserial = " << db
                        << "/serial\ndefault_md = sha256\npolicy = any\n[any]\n"
                        << "commonName = supplied\n";
  absl::Status s = Run(absl::StrCat("mkdir -p ", db, " && touch ", db, "/index.txt && echo 01 > ",
                                    db, "/serial"));
  if (!s.ok()) return s;
  return Run(absl::StrCat("openssl ca -batch -config ", config, " -cert ", dir, "/ca.pem -keyfile ",
                          dir, "/ca.key -in ", dir, "/server.csr -out ", dir,
                          "/expired_server.pem -startdate 20200101000000Z -enddate "
                          "20200131000000Z >>",
                          dir, "/openssl.log 2>&1"));
}

}  // namespace

absl::StatusOr<TestCerts> MakeTestCerts() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp",
                                     "/ropeserve-certs-XXXXXX");
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (mkdtemp(buffer.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp(", pattern, ") failed"));
  }
  TestCerts certs;
  certs.dir = buffer.data();
  const std::string& d = certs.dir;
  const std::string server_ext =
      "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth";
  const std::string client_ext = "extendedKeyUsage=clientAuth";
  for (absl::Status s : {
           MakeCert(d, "ca", "/CN=ropeserve-test-ca", "", ""),
           MakeCert(d, "server", "/CN=localhost", d + "/ca", server_ext),
           MakeCert(d, "rotated_server", "/CN=localhost-rotated", d + "/ca", server_ext),
           MakeCert(d, "client", "/CN=test-client", d + "/ca", client_ext),
           MakeCert(d, "other_ca", "/CN=unrelated-ca", "", ""),
           MakeCert(d, "other_client", "/CN=outsider", d + "/other_ca", client_ext),
           MakeExpiredServerCert(d),
       }) {
    if (!s.ok()) return s;
  }
  certs.ca_cert = d + "/ca.pem";
  certs.server_cert = d + "/server.pem";
  certs.server_key = d + "/server.key";
  certs.expired_server_cert = d + "/expired_server.pem";
  certs.rotated_server_cert = d + "/rotated_server.pem";
  certs.rotated_server_key = d + "/rotated_server.key";
  certs.client_cert = d + "/client.pem";
  certs.client_key = d + "/client.key";
  certs.other_ca_cert = d + "/other_ca.pem";
  certs.other_client_cert = d + "/other_client.pem";
  certs.other_client_key = d + "/other_client.key";
  return certs;
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

std::string WriteTestFile(const std::string& dir, const std::string& name,
                          const std::string& contents) {
  const std::string path = absl::StrCat(dir, "/", name);
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

}  // namespace test
}  // namespace rope
