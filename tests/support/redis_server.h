#pragma once
// The one redis-server launcher of the tests: a private server on a free loopback port, its data
// and log in a directory of its own (or the caller's), configured by a redis.conf written here
// (password, ACL users or an ACL file, AOF, replication lines), stopped at destruction.  Tests of
// the ACL (queue/redis_acl_fixture.h) and of Sentinel (preflight/preflight_sentinel_test.cpp) build
// on it; nothing else in tests/ starts a redis-server.
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/queue/redis.h"
#include "tests/support/spawn.h"
#include "tests/support/temp_dir.h"

namespace h3pipe::test_support {

struct RedisOptions {
  std::string password{};                 // requirepass for the default user ("" = none)
  std::vector<std::string> conf_lines{};  // more redis.conf lines (user ..., replicaof ...)
  std::optional<bool> aof = true;         // appendonly yes/no; nullopt: conf_lines decide
  std::filesystem::path aclfile{};        // aclfile (users from a rendered ACL file)
  std::filesystem::path dir{};            // data dir; empty: a temp dir of its own
  // Whom to PING as to know the server is up (host and port are filled in); default: the
  // default user with `password`.
  std::optional<queue::RedisAddress> probe_as{};
};

class RedisServer {
 public:
  explicit RedisServer(const std::string& password = "")
      : RedisServer(RedisOptions{.password = password}) {}
  explicit RedisServer(RedisOptions o) : o_(std::move(o)) {
    if (o_.dir.empty()) {
      own_dir_ = std::make_unique<TempDir>("h3pipe-redis");
      o_.dir = own_dir_->path();
    }
    std::filesystem::create_directories(o_.dir);
    // A port taken between asking and binding makes the server exit: try another.
    for (int attempt = 0; attempt < 5 && !ready_; ++attempt) {
      port_ = free_tcp_port();
      launch();
    }
  }
  ~RedisServer() { stop(SIGKILL); }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  // SIGTERM flushes the AOF (a clean shutdown); SIGKILL is a crash.
  void stop(int sig = SIGTERM) {
    if (pid_ > 0) {
      ::kill(pid_, sig);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    ready_ = false;
  }
  // A clean restart on the same port, data dir and configuration.
  bool restart() {
    stop(SIGTERM);
    launch();
    return ready_;
  }
  bool ok() const { return ready_; }
  int port() const { return port_; }
  const std::filesystem::path& dir() const { return o_.dir; }
  std::string log() const {
    std::ifstream in(o_.dir / "redis.log");
    return {std::istreambuf_iterator<char>(in), {}};
  }
  // The default user with the password (what the probe uses unless told otherwise).
  queue::RedisAddress address() const { return {"127.0.0.1", port_, "", o_.password}; }
  Result<std::unique_ptr<queue::Redis>> connect() const { return queue::Redis::connect(address()); }

 private:
  void launch() {
    const auto conf = o_.dir / "redis.conf";
    {
      std::ofstream c(conf);
      c << "port " << port_ << "\nbind 127.0.0.1\ndir " << o_.dir.string()
        << "\nsave \"\"\ndaemonize no\nlogfile " << (o_.dir / "redis.log").string() << "\n";
      if (o_.aof) c << "appendonly " << (*o_.aof ? "yes" : "no") << "\n";
      if (!o_.password.empty()) c << "requirepass " << o_.password << "\n";
      if (!o_.aclfile.empty()) c << "aclfile " << o_.aclfile.string() << "\n";
      for (const auto& l : o_.conf_lines) c << l << "\n";
    }
    pid_ = spawn({"/usr/bin/redis-server", conf.string()});
    if (pid_ <= 0) return;
    queue::RedisAddress probe = o_.probe_as.value_or(address());
    probe.host = "127.0.0.1";
    probe.port = port_;
    probe.timeout_ms = 200;
    ready_ = wait_for(
        [&] {
          if (int st = 0; ::waitpid(pid_, &st, WNOHANG) == pid_) {
            pid_ = -1;  // exited (the port was taken?)
            return true;
          }
          auto r = queue::Redis::connect(probe);
          return r.ok() && (*r)->command({"PING"}).ok();
        },
        10);
    if (pid_ <= 0) ready_ = false;
    if (!ready_) stop(SIGKILL);
  }

  RedisOptions o_;
  std::unique_ptr<TempDir> own_dir_;
  int port_ = 0;
  pid_t pid_ = -1;
  bool ready_ = false;
};

}  // namespace h3pipe::test_support
