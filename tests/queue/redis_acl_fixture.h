#pragma once
// A private redis-server (tests/support/redis_server.h) loaded with configs/redis/users.acl,
// rendered by configs/redis/render_acl.sh from per-user password files in a temp dir (the way a
// deployment renders it from its secrets).
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "common/queue/redis.h"
#include "tests/support/test_support.h"

namespace h3pipe::test_support {

inline const std::vector<std::string>& acl_users() {
  static const std::vector<std::string> k = {"encoder",  "sampler", "decoder", "transfer",
                                             "operator", "keda",    "admin"};
  return k;
}

class AclRedis {
 public:
  // aof: append-only persistence, so that restart() shows what survives a restart.
  explicit AclRedis(bool aof = false) {
    fs::path secrets = dir_.path() / "secrets";
    fs::create_directories(secrets);
    for (const auto& u : acl_users()) {
      passwords_[u] = "test-" + u + "-" + std::to_string(::getpid());
      // CRLF and trailing spaces are dropped by both the renderer and the services.
      std::ofstream(secrets / ("redis-" + u + ".password")) << passwords_[u] << " \r\n";
    }
    acl_ = dir_.path() / "users.acl";
    auto [rc, out] = sh(fmt::format("sh {} {} {} 2>&1", source("configs/redis/render_acl.sh"),
                                    secrets.string(), acl_.string()));
    render_rc_ = rc;
    render_out_ = out;
    if (rc != 0) return;
    queue::RedisAddress admin = address("admin");
    server_ = std::make_unique<RedisServer>(
        RedisOptions{.aof = aof, .aclfile = acl_, .dir = dir_.path() / "redis", .probe_as = admin});
  }
  // A clean restart on the same data dir and ACL file (SIGTERM: the AOF is flushed).
  void restart() {
    if (server_) server_->restart();
  }
  bool ready() const { return server_ && server_->ok(); }
  std::string why_not_ready() const {
    return fmt::format("render rc {} ({})\nredis log:\n{}", render_rc_, render_out_,
                       server_ ? server_->log() : std::string());
  }
  int port() const { return server_ ? server_->port() : 0; }
  const fs::path& acl_file() const { return acl_; }
  std::string user(const std::string& who) const {
    return who == "admin" ? "redis-admin" : "h3pipe-" + who;
  }
  std::string password(const std::string& who) const { return passwords_.at(who); }
  queue::RedisAddress address(const std::string& who) const {
    return {"127.0.0.1", port(), user(who), password(who), 5000};
  }
  Result<std::unique_ptr<queue::Redis>> connect(const std::string& who) const {
    return queue::Redis::connect(address(who));
  }

 private:
  TempDir dir_;
  fs::path acl_;
  std::map<std::string, std::string> passwords_;
  int render_rc_ = -1;
  std::string render_out_;
  std::unique_ptr<RedisServer> server_;
};

}  // namespace h3pipe::test_support

// A test stops here, with the render output and the server's log, when its server is not up.
#define REQUIRE_SERVER(srv) ASSERT_TRUE((srv).ready()) << (srv).why_not_ready()
