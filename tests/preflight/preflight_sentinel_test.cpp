// preflight behind Sentinel against real processes: a primary and a replica (redis-server, ACL
// user, password) and three redis-sentinel processes (requirepass, quorum 2) on free ports.  Each
// injected fault (a wrong master name, a wrong or missing Sentinel password, too few replicas, a
// Sentinel down, the quorum lost, the replica gone) must fail and name its check and the address.
// Skipped without /usr/bin/redis-sentinel.
#include <gtest/gtest.h>

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "common/preflight/preflight.h"
#include "common/queue/reply.h"
#include "tests/support/redis_server.h"

namespace h3pipe::preflight {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

constexpr const char* kSentinelBin = "/usr/bin/redis-sentinel";
constexpr const char* kPassword = "s3cret-primary";
constexpr const char* kSentinelPassword = "s3cret-sentinel";
constexpr const char* kMaster = "h3";

using test_support::wait_for;

class Sentinel {
 public:
  Sentinel(const fs::path& dir, int primary_port) {
    fs::create_directories(dir);
    for (int attempt = 0; attempt < 5 && pid_ <= 0; ++attempt) {
      port_ = test_support::free_tcp_port();
      const auto conf = dir / "sentinel.conf";
      {
        std::ofstream c(conf);
        c << "port " << port_ << "\nbind 127.0.0.1\ndir " << dir.string() << "\nlogfile "
          << (dir / "sentinel.log").string() << "\nrequirepass " << kSentinelPassword << "\n"
          << "sentinel monitor " << kMaster << " 127.0.0.1 " << primary_port << " 2\n"
          << "sentinel auth-user " << kMaster << " h3pipe\nsentinel auth-pass " << kMaster << " "
          << kPassword << "\nsentinel down-after-milliseconds " << kMaster << " 1000\n"
          << "sentinel failover-timeout " << kMaster << " 60000\n";
      }
      pid_t pid = test_support::spawn({kSentinelBin, conf.string()});
      if (pid <= 0) continue;
      if (wait_for(
              [&] {
                return query({"PING"}).has_value() || ::waitpid(pid, nullptr, WNOHANG) == pid;
              },
              10s) &&
          query({"PING"}))
        pid_ = pid;
      else {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
    }
  }
  ~Sentinel() { stop(); }
  void stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  bool ok() const { return pid_ > 0; }
  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // One command on a fresh authenticated connection; nullopt on any error.
  std::optional<std::string> query(const std::vector<std::string>& argv) const {
    queue::RedisAddress a;
    a.host = "127.0.0.1";
    a.port = port_;
    a.password = kSentinelPassword;
    a.timeout_ms = 500;
    auto r = queue::Redis::connect(a);
    if (!r.ok()) return std::nullopt;
    auto x = (*r)->command(argv);
    if (!x.ok()) return std::nullopt;
    if ((*x)->type == REDIS_REPLY_ARRAY) {
      std::string flat;
      for (size_t i = 0; i < (*x)->elements; ++i) flat += queue::reply_str((*x)->element[i]) + "\n";
      return flat;
    }
    return queue::reply_str(x->get());
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

// A primary, a replica in sync and three Sentinels that know each other and agree on a quorum.
class Topology {
 public:
  explicit Topology(const std::string& name)
      : tmp_("h3pipe_pf_sentinel_" + name), dir_(tmp_.path()) {
    const fs::path& dir = dir_;
    std::ofstream(dir / "redis.pass") << kPassword << "\n";
    std::ofstream(dir / "sentinel.pass") << kSentinelPassword << "\n";
    queue::RedisAddress as;
    as.user = "h3pipe";
    as.password = kPassword;
    const std::vector<std::string> acl = {
        "appendonly yes", "user default off",
        std::string("user h3pipe on >") + kPassword + " ~* &* +@all"};
    primary_ = std::make_unique<test_support::RedisServer>(test_support::RedisOptions{
        .conf_lines = acl, .aof = std::nullopt, .dir = dir / "primary", .probe_as = as});
    if (!primary_->ok()) return;
    auto replica_conf = acl;
    replica_conf.push_back("replicaof 127.0.0.1 " + std::to_string(primary_->port()));
    replica_conf.push_back("masteruser h3pipe");
    replica_conf.push_back(std::string("masterauth ") + kPassword);
    replica_ = std::make_unique<test_support::RedisServer>(test_support::RedisOptions{
        .conf_lines = replica_conf, .aof = std::nullopt, .dir = dir / "replica", .probe_as = as});
    if (!replica_->ok()) return;
    if (!wait_for([&] { return online_replicas() >= 1; }, 20s)) return;
    for (int i = 0; i < 3; ++i) {
      sentinels_.push_back(
          std::make_unique<Sentinel>(dir / ("sentinel" + std::to_string(i)), primary_->port()));
      if (!sentinels_.back()->ok()) return;
    }
    ready_ = wait_for(
        [&] {
          for (const auto& s : sentinels_) {
            auto q = s->query({"SENTINEL", "ckquorum", kMaster});
            auto m = s->query({"SENTINEL", "master", kMaster});
            if (!q || !m || m->find("num-other-sentinels\n2\n") == std::string::npos) return false;
          }
          return true;
        },
        30s);
  }
  ~Topology() {
    sentinels_.clear();
    replica_.reset();
    primary_.reset();
  }
  bool ready() const { return ready_; }
  int online_replicas() const {
    queue::RedisAddress a;
    a.host = "127.0.0.1";
    a.port = primary_->port();
    a.user = "h3pipe";
    a.password = kPassword;
    a.timeout_ms = 500;
    auto r = queue::Redis::connect(a);
    if (!r.ok()) return -1;
    auto x = (*r)->command({"INFO", "replication"});
    if (!x.ok()) return -1;
    const std::string info = queue::reply_str(x->get());
    int n = 0;
    for (size_t at = info.find("state=online"); at != std::string::npos;
         at = info.find("state=online", at + 1))
      ++n;
    return n;
  }

  json config(int wait_replicas = 1, const std::string& master = kMaster,
              const std::string& sentinel_password_file = "") const {
    json addrs = json::array();
    for (const auto& s : sentinels_) addrs.push_back(s->address());
    json j = {
        {"name", "pf-sentinel"},
        {"state_dir", (dir_ / "state").string()},
        {"redis",
         {{"embedded", false},
          {"user", "h3pipe"},
          {"password_file", (dir_ / "redis.pass").string()},
          {"wait_replicas", wait_replicas},
          {"sentinel",
           {{"addresses", addrs},
            {"master", master},
            {"password_file", sentinel_password_file.empty() ? (dir_ / "sentinel.pass").string()
                                                             : sentinel_password_file}}}}},
        {"hosts", json::array({{{"name", "a"}, {"address", "127.0.0.1"}, {"bind", "127.0.0.1"}}})},
        {"pools", json::array({{{"name", "e0"}, {"host", "a"}, {"stage", "encode"}},
                               {{"name", "s0"}, {"host", "a"}, {"stage", "sample"}},
                               {{"name", "d0"}, {"host", "a"}, {"stage", "decode"}}})}};
    return j;
  }
  config::Cluster load(const json& j) const {
    auto c = config::parse(j, dir_);
    EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message);
    return c.ok() ? *c : config::Cluster{};
  }

  test_support::TempDir tmp_;  // removed after the servers in it stopped
  fs::path dir_;
  std::unique_ptr<test_support::RedisServer> primary_, replica_;
  std::vector<std::unique_ptr<Sentinel>> sentinels_;
  bool ready_ = false;
};

struct Checked {
  std::vector<CheckResult> rows;
  std::string text;
  // The row of `check` against `target`, or nullptr.
  const CheckResult* row(const std::string& check, const std::string& target) const {
    for (const auto& r : rows)
      if (r.check == check && r.target == target) return &r;
    return nullptr;
  }
  int count(const std::string& check, Outcome o) const {
    int n = 0;
    for (const auto& r : rows) n += r.check == check && r.outcome == o;
    return n;
  }
  const CheckResult* first(const std::string& check) const {
    for (const auto& r : rows)
      if (r.check == check) return &r;
    return nullptr;
  }
};

Checked check(const config::Cluster& c) {
  Options o;
  o.nvml_library = "libnvidia-ml-h3pipe-absent.so.1";
  o.timeout = 1000ms;
  o.is_local = [](const config::Host&) { return true; };
  Checked out;
  out.rows = run_checks(c, o);
  std::ostringstream text;
  print_report(c, o, out.rows, text);
  out.text = text.str();
  if (std::getenv("H3PIPE_TEST_PRINT")) std::cout << out.text << "\n";
  return out;
}

// The non-destructive cases share one topology.
class PreflightSentinel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (::access(kSentinelBin, X_OK) != 0) return;
    topo_ = new Topology("shared");
  }
  static void TearDownTestSuite() {
    delete topo_;
    topo_ = nullptr;
  }
  void SetUp() override {
    if (::access(kSentinelBin, X_OK) != 0)
      GTEST_SKIP() << kSentinelBin << " missing (Debian's redis-sentinel)";
    ASSERT_TRUE(topo_ && topo_->ready()) << "the primary, replica and Sentinels did not come up";
  }
  static Topology* topo_;
};
Topology* PreflightSentinel::topo_ = nullptr;

TEST_F(PreflightSentinel, EverySentinelAndThePrimaryItNamesPass) {
  auto r = check(topo_->load(topo_->config()));
  const std::string primary = "127.0.0.1:" + std::to_string(topo_->primary_->port());
  for (const auto& s : topo_->sentinels_)
    for (const char* name :
         {"sentinel.reachable", "sentinel.auth", "sentinel.master", "sentinel.quorum"}) {
      const CheckResult* x = r.row(name, s->address());
      ASSERT_NE(x, nullptr) << name << " " << s->address() << "\n" << r.text;
      EXPECT_EQ(x->outcome, Outcome::kPass) << name << " " << s->address() << ": " << x->detail;
    }
  EXPECT_NE(r.row("sentinel.master", topo_->sentinels_[0]->address())->detail.find(primary),
            std::string::npos);
  for (const char* name :
       {"redis.reachable", "redis.auth", "redis.version", "redis.aof", "redis.replicas"}) {
    const CheckResult* x = r.row(name, primary);
    ASSERT_NE(x, nullptr) << name << " against " << primary << "\n" << r.text;
    EXPECT_EQ(x->outcome, Outcome::kPass) << name << ": " << x->detail;
  }
  EXPECT_NE(r.row("redis.replicas", primary)->detail.find("1 replica(s) online"),
            std::string::npos);
}

TEST_F(PreflightSentinel, UnknownMasterNameFailsOnEverySentinel) {
  auto r = check(topo_->load(topo_->config(1, "not-h3")));
  for (const auto& s : topo_->sentinels_) {
    const CheckResult* x = r.row("sentinel.master", s->address());
    ASSERT_NE(x, nullptr) << r.text;
    EXPECT_EQ(x->outcome, Outcome::kFail);
    EXPECT_NE(x->detail.find("not-h3"), std::string::npos) << x->detail;
    EXPECT_EQ(r.row("sentinel.quorum", s->address())->outcome, Outcome::kSkip);
  }
  const CheckResult* reach = r.first("redis.reachable");
  ASSERT_NE(reach, nullptr);
  EXPECT_EQ(reach->outcome, Outcome::kFail) << r.text;
  EXPECT_EQ(reach->target, "sentinel master not-h3");
  EXPECT_NE(r.text.find("NOT READY"), std::string::npos);
}

TEST_F(PreflightSentinel, WrongMissingOrUnreadableSentinelPasswordFails) {
  std::ofstream(topo_->dir_ / "wrong.pass") << "not-the-password\n";
  auto wrong = check(topo_->load(topo_->config(1, kMaster, (topo_->dir_ / "wrong.pass").string())));
  auto unreadable =
      check(topo_->load(topo_->config(1, kMaster, (topo_->dir_ / "absent.pass").string())));
  auto none_cfg = topo_->config();
  none_cfg["redis"]["sentinel"].erase("password_file");
  auto none = check(topo_->load(none_cfg));
  for (const auto& s : topo_->sentinels_) {
    const CheckResult* w = wrong.row("sentinel.auth", s->address());
    ASSERT_NE(w, nullptr) << wrong.text;
    EXPECT_EQ(w->outcome, Outcome::kFail);
    EXPECT_EQ(wrong.row("sentinel.reachable", s->address())->outcome, Outcome::kPass);
    const CheckResult* u = unreadable.row("sentinel.auth", s->address());
    ASSERT_NE(u, nullptr) << unreadable.text;
    EXPECT_EQ(u->outcome, Outcome::kFail);
    EXPECT_NE(u->detail.find("absent.pass"), std::string::npos) << u->detail;
    const CheckResult* n = none.row("sentinel.auth", s->address());
    ASSERT_NE(n, nullptr) << none.text;
    EXPECT_EQ(n->outcome, Outcome::kFail);
    EXPECT_NE(n->detail.find("NOAUTH"), std::string::npos) << n->detail;
    EXPECT_NE(n->fix.find("/redis/sentinel/password_file"), std::string::npos) << n->fix;
  }
  // No Sentinel answers, so the primary cannot be found either.
  EXPECT_EQ(wrong.first("redis.reachable")->outcome, Outcome::kFail) << wrong.text;
  EXPECT_EQ(none.first("redis.reachable")->outcome, Outcome::kFail) << none.text;
}

TEST_F(PreflightSentinel, FewerReplicasThanWaitReplicasFails) {
  auto r = check(topo_->load(topo_->config(2)));
  const std::string primary = "127.0.0.1:" + std::to_string(topo_->primary_->port());
  const CheckResult* x = r.row("redis.replicas", primary);
  ASSERT_NE(x, nullptr) << r.text;
  EXPECT_EQ(x->outcome, Outcome::kFail);
  EXPECT_NE(x->detail.find("1 replica(s) online"), std::string::npos) << x->detail;
  EXPECT_NE(x->detail.find("wait_replicas 2"), std::string::npos) << x->detail;
  EXPECT_NE(r.text.find("FAIL    redis.replicas"), std::string::npos) << r.text;
}

// Destructive: its own topology.
TEST(PreflightSentinelFaults, SentinelDownQuorumLostReplicaGone) {
  if (::access(kSentinelBin, X_OK) != 0)
    GTEST_SKIP() << kSentinelBin << " missing (Debian's redis-sentinel)";
  Topology t("faults");
  ASSERT_TRUE(t.ready()) << "the primary, replica and Sentinels did not come up";
  const auto c = t.load(t.config());
  const std::string primary = "127.0.0.1:" + std::to_string(t.primary_->port());
  const std::string s0 = t.sentinels_[0]->address(), s1 = t.sentinels_[1]->address(),
                    s2 = t.sentinels_[2]->address();

  // One Sentinel down: its row fails with its address; the others still find the primary.
  t.sentinels_[0]->stop();
  auto one = check(c);
  ASSERT_NE(one.row("sentinel.reachable", s0), nullptr) << one.text;
  EXPECT_EQ(one.row("sentinel.reachable", s0)->outcome, Outcome::kFail) << one.text;
  EXPECT_EQ(one.row("sentinel.quorum", s0)->outcome, Outcome::kSkip);
  EXPECT_EQ(one.row("sentinel.reachable", s1)->outcome, Outcome::kPass);
  EXPECT_EQ(one.row("redis.reachable", primary)->outcome, Outcome::kPass) << one.text;
  EXPECT_EQ(one.count("sentinel.reachable", Outcome::kFail), 1) << one.text;

  // Two down: once the last one sees the others down, it has no quorum (2) to authorise a failover.
  t.sentinels_[1]->stop();
  Checked two;
  ASSERT_TRUE(wait_for(
      [&] {
        two = check(c);
        const CheckResult* q = two.row("sentinel.quorum", s2);
        return q && q->outcome == Outcome::kFail;
      },
      15s))
      << two.text;
  EXPECT_NE(two.row("sentinel.quorum", s2)->detail.find("NOQUORUM"), std::string::npos)
      << two.row("sentinel.quorum", s2)->detail;
  EXPECT_EQ(two.row("sentinel.reachable", s1)->outcome, Outcome::kFail);
  EXPECT_EQ(two.row("redis.reachable", primary)->outcome, Outcome::kPass) << two.text;

  // The replica gone: wait_replicas 1 cannot be met.
  t.replica_->stop();
  Checked gone;
  ASSERT_TRUE(wait_for(
      [&] {
        gone = check(c);
        const CheckResult* x = gone.row("redis.replicas", primary);
        return x && x->outcome == Outcome::kFail;
      },
      10s))
      << gone.text;
  EXPECT_NE(gone.row("redis.replicas", primary)->detail.find("0 replica(s) online"),
            std::string::npos);
}

}  // namespace
}  // namespace h3pipe::preflight
