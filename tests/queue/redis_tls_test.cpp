// Redis across hosts through the stunnel sidecars shipped in configs/redis (label redis).  The
// shipped configs are used as they are, with only ports and certificate paths substituted; the
// certificates come from a throw-away CA made here.  Proves: a worker reaches Redis through the
// TLS hop with its ACL user (and is still confined by it); plain RESP to the TLS port, a client
// certificate from another CA, no client certificate, and a server whose certificate does not
// name the expected host all get nothing.  Skips (with the reason) where stunnel4 or openssl is
// not installed (scripts/setup.sh installs them).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <fstream>
#include <regex>

#include "tests/queue/redis_acl_fixture.h"

using namespace h3pipe;
namespace fs = std::filesystem;

namespace {

bool port_open(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Replaces `key = value` lines of an stunnel config (first occurrence of each key).
std::string set_options(std::string conf, const std::map<std::string, std::string>& opts) {
  for (const auto& [k, v] : opts) {
    std::regex re("(^|\n)" + k + " = [^\n]*");
    if (v.empty())
      conf = std::regex_replace(conf, re, "$1", std::regex_constants::format_first_only);
    else
      conf = std::regex_replace(conf, re, "$1" + k + " = " + v,
                                std::regex_constants::format_first_only);
  }
  return conf;
}

class Stunnel {
 public:
  Stunnel(const fs::path& conf, const fs::path& log) {
    pid_ = ts::spawn({"stunnel4", conf.string()}, log.string());
  }
  ~Stunnel() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }

 private:
  pid_t pid_ = -1;
};

class RedisOverStunnel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ts::sh("command -v stunnel4 && command -v openssl").first != 0)
      GTEST_SKIP() << "stunnel4 or openssl is not installed (apt-get install stunnel4 openssl)";
    ASSERT_TRUE(srv.ready()) << srv.why_not_ready();
    dir = tmp.path();
    // A CA, the Redis host's certificate (named redis.h3pipe.internal), a worker's client
    // certificate, and a rogue CA with a client certificate of its own.
    std::string script = fmt::format(R"(set -e
cd {}
printf 'subjectAltName=DNS:redis.h3pipe.internal\n' > san.ext
gen_ca() {{ openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout $1.key -out $1.pem -days 1 -subj /CN=$1 2>/dev/null; }}
gen_cert() {{ openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout $1.key -out $1.csr -subj /CN=$2 2>/dev/null
  openssl x509 -req -in $1.csr -CA $3.pem -CAkey $3.key -CAcreateserial -out $1.pem -days 1 $4 2>/dev/null; }}
gen_ca ca; gen_ca rogue
gen_cert server redis.h3pipe.internal ca "-extfile san.ext"
gen_cert client worker-1 ca ""
gen_cert intruder worker-2 rogue ""
)",
                                     dir.string());
    std::ofstream(dir / "certs.sh") << script;
    auto [rc, out] = ts::sh("sh " + (dir / "certs.sh").string() + " 2>&1");
    ASSERT_EQ(rc, 0) << out;
    tls_port = supervisor::free_loopback_port();
    write_conf("server.conf", slurp(ts::source("configs/redis/stunnel-server.conf")),
               {{"accept", fmt::format("127.0.0.1:{}", tls_port)},
                {"connect", fmt::format("127.0.0.1:{}", srv.port())},
                {"cert", (dir / "server.pem").string()},
                {"key", (dir / "server.key").string()},
                {"CAfile", (dir / "ca.pem").string()}});
    server = std::make_unique<Stunnel>(dir / "server.conf", dir / "server.log");
    ASSERT_TRUE(ts::wait_for([&] { return port_open(tls_port); }, 10)) << slurp(dir / "server.log");
  }

  void write_conf(const std::string& name, const std::string& text,
                  const std::map<std::string, std::string>& opts) {
    std::ofstream(dir / name) << set_options(text, opts);
  }

  // Starts a client sidecar from the shipped client config; returns its local port.
  int client(const std::string& name, const std::string& cert, const std::string& ca = "ca",
             const std::string& check_host = "redis.h3pipe.internal") {
    int port = supervisor::free_loopback_port();
    write_conf(name + ".conf", slurp(ts::source("configs/redis/stunnel-client.conf")),
               {{"accept", fmt::format("127.0.0.1:{}", port)},
                {"connect", fmt::format("127.0.0.1:{}", tls_port)},
                {"CAfile", (dir / (ca + ".pem")).string()},
                {"checkHost", check_host},
                {"cert", cert.empty() ? "" : (dir / (cert + ".pem")).string()},
                {"key", cert.empty() ? "" : (dir / (cert + ".key")).string()}});
    clients.push_back(std::make_unique<Stunnel>(dir / (name + ".conf"), dir / (name + ".log")));
    EXPECT_TRUE(ts::wait_for([&] { return port_open(port); }, 10)) << slurp(dir / (name + ".log"));
    return port;
  }

  queue::RedisAddress via(int port, const std::string& who) {
    auto a = srv.address(who);
    a.port = port;
    a.timeout_ms = 3000;
    return a;
  }

  ts::AclRedis srv;
  ts::TempDir tmp;
  fs::path dir;
  int tls_port = 0;
  std::unique_ptr<Stunnel> server;
  std::vector<std::unique_ptr<Stunnel>> clients;
};

TEST_F(RedisOverStunnel, WorkersReachRedisThroughTheTlsHopWithTheirAclUser) {
  int port = client("worker", "client");
  auto r = queue::Redis::connect(via(port, "encoder"));
  ASSERT_TRUE(r.ok()) << r.error().message << "\n"
                      << slurp(dir / "worker.log") << slurp(dir / "server.log");
  EXPECT_EQ(queue::reply_str((*r)->command({"PING"})->get()), "PONG");
  auto id = (*r)->command({"XADD", "h3pipe:stream:encode", "*", "task", "over-tls"});
  ASSERT_TRUE(id.ok()) << id.error().message;
  // TLS authenticates the host; the ACL still confines the service.
  auto flush = (*r)->command({"FLUSHALL"});
  ASSERT_FALSE(flush.ok());
  EXPECT_NE(flush.error().message.find("NOPERM"), std::string::npos);
  auto admin = srv.connect("admin");
  ASSERT_TRUE(admin.ok());
  EXPECT_EQ(queue::reply_int((*admin)->command({"XLEN", "h3pipe:stream:encode"})->get()), 1);
}

TEST_F(RedisOverStunnel, PlainClientsForeignCertificatesAndWrongServersGetNothing) {
  auto refused = [&](int port, const char* what) {
    auto r = queue::Redis::connect(via(port, "encoder"));
    if (r.ok()) {
      auto p = (*r)->command({"PING"});
      EXPECT_FALSE(p.ok()) << what << ": PING answered through " << port;
    } else {
      std::fprintf(stderr, "refused as expected (%s): %s\n", what, r.error().message.c_str());
    }
  };
  refused(tls_port, "plain RESP to the TLS port");
  refused(client("intruder", "intruder"), "client certificate from another CA");
  refused(client("anonymous", ""), "no client certificate");
  refused(client("wrong-server", "client", "ca", "other.h3pipe.internal"),
          "server certificate for another name");
  refused(client("rogue-trust", "client", "rogue"), "server certificate from an untrusted CA");
  auto admin = srv.connect("admin");
  ASSERT_TRUE(admin.ok());
  EXPECT_EQ(queue::reply_int((*admin)->command({"DBSIZE"})->get()), 0);
}

}  // namespace
