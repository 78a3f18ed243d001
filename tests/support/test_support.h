#pragma once
// Hermetic fixtures for tests that need real parts: a private redis-server (redis_server.h), temp
// dirs, running commands, and waiting on conditions with deadlines (spawn.h; no sleeps to
// synchronise).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/config/config.h"
#include "common/queue/redis.h"
#include "common/supervisor/credentials.h"
#include "common/supervisor/supervisor.h"
#include "tests/support/redis_server.h"
#include "tests/support/spawn.h"
#include "tests/support/temp_dir.h"

extern char** environ;

namespace h3pipe::test_support {
namespace fs = std::filesystem;

// TempDir: tests/support/temp_dir.h

// wait_for, spawn, free_tcp_port: tests/support/spawn.h

// Runs a shell command line, returns (exit code, stdout).
inline std::pair<int, std::string> sh(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {-1, ""};
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int st = ::pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

// RedisServer: tests/support/redis_server.h

// The Redis of a running local stack (its stack.json) as one of its ACL users
// (supervisor/credentials.h): "operator" is what a user with redis-cli gets, "admin" the
// supervisor's own.
inline queue::RedisAddress stack_redis(const nlohmann::json& stack,
                                       const std::string& role = "admin") {
  const auto u = supervisor::user_for(stack["redis"]["credentials_dir"].get<std::string>(), role);
  config::Redis r;
  r.password_file = u.password_file;
  // The embedded Redis is on its Unix socket (host = its path, port 0; issue #35 D1).
  return {stack["redis"]["host"].get<std::string>(), stack["redis"]["port"].get<int>(), u.user,
          r.password()};
}

// A one-host cluster (h1) with a sim encode, sample and decode pool (enc, samp, dec; 0 s each)
// on the Redis at 127.0.0.1:`port`, its state under dir/state; `overrides` merged over it (a JSON
// merge patch: {"queue": {...}}).  sim_cluster_json is its text, for a --config file.
inline nlohmann::json sim_cluster_json(const fs::path& dir, int port,
                                       const nlohmann::json& overrides = nlohmann::json::object()) {
  auto j = nlohmann::json::parse(R"({
    "name": "test",
    "redis": {"host": "127.0.0.1", "embedded": false},
    "stages": {"encode": {"runtime": {"name": "sim"}}, "sample": {"runtime": {"name": "sim"}},
               "decode": {"runtime": {"name": "sim"}}},
    "hosts": [{"name": "h1"}],
    "pools": [{"name": "enc", "host": "h1", "stage": "encode", "profiles": {"default": {"seconds": 0}}},
              {"name": "samp", "host": "h1", "stage": "sample", "profiles": {"default": {"seconds": 0}}},
              {"name": "dec", "host": "h1", "stage": "decode", "profiles": {"default": {"seconds": 0}}}]
  })");
  j["redis"]["port"] = port;
  j["state_dir"] = (dir / "state").string();
  j.merge_patch(overrides);
  return j;
}
inline Result<config::Cluster> sim_cluster(
    const fs::path& dir, int port, const nlohmann::json& overrides = nlohmann::json::object()) {
  return config::parse(sim_cluster_json(dir, port, overrides), dir);
}

// HGET key field as a string: "" for a missing field, "<error: ...>" when the command failed.
inline std::string hget(queue::Redis& r, const std::string& key, const std::string& field) {
  auto rep = r.command({"HGET", key, field});
  return rep.ok() ? queue::reply_str(rep->get()) : "<error: " + rep.error().to_string() + ">";
}

inline std::string bin(const std::string& name) {
  return std::string(H3PIPE_BIN_DIR) + "/" + name;
}
inline std::string source(const std::string& rel) {
  return std::string(H3PIPE_SOURCE_DIR) + "/" + rel;
}

}  // namespace h3pipe::test_support
namespace ts = h3pipe::test_support;
