// preflight's api.tls rows (issue #37 item 8; docs/api.md, "TLS"; common/preflight/checks.h):
// h3pipe-api's own certificate from the config checked as `start` checks it (a key readable by
// others FAILs naming /hosts/<i>/api_tls_key and the file; owner-only PASSes), and the api_bind
// rule: off loopback without a certificate WARNs, loopback SKIPs.  Files made here.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "common/preflight/checks.h"
#include "common/supervisor/tls_certs.h"

namespace fs = std::filesystem;
using namespace h3pipe;

namespace {

std::vector<preflight::CheckResult> rows(const config::Cluster& c) {
  preflight::Scope s;
  for (const auto& h : c.hosts) s.checked.push_back(&h);
  preflight::Report rep;
  preflight::check_api_tls(c, s, rep);
  return rep.take();
}

}  // namespace

TEST(PreflightApiTls, CertificateAsStartChecksItAndTheBindRule) {
  char t[] = "/tmp/h3pfapitls.XXXXXX";
  const fs::path dir = ::mkdtemp(t);
  auto pem = supervisor::make_ca("api.example", 1);
  ASSERT_TRUE(pem.ok());
  const std::string cert = (dir / "cert.pem").string(), key = (dir / "key.pem").string();
  std::ofstream(cert) << pem->cert;
  std::ofstream(key) << pem->key;
  ::chmod(key.c_str(), 0644);

  config::Cluster c;
  c.hosts.resize(3);
  c.hosts[0].name = "loop";
  c.hosts[1].name = "open";
  c.hosts[1].api_bind = "0.0.0.0";
  c.hosts[2].name = "tls";
  c.hosts[2].api_bind = "0.0.0.0";
  c.hosts[2].api_tls_cert = cert;
  c.hosts[2].api_tls_key = key;
  auto r = rows(c);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].outcome, preflight::Outcome::kSkip);
  EXPECT_EQ(r[1].outcome, preflight::Outcome::kWarn);
  EXPECT_NE(r[1].detail.find("listens on 0.0.0.0 without its own certificate"), std::string::npos)
      << r[1].detail;
  EXPECT_NE(r[1].fix.find("api_tls_cert"), std::string::npos);
  EXPECT_EQ(r[2].outcome, preflight::Outcome::kFail);
  EXPECT_NE(r[2].detail.find("/hosts/2/api_tls_key " + key +
                             ": the private key is readable by others (mode 0644)"),
            std::string::npos)
      << r[2].detail;

  ::chmod(key.c_str(), 0600);  // behind its own certificate: the rule is met
  r = rows(c);
  EXPECT_EQ(r[2].outcome, preflight::Outcome::kPass) << r[2].detail;
  fs::remove_all(dir);
}
