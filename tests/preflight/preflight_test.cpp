// preflight against real faults: a real redis-server (ACL user, password, AOF), real readiness
// endpoints (metrics::HealthServer), real files, a tmpfs filled up (root only), and the fake NVML
// from tests/gpu.  Each injected fault must fail and name its check.
#include "common/preflight/preflight.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/mount.h>
#include <sys/socket.h>

#include <atomic>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "common/metrics/metrics.h"
#include "common/preflight/http_get.h"
#include "common/queue/keys.h"
#include "common/queue/server.h"
#include "common/worker/heartbeat.h"
#include "tests/support/redis_server.h"

namespace h3pipe::preflight {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

constexpr const char* kPassword = "s3cret-h3pipe";

// A tiny HTTP server answering every request with one fixed reply (ComfyUI stand-in).
class FixedHttp {
 public:
  FixedHttp(int status, std::string body) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 8);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    std::string resp =
        fmt::format("HTTP/1.1 {} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}", status,
                    body.size(), body);
    thread_ = std::thread([this, resp] {
      while (!stop_) {
        int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        char buf[1024];
        (void)::recv(c, buf, sizeof buf, 0);
        (void)::send(c, resp.data(), resp.size(), MSG_NOSIGNAL);
        ::close(c);
      }
    });
  }
  ~FixedHttp() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  int port() const { return port_; }

 private:
  int fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class Preflight : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_ / "redis");
    std::ofstream(dir_ / "redis.pass") << kPassword << "\n";
    queue::RedisAddress as;
    as.user = "h3pipe";
    as.password = kPassword;
    redis_ = std::make_unique<test_support::RedisServer>(test_support::RedisOptions{
        .conf_lines =
            std::vector<std::string>{
                "appendonly yes", "maxmemory-policy noeviction", "user default off",
                std::string("user h3pipe on >") + kPassword + " ~h3pipe:* &* +@all"},
        .aof = std::nullopt,
        .dir = dir_ / "redis",
        .probe_as = as});
    ASSERT_TRUE(redis_->ok()) << "redis-server did not start";
  }
  void TearDown() override { redis_.reset(); }

  // One host "a" (sampler + decoder), optionally a second host "b".
  json base_config(bool two_hosts = false) {
    json j = {
        {"name", "pf"},
        {"state_dir", (dir_ / "state").string()},
        {"redis",
         {{"host", "127.0.0.1"},
          {"port", redis_->port()},
          {"user", "h3pipe"},
          {"password_file", (dir_ / "redis.pass").string()},
          {"embedded", false}}},
        {"hosts", json::array({{{"name", "a"}, {"address", "127.0.0.1"}, {"bind", "127.0.0.1"}}})},
        {"pools",
         json::array({{{"name", "s0"}, {"host", "a"}, {"stage", "sample"}, {"gpus", {0}}},
                      {{"name", "d0"}, {"host", two_hosts ? "b" : "a"}, {"stage", "decode"}},
                      {{"name", "e0"}, {"host", "a"}, {"stage", "encode"}}})}};
    if (two_hosts)
      j["hosts"].push_back({{"name", "b"}, {"address", "192.0.2.1"}, {"bind", "192.0.2.1"}});
    return j;
  }
  config::Cluster load(const json& j) {
    auto c = config::parse(j, dir_);
    EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message);
    return c.ok() ? *c : config::Cluster{};
  }
  // Starts a readiness endpoint for each expected service of host `host` and writes its run file.
  void start_services(const config::Cluster& c, const std::string& host, bool ready = true) {
    fs::create_directories(c.state_dir / "run");
    for (const auto& e : expected_services(c)) {
      if (e.host != host) continue;
      auto h = metrics::HealthServer::start("127.0.0.1", 0);
      ASSERT_TRUE(h.ok());
      (*h)->set_ready(ready);
      std::ofstream(run_file_path(c, e.service, e.instance)) << json{
          {"pid", ::getpid()},
          {"metrics_port", 0},
          {"health_port", (*h)->port()},
          {"host", host}}.dump();
      health_.push_back(std::move(*h));
    }
  }
  Options opts(const std::string& host = "") {
    Options o;
    o.host_filter = host;
    o.nvml_library = "libnvidia-ml-h3pipe-absent.so.1";
    o.timeout = 1000ms;
    o.is_local = [](const config::Host& h) { return h.name == "a"; };
    return o;
  }
  struct Run {
    int rc;
    std::string text;
    std::vector<CheckResult> rows;
  };
  Run run(const config::Cluster& c, const Options& o) {
    std::ostringstream out;
    int rc = preflight_main(c, o, out);
    if (std::getenv("H3PIPE_TEST_PRINT")) std::cout << out.str() << "\n";
    return {rc, out.str(), run_checks(c, o)};
  }
  static const CheckResult* row(const Run& r, const std::string& check, Outcome o) {
    for (const auto& x : r.rows)
      if (x.check == check && x.outcome == o) return &x;
    return nullptr;
  }

  test_support::TempDir tmp_{"h3pipe_preflight"};  // removed after redis_ stopped
  fs::path dir_ = tmp_.path();
  std::unique_ptr<test_support::RedisServer> redis_;
  std::vector<std::unique_ptr<metrics::HealthServer>> health_;
};

TEST_F(Preflight, EverythingUpPasses) {
  auto c = load(base_config());
  start_services(c, "a");
  auto r = run(c, opts());
  EXPECT_EQ(r.rc, 0) << r.text;
  for (const char* check :
       {"redis.reachable", "redis.auth", "redis.version", "redis.aof", "redis.eviction",
        "clock.skew", "service.ready", "gpu.visible", "disk.free"})
    EXPECT_NE(row(r, check, Outcome::kPass), nullptr) << check << "\n" << r.text;
  EXPECT_NE(r.text.find("preflight: "), std::string::npos);
  EXPECT_NE(r.text.find("ready"), std::string::npos);
}

TEST_F(Preflight, RedisDown) {
  auto c = load(base_config());
  start_services(c, "a");
  redis_->stop();
  auto r = run(c, opts());
  EXPECT_EQ(r.rc, 1);
  ASSERT_NE(row(r, "redis.reachable", Outcome::kFail), nullptr) << r.text;
  EXPECT_NE(r.text.find("FAIL    redis.reachable"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("What to do:"), std::string::npos);
  EXPECT_NE(row(r, "clock.skew", Outcome::kSkip), nullptr);
}

TEST_F(Preflight, WrongPassword) {
  std::ofstream(dir_ / "redis.pass") << "not-the-password\n";
  auto c = load(base_config());
  start_services(c, "a");
  auto r = run(c, opts());
  EXPECT_EQ(r.rc, 1);
  const CheckResult* f = row(r, "redis.auth", Outcome::kFail);
  ASSERT_NE(f, nullptr) << r.text;
  EXPECT_NE(f->detail.find("user h3pipe"), std::string::npos) << f->detail;
  EXPECT_EQ(f->detail.find("not-the-password"), std::string::npos) << "the password leaked";
  EXPECT_NE(row(r, "redis.reachable", Outcome::kPass), nullptr);
}

TEST_F(Preflight, MissingPasswordFile) {
  auto j = base_config();
  j["redis"]["password_file"] = (dir_ / "nope.pass").string();
  auto r = run(load(j), opts());
  EXPECT_EQ(r.rc, 1);
  ASSERT_NE(row(r, "redis.auth", Outcome::kFail), nullptr) << r.text;
}

TEST_F(Preflight, NoPasswordConfiguredButRequired) {
  auto j = base_config();
  j["redis"].erase("password_file");
  j["redis"].erase("user");
  auto r = run(load(j), opts());
  EXPECT_EQ(r.rc, 1);
  const CheckResult* f = row(r, "redis.auth", Outcome::kFail);
  ASSERT_NE(f, nullptr) << r.text;
  EXPECT_NE(f->fix.find("password_file"), std::string::npos) << f->fix;
}

// A Redis that takes commands without a password: a warning on one machine, a failure when the
// cluster spans hosts (issue #14; it used to say PASS "no password configured").
TEST_F(Preflight, NoPasswordAtAllWarnsOnOneHostAndFailsAcrossHosts) {
  test_support::RedisServer open_redis(
      test_support::RedisOptions{.aof = std::nullopt, .dir = dir_ / "open"});
  ASSERT_TRUE(open_redis.ok());
  for (bool two_hosts : {false, true}) {
    auto j = base_config(two_hosts);
    j["redis"].erase("password_file");
    j["redis"].erase("user");
    j["redis"]["port"] = open_redis.port();
    auto r = run(load(j), opts());
    const CheckResult* row_auth = row(r, "redis.auth", two_hosts ? Outcome::kFail : Outcome::kWarn);
    ASSERT_NE(row_auth, nullptr) << r.text;
    EXPECT_NE(row_auth->detail.find("no password"), std::string::npos) << row_auth->detail;
    EXPECT_EQ(row(r, "redis.auth", Outcome::kPass), nullptr) << r.text;
  }
}

// redis.tls (issue #34 P4): plain RESP to a Redis on another machine fails unless the config opts
// out with /redis/allow_plaintext (then a warning); a Redis on this machine passes; a managed Redis
// (the stunnel hop h3pipe runs) passes when this host's certificate files are there.
TEST_F(Preflight, PlainRedisAcrossHostsFailsUnlessAllowed) {
  auto j = base_config(true);
  auto r = run(load(j), opts());
  ASSERT_NE(row(r, "redis.tls", Outcome::kPass), nullptr) << r.text;
  j["redis"]["host"] = "192.0.2.1";  // host b's address: another machine
  r = run(load(j), opts());
  const CheckResult* f = row(r, "redis.tls", Outcome::kFail);
  ASSERT_NE(f, nullptr) << r.text;
  EXPECT_NE(f->detail.find("plain RESP to 192.0.2.1"), std::string::npos) << f->detail;
  EXPECT_NE(f->fix.find("/redis/allow_plaintext"), std::string::npos) << f->fix;
  EXPECT_NE(f->fix.find("/redis/managed"), std::string::npos) << f->fix;
  EXPECT_EQ(r.rc, 1);
  j["redis"]["allow_plaintext"] = true;
  r = run(load(j), opts());
  ASSERT_NE(row(r, "redis.tls", Outcome::kWarn), nullptr) << r.text;
  EXPECT_EQ(row(r, "redis.tls", Outcome::kFail), nullptr) << r.text;
  // Managed: host a needs the CA and its own client pair in credentials_dir.
  j["redis"].erase("allow_plaintext");
  j["redis"].erase("password_file");
  j["redis"].erase("user");
  j["redis"]["managed"] = true;
  j["redis"]["port"] = 6379;
  j["redis"]["credentials_dir"] = (dir_ / "creds").string();
  fs::create_directories(dir_ / "creds");
  r = run(load(j), opts());
  f = row(r, "redis.tls", Outcome::kFail);
  ASSERT_NE(f, nullptr) << r.text;
  EXPECT_NE(f->detail.find((dir_ / "creds" / "redis-client-a.pem").string()), std::string::npos)
      << f->detail;
  EXPECT_NE(f->fix.find("credentials export --host"), std::string::npos) << f->fix;
  for (const char* n : {"redis-ca.pem", "redis-client-a.pem", "redis-client-a.key"})
    std::ofstream(dir_ / "creds" / n) << "x\n";
  r = run(load(j), opts());
  EXPECT_NE(row(r, "redis.tls", Outcome::kPass), nullptr) << r.text;
}

TEST_F(Preflight, ServiceNotReady) {
  auto c = load(base_config());
  start_services(c, "a", /*ready=*/false);
  auto r = run(c, opts());
  EXPECT_EQ(r.rc, 1);
  const CheckResult* f = row(r, "service.ready", Outcome::kFail);
  ASSERT_NE(f, nullptr) << r.text;
  EXPECT_NE(f->detail.find("503"), std::string::npos) << f->detail;
}

TEST_F(Preflight, ServiceNotStartedOrStale) {
  auto c = load(base_config());
  auto r = run(c, opts());
  const CheckResult* f = row(r, "service.ready", Outcome::kFail);
  ASSERT_NE(f, nullptr) << r.text;
  EXPECT_NE(f->detail.find("no run file"), std::string::npos) << f->detail;
  // A run file whose port no longer answers.
  fs::create_directories(c.state_dir / "run");
  for (const auto& e : expected_services(c))
    std::ofstream(run_file_path(c, e.service, e.instance)) << json{
        {"pid", 1},
        {"metrics_port", 1},
        {"health_port", test_support::free_tcp_port()},
        {"host", "a"}}.dump();
  r = run(c, opts());
  f = row(r, "service.ready", Outcome::kFail);
  ASSERT_NE(f, nullptr) << r.text;
  EXPECT_NE(f->detail.find("no answer"), std::string::npos) << f->detail;
}

// #34 P12: preflight on host a checks host b's services by their heartbeats in Redis (Redis's
// clock): none yet is a warning, a fresh one passes, one 30 s old is "dead" and fails.
TEST_F(Preflight, OtherHostsPoolsByTheirHeartbeats) {
  auto c = load(base_config(/*two_hosts=*/true));
  start_services(c, "a");
  auto r = run(c, opts("a"));
  const CheckResult* w = row(r, "service.heartbeat", Outcome::kWarn);
  ASSERT_NE(w, nullptr) << r.text;
  EXPECT_EQ(w->target, "d0@b");
  auto conn = queue::Redis::connect({"127.0.0.1", redis_->port(), "h3pipe", kPassword});
  ASSERT_TRUE(conn.ok()) << conn.error().message;
  auto now = queue::server_time_s(**conn);
  ASSERT_TRUE(now.ok());
  auto beat = [&](double age_s) {
    pb::Heartbeat hb;
    hb.set_pool("d0");
    hb.set_host("b");
    hb.set_service("decoder");
    hb.set_unix_ms(static_cast<std::int64_t>((*now - age_s) * 1000));
    ASSERT_TRUE((*conn)->command({"HSET", keys::pools(), "d0", worker::encode_heartbeat(hb)}).ok());
  };
  beat(0.2);
  r = run(c, opts("a"));
  const CheckResult* p = row(r, "service.heartbeat", Outcome::kPass);
  ASSERT_NE(p, nullptr) << r.text;
  EXPECT_NE(p->detail.find("live: heartbeat"), std::string::npos) << p->detail;
  beat(30);
  r = run(c, opts("a"));
  EXPECT_EQ(r.rc, 1) << r.text;
  const CheckResult* f = row(r, "service.heartbeat", Outcome::kFail);
  ASSERT_NE(f, nullptr) << r.text;
  EXPECT_NE(f->detail.find("dead: no heartbeat for 30 s"), std::string::npos) << f->detail;
  EXPECT_NE(r.text.find("NOT READY"), std::string::npos);
}

TEST_F(Preflight, MissingKeyFile) {
  auto j = base_config(/*two_hosts=*/true);
  std::ofstream(dir_ / "a.key") << "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\n";
  fs::permissions(dir_ / "a.key", fs::perms::owner_read | fs::perms::owner_write);
  j["hosts"][0]["transfer_public_key_file"] = (dir_ / "a.pub").string();  // missing
  j["hosts"][0]["transfer_secret_key_file"] = (dir_ / "a.key").string();
  auto c = load(j);
  start_services(c, "a");
  auto r = run(c, opts("a"));
  EXPECT_EQ(r.rc, 1);
  const CheckResult* f = row(r, "curve.keys", Outcome::kFail);
  ASSERT_NE(f, nullptr) << r.text;
  EXPECT_NE(f->target.find("transfer_public_key_file"), std::string::npos);
  EXPECT_NE(f->fix.find("keygen"), std::string::npos);
  EXPECT_NE(row(r, "curve.keys", Outcome::kPass), nullptr) << "the secret key exists";
  // Host b is another machine: skipped with the command to run there.
  bool skipped_b = false;
  for (const auto& x : r.rows)
    skipped_b |= x.check == "service.ready" && x.outcome == Outcome::kSkip &&
                 x.target.find("@b") != std::string::npos;
  EXPECT_TRUE(skipped_b) << r.text;
}

TEST_F(Preflight, SecretKeyReadableByOthersWarns) {
  auto j = base_config(true);
  std::ofstream(dir_ / "a.pub") << "pub\n";
  std::ofstream(dir_ / "a.key") << "sec\n";
  fs::permissions(dir_ / "a.key", fs::perms::owner_read | fs::perms::others_read);
  j["hosts"][0]["transfer_public_key_file"] = (dir_ / "a.pub").string();
  j["hosts"][0]["transfer_secret_key_file"] = (dir_ / "a.key").string();
  auto r = run(load(j), opts("a"));
  EXPECT_NE(row(r, "curve.keys", Outcome::kWarn), nullptr) << r.text;
}

// #34 P15: besides its own pair, a host needs the public key of every peer it talks to over
// CURVE: the sender (a) its receiver's (b), the receiver (b) its sender's (a).
constexpr const char* kPub = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID";
constexpr const char* kSec = "D:)Q[IlAW!ahhC2ac:9*A}h:p?([4%wOTJ%JR%cs";

TEST_F(Preflight, PeerPublicKeyOfTheReceiverIsChecked) {
  auto j = base_config(/*two_hosts=*/true);
  std::ofstream(dir_ / "a.pub") << kPub << "\n";
  std::ofstream(dir_ / "a.key") << kSec << "\n";
  fs::permissions(dir_ / "a.key", fs::perms::owner_read | fs::perms::owner_write);
  j["hosts"][0]["transfer_public_key_file"] = (dir_ / "a.pub").string();
  j["hosts"][0]["transfer_secret_key_file"] = (dir_ / "a.key").string();
  auto peer_rows = [](const Run& r, Outcome o) {
    std::vector<const CheckResult*> v;
    for (const auto& x : r.rows)
      if (x.check == "curve.keys" && x.outcome == o &&
          x.target == "a peer b transfer_public_key_file")
        v.push_back(&x);
    return v;
  };
  // b names no public key: a's sender could not authenticate b's receiver.
  auto r = run(load(j), opts("a"));
  EXPECT_EQ(r.rc, 1);
  auto f = peer_rows(r, Outcome::kFail);
  ASSERT_EQ(f.size(), 1u) << r.text;
  EXPECT_NE(f[0]->detail.find("/hosts/1/transfer_public_key_file"), std::string::npos)
      << f[0]->detail;
  EXPECT_NE(f[0]->fix.find("h3pipe keygen --dir keys --name b"), std::string::npos) << f[0]->fix;
  EXPECT_NE(f[0]->fix.find("keys/b.pub"), std::string::npos) << f[0]->fix;
  EXPECT_NE(r.text.find("a peer b transfer_public_key_file"), std::string::npos) << r.text;
  // Named but not copied to this host.
  j["hosts"][1]["transfer_public_key_file"] = (dir_ / "b.pub").string();
  r = run(load(j), opts("a"));
  f = peer_rows(r, Outcome::kFail);
  ASSERT_EQ(f.size(), 1u) << r.text;
  EXPECT_NE(f[0]->detail.find((dir_ / "b.pub").string()), std::string::npos) << f[0]->detail;
  // Not a Z85 key.
  std::ofstream(dir_ / "b.pub") << "pub\n";
  r = run(load(j), opts("a"));
  f = peer_rows(r, Outcome::kFail);
  ASSERT_EQ(f.size(), 1u) << r.text;
  EXPECT_NE(f[0]->detail.find("Z85"), std::string::npos) << f[0]->detail;
  // A real key: passes, and no curve.keys row fails.
  std::ofstream(dir_ / "b.pub", std::ios::trunc) << kPub << "\n";
  r = run(load(j), opts("a"));
  EXPECT_TRUE(peer_rows(r, Outcome::kFail).empty()) << r.text;
  EXPECT_EQ(peer_rows(r, Outcome::kPass).size(), 1u) << r.text;
  EXPECT_EQ(row(r, "curve.keys", Outcome::kFail), nullptr) << r.text;
}

TEST_F(Preflight, PeerPublicKeyOfTheSenderIsChecked) {
  auto j = base_config(/*two_hosts=*/true);
  std::ofstream(dir_ / "b.pub") << kPub << "\n";
  std::ofstream(dir_ / "b.key") << kSec << "\n";
  fs::permissions(dir_ / "b.key", fs::perms::owner_read | fs::perms::owner_write);
  j["hosts"][1]["transfer_public_key_file"] = (dir_ / "b.pub").string();
  j["hosts"][1]["transfer_secret_key_file"] = (dir_ / "b.key").string();
  j["hosts"][0]["transfer_public_key_file"] = (dir_ / "a.pub").string();  // not copied here
  auto o = opts("b");
  o.is_local = [](const config::Host& h) { return h.name == "b"; };
  auto r = run(load(j), o);
  EXPECT_EQ(r.rc, 1);
  const CheckResult* f = row(r, "curve.keys", Outcome::kFail);
  ASSERT_NE(f, nullptr) << r.text;
  EXPECT_EQ(f->target, "b peer a transfer_public_key_file") << r.text;
  EXPECT_NE(f->detail.find("admits its sender"), std::string::npos) << f->detail;
  EXPECT_NE(f->fix.find("h3pipe keygen --dir keys --name a"), std::string::npos) << f->fix;
  std::ofstream(dir_ / "a.pub") << kPub << "\n";
  r = run(load(j), o);
  EXPECT_EQ(row(r, "curve.keys", Outcome::kFail), nullptr) << r.text;
}

TEST_F(Preflight, UnknownHostFilter) {
  auto r = run(load(base_config()), opts("zzz"));
  EXPECT_EQ(r.rc, 1);
  ASSERT_NE(row(r, "config.host", Outcome::kFail), nullptr) << r.text;
}

TEST_F(Preflight, ClockSkewBeyondThreshold) {
  auto c = load(base_config());
  auto o = opts();
  o.max_clock_skew_s = -1;  // any measurement exceeds it: exercises the failing branch
  auto r = run(c, o);
  ASSERT_NE(row(r, "clock.skew", Outcome::kFail), nullptr) << r.text;
}

TEST_F(Preflight, AofOffOnExternalRedisFails) {
  queue::RedisAddress as;
  as.port = redis_->port();
  as.user = "h3pipe";
  as.password = kPassword;
  auto conn = queue::Redis::connect(as);
  ASSERT_TRUE(conn.ok());
  // The h3pipe user may not CONFIG (+@all includes it here, as the test ACL is broad).
  ASSERT_TRUE((*conn)->command({"CONFIG", "SET", "appendonly", "no"}).ok());
  auto r = run(load(base_config()), opts());
  ASSERT_NE(row(r, "redis.aof", Outcome::kFail), nullptr) << r.text;
}

TEST_F(Preflight, GpusSeenVersusConfig) {
  ::setenv("FAKE_NVML_DEVICES", "2", 1);
  auto j = base_config();
  j["pools"][0]["gpus"] = {0, 1};
  j["stages"]["sample"]["runtime"] = {{"name", "builtin"}};
  auto o = opts();
  o.nvml_library = H3PIPE_FAKE_NVML;
  o.nvidia_visible_devices = "";
  auto r = run(load(j), o);
  const CheckResult* p = row(r, "gpu.visible", Outcome::kPass);
  ASSERT_NE(p, nullptr) << r.text;
  EXPECT_NE(p->detail.find("Tesla T10 x2"), std::string::npos) << p->detail;

  j["pools"][0]["gpus"] = {0, 1, 2, 3};
  r = run(load(j), o);
  const CheckResult* f = row(r, "gpu.visible", Outcome::kFail);
  ASSERT_NE(f, nullptr) << r.text;
  EXPECT_NE(f->detail.find("2,3 are not visible"), std::string::npos) << f->detail;

  // No driver at all: builtin falls back to CPU (warning), comfyui cannot (failure).
  o.nvml_library = "libnvidia-ml-h3pipe-absent.so.1";
  j["pools"][0]["gpus"] = {0};
  r = run(load(j), o);
  EXPECT_NE(row(r, "gpu.visible", Outcome::kWarn), nullptr) << r.text;
  j["stages"]["sample"]["runtime"] = {{"name", "comfyui"},
                                      {"settings", {{"url", "http://127.0.0.1:1"}}}};
  r = run(load(j), o);
  EXPECT_NE(row(r, "gpu.visible", Outcome::kFail), nullptr) << r.text;
}

TEST_F(Preflight, ComfyUiEndpoints) {
  FixedHttp ok(200,
               R"({"system": {"comfyui_version": "0.34.0"}, "devices": [{"name": "cuda:0"}]})");
  FixedHttp broken(500, "oops");
  auto j = base_config();
  j["pools"][1]["runtime"] = {
      {"name", "comfyui"}, {"settings", {{"url", fmt::format("http://127.0.0.1:{}/", ok.port())}}}};
  auto r = run(load(j), opts());
  const CheckResult* p = row(r, "comfyui.up", Outcome::kPass);
  ASSERT_NE(p, nullptr) << r.text;
  EXPECT_NE(p->detail.find("0.34.0"), std::string::npos) << p->detail;

  j["pools"][1]["runtime"]["settings"]["url"] = fmt::format("http://127.0.0.1:{}", broken.port());
  r = run(load(j), opts());
  ASSERT_NE(row(r, "comfyui.up", Outcome::kFail), nullptr) << r.text;
  j["pools"][1]["runtime"]["settings"]["url"] =
      fmt::format("http://127.0.0.1:{}", test_support::free_tcp_port());
  r = run(load(j), opts());
  ASSERT_NE(row(r, "comfyui.up", Outcome::kFail), nullptr) << r.text;
}

TEST_F(Preflight, DiskFull) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a tmpfs needs root";
  fs::path mnt = dir_ / "small";
  fs::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=1m") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  struct Unmount {
    fs::path p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount{mnt};
  auto j = base_config();
  j["artifact_root"] = (mnt / "artifacts").string();
  auto c = load(j);
  auto r = run(c, opts());
  const CheckResult* p = nullptr;
  for (const auto& x : r.rows)
    if (x.check == "disk.free" && x.target == c.artifact_root.string()) p = &x;
  ASSERT_NE(p, nullptr) << r.text;
  EXPECT_EQ(p->outcome, Outcome::kPass) << r.text;  // empty 1 MiB tmpfs: above 5 %
  {
    std::ofstream fill(mnt / "fill", std::ios::binary);
    std::string block(4096, 'x');
    while (fill.write(block.data(), block.size())) {
    }
  }
  r = run(c, opts());
  EXPECT_EQ(r.rc, 1);
  const CheckResult* f = row(r, "disk.free", Outcome::kFail);
  ASSERT_NE(f, nullptr) << r.text;
  EXPECT_EQ(f->target, c.artifact_root.string());
  EXPECT_NE(r.text.find("FAIL    disk.free"), std::string::npos);
}

TEST_F(Preflight, EmbeddedRedisPortFromRunFile) {
  auto j = base_config();
  j["redis"]["port"] = 0;
  j["redis"]["embedded"] = true;
  auto c = load(j);
  auto r = run(c, opts());
  const CheckResult* f = row(r, "redis.reachable", Outcome::kFail);
  ASSERT_NE(f, nullptr) << r.text;
  EXPECT_NE(f->detail.find("stack.json"), std::string::npos);
  fs::create_directories(c.state_dir);
  std::ofstream(c.state_dir / "stack.json")
      << json{{"redis", {{"host", "127.0.0.1"}, {"port", redis_->port()}}}}.dump();
  r = run(c, opts());
  EXPECT_NE(row(r, "redis.reachable", Outcome::kPass), nullptr) << r.text;
}

TEST(HttpGet, ParsesUrls) {
  auto u = parse_url("http://10.0.0.241:8192/system_stats");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "10.0.0.241");
  EXPECT_EQ(u->port, 8192);
  EXPECT_EQ(u->path, "/system_stats");
  EXPECT_EQ(parse_url("http://node241")->port, 80);
  EXPECT_EQ(parse_url("http://[::1]:9/x")->host, "::1");
  EXPECT_FALSE(parse_url("https://x").ok());
  EXPECT_FALSE(parse_url("http://x:99999/").ok());
}

}  // namespace
}  // namespace h3pipe::preflight
