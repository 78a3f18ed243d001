// The local stack's state dir under a hostile local user (issue #22 items 2, 3 and 11): a state
// dir (or a folder above it, or a file in it) another user can write is refused by every stack
// command and by a service before anything there is read; `stop` signals only a process proven to
// be the stack's supervisor; start makes what it reuses private; the banner says what is true of
// an external Redis.  Label e2e: the real CLI, real services, real redis-server.  The checks with
// another user's files need root (chown to 65534) and skip elsewhere with the reason.
// H3PIPE_TEST_BIN_DIR runs them against another build's binaries (to show they fail before a fix).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/core/sha256.h"
#include "common/supervisor/stack_file.h"
#include "tests/support/test_support.h"

using namespace h3pipe;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr uid_t kNobody = 65534;

std::string bin(const std::string& name) {
  const char* dir = std::getenv("H3PIPE_TEST_BIN_DIR");
  return dir && *dir ? std::string(dir) + "/" + name : ts::bin(name);
}

json base_config() {
  return json::parse(R"({
    "name": "state-e2e", "queue": {"lease_ms": 1500, "renew_ms": 300, "sweep_ms": 200, "max_deliveries": 3, "block_ms": 50},
    "hosts": [{"name": "local"}],
    "pools": [
      {"name": "enc", "host": "local", "stage": "encode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}},
      {"name": "s0", "host": "local", "stage": "sample", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}},
      {"name": "dec", "host": "local", "stage": "decode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}}
    ]})");
}

// A temp dir (0700, the caller's) holding the config; the state dir is <dir>/state unless told.
class Site {
 public:
  explicit Site(json cfg = base_config()) : cfg_(std::move(cfg)) { write(); }
  ~Site() { ts::sh(cli() + " stop >/dev/null 2>&1"); }
  fs::path state() const { return dir_.path() / "state"; }
  void set_state(const fs::path& s) {
    state_ = s;
    write();
  }
  void write() {
    cfg_["state_dir"] = (state_.empty() ? state() : state_).string();
    std::ofstream(config()) << cfg_.dump(2);
  }
  fs::path config() const { return dir_.path() / "cluster.json"; }
  std::string cli() const {
    return "timeout 30 " + bin("h3pipe") + " --config " + config().string();
  }
  // rc and stdout+stderr of `h3pipe ARGS`.
  std::pair<int, std::string> h3(const std::string& args) const {
    return ts::sh(cli() + " " + args + " 2>&1");
  }
  const fs::path& dir() const { return dir_.path(); }

 private:
  ts::TempDir dir_;
  json cfg_;
  fs::path state_;
};

void write_file(const fs::path& p, const std::string& text, mode_t mode) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
  ASSERT_EQ(::chmod(p.c_str(), mode), 0) << p;
}

void chown_tree(const fs::path& p, uid_t uid) {
  ASSERT_EQ(::lchown(p.c_str(), uid, uid), 0) << p;
  if (fs::is_directory(fs::symlink_status(p))) {
    for (const auto& e : fs::recursive_directory_iterator(p))
      ASSERT_EQ(::lchown(e.path().c_str(), uid, uid), 0);
  }
}

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0;
}

// A loopback listener standing in for another user's fake Redis: it counts who connects.
class Listener {
 public:
  Listener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 16);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~Listener() { ::close(fd_); }
  int port() const { return port_; }
  int connections() {
    int n = 0;
    for (int c; (c = ::accept(fd_, nullptr, nullptr)) >= 0; ++n) ::close(c);
    return n;
  }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A stack.json as another user would forge it: its listener as Redis, `pid` as the supervisor.
json forged_stack(const fs::path& state, pid_t pid, int redis_port) {
  return {{"supervisor_pid", pid},
          {"supervisor_start_time", supervisor::process_start_time(pid)},
          {"host", "local"},
          {"config", ""},
          {"state_dir", state.string()},
          {"redis",
           {{"host", "127.0.0.1"},
            {"port", redis_port},
            {"embedded", true},
            {"credentials_dir", (state / "secrets").string()}}},
          {"processes", json::array()}};
}

void plant_stack(const fs::path& state, pid_t pid, int redis_port) {
  fs::create_directories(state);
  const std::string text = forged_stack(state, pid, redis_port).dump(2) + "\n";
  write_file(state / "stack.json", text, 0600);
  write_file(state / "stack.json.sha256", sha256_hex(text) + "  stack.json\n", 0600);
  write_file(state / "secrets" / "redis-operator.password", "known-to-the-attacker\n", 0600);
}

// A process that is certainly not the supervisor; reaped by the destructor.
class Sleeper {
 public:
  Sleeper() : pid_(ts::spawn({"/bin/sleep", "120"})) {}
  ~Sleeper() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }
  bool running() const { return ::waitpid(pid_, nullptr, WNOHANG) == 0; }

 private:
  pid_t pid_;
};

// start last: it would take the lock and clear the planted stack.json the others must not trust.
const char* const kStackCommands[] = {"status",
                                      "status r1",
                                      "run BATCH --background",
                                      "wait r1 --timeout 5",
                                      "cancel r1",
                                      "resume r1",
                                      "stop",
                                      "start"};

// Every stack command exits 2 naming `path`, its owner and its mode, and nobody's listener hears
// from it.
void expect_every_command_refuses(const Site& s, Listener& l, const fs::path& path,
                                  const std::string& owner, const std::string& mode) {
  const fs::path batch = s.dir() / "batch.jsonl";
  std::ofstream(batch) << R"({"jobId":"a","prompt":"p","width":64,"height":64,"frames":9})"
                       << "\n";
  for (std::string cmd : kStackCommands) {
    if (const auto at = cmd.find("BATCH"); at != std::string::npos)
      cmd.replace(at, 5, batch.string());
    auto [rc, out] = s.h3(cmd);
    EXPECT_EQ(rc, 2) << cmd << ": " << out;
    EXPECT_NE(out.find(path.string()), std::string::npos) << cmd << ": " << out;
    EXPECT_NE(out.find(owner), std::string::npos) << cmd << ": " << out;
    EXPECT_NE(out.find("mode " + mode), std::string::npos) << cmd << ": " << out;
  }
  EXPECT_EQ(l.connections(), 0)
      << "a command sent the operator's credentials to the planted listener";
}

bool root() {
  return ::geteuid() == 0;
}
#define REQUIRE_ROOT() \
  if (!root()) GTEST_SKIP() << "needs root: chown to uid 65534 makes the other user's files"

}  // namespace

// Item 2: made by uid 65534, used by root.
TEST(StateDir, OwnedByAnotherUserIsRefusedByEveryCommand) {
  REQUIRE_ROOT();
  Site s;
  Sleeper victim;
  Listener fake_redis;
  plant_stack(s.state(), victim.pid(), fake_redis.port());
  ASSERT_EQ(::chmod(s.state().c_str(), 0700), 0);
  chown_tree(s.state(), kNobody);
  expect_every_command_refuses(s, fake_redis, s.state(), "uid 65534", "0700");
  EXPECT_TRUE(victim.running());
  EXPECT_EQ(fs::status(s.state()).permissions(), fs::perms::owner_all)
      << "nothing was changed there";
}

// Item 2: root's own state dir, but stack.json (and its sidecar) replaced by 65534.
TEST(StateDir, AFileInItOwnedByAnotherUserIsRefused) {
  REQUIRE_ROOT();
  Site s;
  Sleeper victim;
  Listener fake_redis;
  plant_stack(s.state(), victim.pid(), fake_redis.port());
  ASSERT_EQ(::chmod(s.state().c_str(), 0700), 0);
  ASSERT_EQ(::lchown((s.state() / "stack.json").c_str(), kNobody, kNobody), 0);
  ASSERT_EQ(::lchown((s.state() / "stack.json.sha256").c_str(), kNobody, kNobody), 0);
  expect_every_command_refuses(s, fake_redis, s.state() / "stack.json", "uid 65534", "0600");
  EXPECT_TRUE(victim.running());
}

// Item 2: a folder above the state dir that another user owns (they can rename the state dir).
TEST(StateDir, AParentOwnedByAnotherUserIsRefused) {
  REQUIRE_ROOT();
  Site s;
  const fs::path parent = s.dir() / "theirs";
  fs::create_directories(parent);
  ASSERT_EQ(::chmod(parent.c_str(), 0755), 0);
  s.set_state(parent / "state");
  Listener unused;
  ASSERT_EQ(::chown(parent.c_str(), kNobody, kNobody), 0);
  expect_every_command_refuses(s, unused, parent, "uid 65534", "0755");
  EXPECT_FALSE(fs::exists(parent / "state"))
      << "start created the state dir in a folder another user owns";
}

// Item 2: a state dir anybody may write (the caller's own: no root needed).
TEST(StateDir, WritableByOthersIsRefusedByEveryCommand) {
  Site s;
  Sleeper victim;
  Listener fake_redis;
  plant_stack(s.state(), victim.pid(), fake_redis.port());
  ASSERT_EQ(::chmod(s.state().c_str(), 0777), 0);
  expect_every_command_refuses(s, fake_redis, s.state(), "uid " + std::to_string(::geteuid()),
                               "0777");
  EXPECT_TRUE(victim.running());
  EXPECT_EQ(mode_of(s.state()), 0777u) << "a refused state dir is left as it is";
}

// Item 2, the services' runner: a service given the local stack's credentials in a state dir
// others can write exits 2 before it reads them.
TEST(StateDir, ServiceRefusesCredentialsInAStateDirOthersCanWrite) {
  Site s;
  write_file(s.state() / "secrets" / "redis-encoder.password", "x\n", 0600);
  ASSERT_EQ(::chmod(s.state().c_str(), 0777), 0);
  const fs::path log = s.dir() / "encoder.log";
  const std::string env = "H3PIPE_REDIS_USER=h3pipe-encoder H3PIPE_REDIS_PASSWORD_FILE=" +
                          (s.state() / "secrets" / "redis-encoder.password").string();
  auto [rc, out] = ts::sh("timeout 20 env " + env + " " + bin("h3pipe-encoder") + " --config " +
                          s.config().string() + " --host local --pool enc --state-dir " +
                          s.state().string() + " --redis 127.0.0.1:1 2>&1");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find(s.state().string()), std::string::npos) << out;
  EXPECT_NE(out.find("mode 0777"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(s.state() / "run")) << "the service wrote its run file there";
}

// Item 3: stack.json names a live unrelated process (its real start time, even): stop does not
// signal it, and status does not connect to the Redis port stack.json names.
TEST(Stop, NeverSignalsAProcessThatIsNotTheSupervisor) {
  Site s;
  Sleeper victim;
  Listener fake_redis;
  plant_stack(s.state(), victim.pid(), fake_redis.port());
  auto [rc, out] = s.h3("stop");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find(fmt::format("no stack runs here (stale stack.json, pid {} is another process",
                                 victim.pid())),
            std::string::npos)
      << out;
  EXPECT_TRUE(victim.running()) << "stop killed an unrelated process";
  EXPECT_FALSE(fs::exists(s.state() / "stack.json")) << "the stale stack.json stays";
  plant_stack(s.state(), victim.pid(), fake_redis.port());
  auto [src, sout] = s.h3("status");
  EXPECT_NE(src, 0) << sout;
  EXPECT_EQ(fake_redis.connections(), 0)
      << "status sent the operator's password to the port of a stale stack.json";
  EXPECT_TRUE(victim.running());
}

// Item 3: after kill -9 of a real supervisor its stack.json stays; stop says so, signals nothing,
// removes it; the next start and stop work.
TEST(Stop, AfterKillNineOfTheSupervisorReportsTheStaleStackAndCleansUp) {
  Site s;
  auto [rc, out] = s.h3("start");
  ASSERT_EQ(rc, 0) << out;
  json st;
  std::ifstream(s.state() / "stack.json") >> st;
  const pid_t pid = st["supervisor_pid"].get<pid_t>();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_TRUE(ts::wait_for([&] { return supervisor::process_start_time(pid) < 0; }, 20));
  ASSERT_TRUE(fs::exists(s.state() / "stack.json"));
  auto [src, sout] = s.h3("stop");
  EXPECT_EQ(src, 1) << sout;
  EXPECT_NE(sout.find("no stack runs here (stale stack.json, pid " + std::to_string(pid)),
            std::string::npos)
      << sout;
  EXPECT_FALSE(fs::exists(s.state() / "stack.json"));
  auto [rc2, out2] = s.h3("start");
  ASSERT_EQ(rc2, 0) << out2;
  auto [rc3, out3] = s.h3("stop");
  EXPECT_EQ(rc3, 0) << out3;
  EXPECT_NE(out3.find("stopped"), std::string::npos) << out3;
}

// Item 11: what start reuses is made private (a 0777 logs/ and 0666 logs kept their modes).
TEST(Start, MakesWhatItReusesPrivate) {
  Site s;
  fs::create_directories(s.state());
  ASSERT_EQ(::chmod(s.state().c_str(), 0700), 0);
  for (const char* d : {"logs", "run", "redis", "outputs"}) {
    fs::create_directories(s.state() / d);
    ASSERT_EQ(::chmod((s.state() / d).c_str(), 0777), 0);
  }
  write_file(s.state() / "logs" / "encoder-enc.log", "old\n", 0666);
  write_file(s.state() / "supervisor.log", "old\n", 0666);
  auto [rc, out] = s.h3("start");
  ASSERT_EQ(rc, 0) << out;
  for (const char* d : {"logs", "run", "redis", "outputs", "secrets"})
    EXPECT_EQ(mode_of(s.state() / d), 0700u) << d;
  EXPECT_EQ(mode_of(s.state() / "logs" / "encoder-enc.log"), 0600u);
  EXPECT_EQ(mode_of(s.state() / "supervisor.log"), 0600u);
  EXPECT_EQ(mode_of(s.state()), 0700u);
}

// Item 11: a folder in the state dir that another user owns is refused, not reused.
TEST(Start, RefusesAFolderInTheStateDirOwnedByAnotherUser) {
  REQUIRE_ROOT();
  Site s;
  fs::create_directories(s.state() / "logs");
  ASSERT_EQ(::chmod(s.state().c_str(), 0700), 0);
  ASSERT_EQ(::chmod((s.state() / "logs").c_str(), 0755), 0);
  ASSERT_EQ(::chown((s.state() / "logs").c_str(), kNobody, kNobody), 0);
  auto [rc, out] = s.h3("start");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find((s.state() / "logs").string()), std::string::npos) << out;
  EXPECT_NE(out.find("uid 65534"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(s.state() / "stack.json"));
}

// Item 11: with an external Redis the banner shows no pid and the persistence Redis reports (or
// that it is unknown), never an assumed "AOF on".
TEST(Start, BannerSaysWhatIsTrueOfAnExternalRedis) {
  for (const bool config_allowed : {true, false}) {
    ts::RedisOptions o{.aof = false};
    if (!config_allowed) o.conf_lines = {"rename-command CONFIG \"\""};
    ts::RedisServer redis(o);
    ASSERT_TRUE(redis.ok()) << redis.log();
    const int port = redis.port();
    {
      json cfg = base_config();
      cfg["redis"] = {{"host", "127.0.0.1"}, {"port", port}, {"embedded", false}};
      Site s(cfg);
      auto [rc, out] = s.h3("start");
      ASSERT_EQ(rc, 0) << out;
      const std::string line = out.substr(
          out.find("  redis "), out.find('\n', out.find("  redis ")) - out.find("  redis "));
      EXPECT_NE(line.find(fmt::format("127.0.0.1:{}", port)), std::string::npos) << out;
      EXPECT_NE(line.find("external"), std::string::npos) << out;
      EXPECT_EQ(out.find("pid 0 "), std::string::npos) << out;
      EXPECT_EQ(line.find("AOF on"), std::string::npos) << out;
      if (config_allowed)
        EXPECT_NE(line.find("AOF off"), std::string::npos) << out;
      else
        EXPECT_NE(line.find("persistence unknown"), std::string::npos) << out;
      EXPECT_EQ(s.h3("stop").first, 0);
    }
  }
}
