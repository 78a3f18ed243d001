// h3pipe-api's certificate from the config as `h3pipe start` checks and probes it (issue #37
// item 8; common/supervisor/api_tls.h): the HTTPS probe of /readyz answers only when the server
// presents the configured certificate (a leaf that is no CA counts as a trust anchor), checked
// by the name it gives while connecting to the bind address; a server with another certificate
// gets no answer.  check_api_tls names /hosts/<i>/<field> and the file for a key readable by
// others and for a file that is no certificate.  A real httplib::SSLServer on a free port,
// certificates made with OpenSSL's library (tls_certs.h).
#include <gtest/gtest.h>
#include <httplib.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "common/supervisor/api_tls.h"
#include "common/supervisor/tls_certs.h"

namespace fs = std::filesystem;
using namespace h3pipe;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    char t[] = "/tmp/h3tlsprobe.XXXXXX";
    path = ::mkdtemp(t);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string write(const fs::path& p, const std::string& text, mode_t mode) {
  std::ofstream(p) << text;
  ::chmod(p.c_str(), mode);
  return p.string();
}

}  // namespace

TEST(ApiTlsProbe, TrustsOnlyTheConfiguredCertificateByTheNameItGives) {
  TempDir d;
  auto ca = supervisor::make_ca("probe-test-ca", 1);
  ASSERT_TRUE(ca.ok()) << ca.error().message;
  auto leaf = supervisor::issue_cert(*ca, "api.example", true, 1);
  ASSERT_TRUE(leaf.ok()) << leaf.error().message;
  auto other = supervisor::make_ca("another-operator", 1);
  ASSERT_TRUE(other.ok());
  const std::string cert = write(d.path / "cert.pem", leaf->cert, 0644);
  const std::string key = write(d.path / "key.pem", leaf->key, 0600);
  const std::string chain = write(d.path / "chain.pem", leaf->cert + ca->cert, 0644);
  const std::string wrong = write(d.path / "other.pem", other->cert, 0644);

  httplib::SSLServer srv(cert.c_str(), key.c_str());
  ASSERT_TRUE(srv.is_valid());
  srv.Get("/readyz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ready\n", "text/plain");
  });
  const int port = srv.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread t([&] { srv.listen_after_bind(); });

  // The leaf itself (not a CA): 200, though the certificate names api.example, not 127.0.0.1.
  const auto ok = supervisor::https_get_trusting("127.0.0.1", port, "/readyz", cert, 3000);
  EXPECT_EQ(ok.status, 200) << ok.error;
  EXPECT_EQ(ok.body, "ready\n");
  // The file as a chain (the leaf, then its CA), as api_tls_cert holds one: 200 too.
  EXPECT_EQ(supervisor::https_get_trusting("127.0.0.1", port, "/readyz", chain, 3000).status, 200);
  // Another certificate: the server is not the one configured, no answer.
  const auto bad = supervisor::https_get_trusting("127.0.0.1", port, "/readyz", wrong, 3000);
  EXPECT_EQ(bad.status, 0);
  EXPECT_FALSE(bad.error.empty());
  srv.stop();
  t.join();
}

TEST(ApiTlsConfig, ErrorsNameTheFieldAndTheFile) {
  TempDir d;
  auto ca = supervisor::make_ca("cfg-test", 1);
  ASSERT_TRUE(ca.ok());
  config::Cluster c;
  c.hosts.resize(2);
  c.hosts[0].name = "plain";
  c.hosts[1].name = "tls";
  c.hosts[1].api_tls_cert = write(d.path / "cert.pem", ca->cert, 0644);
  c.hosts[1].api_tls_key = write(d.path / "key.pem", ca->key, 0644);
  EXPECT_TRUE(supervisor::check_api_tls(c, "plain").ok());  // nothing configured
  auto s = supervisor::check_api_tls(c, "tls");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "/hosts/1/api_tls_key " + c.hosts[1].api_tls_key +
                                   ": the private key is readable by others (mode 0644); expected "
                                   "mode 0600 or 0400 (chmod 600 " +
                                   c.hosts[1].api_tls_key + ")");
  ::chmod(c.hosts[1].api_tls_key.c_str(), 0600);
  EXPECT_TRUE(supervisor::check_api_tls(c, "tls").ok());
  write(c.hosts[1].api_tls_cert, "not a certificate\n", 0644);
  s = supervisor::check_api_tls(c, "tls");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message,
            "/hosts/1/api_tls_cert " + c.hosts[1].api_tls_cert + ": expected a PEM certificate");
  // The flag's words for h3pipe-api --tls-key (the same function).
  ::chmod(c.hosts[1].api_tls_key.c_str(), 0640);
  s = supervisor::check_private_key_file("--tls-key", c.hosts[1].api_tls_key);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("--tls-key " + c.hosts[1].api_tls_key +
                                   ": the private key is readable by others (mode 0640)"),
            std::string::npos);
}
