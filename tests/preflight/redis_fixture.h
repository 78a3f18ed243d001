#pragma once
// A private redis-server for a test: a free port, a temp dir, a config written by the test
// (password, ACL users, AOF), stopped and removed at destruction.
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/queue/redis.h"

extern char** environ;

namespace h3pipe::testing {

inline int free_tcp_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

inline pid_t spawn(const std::vector<std::string>& argv) {
  std::vector<char*> a;
  for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  pid_t pid = -1;
  if (::posix_spawnp(&pid, a[0], nullptr, nullptr, a.data(), environ) != 0) return -1;
  return pid;
}

class RedisServer {
 public:
  // conf_lines: extra redis.conf lines (requirepass, user ..., appendonly ...).
  RedisServer(const std::filesystem::path& dir, const std::vector<std::string>& conf_lines,
              queue::RedisAddress probe_as) {
    std::filesystem::create_directories(dir);
    for (int attempt = 0; attempt < 5 && pid_ <= 0; ++attempt) {
      port_ = free_tcp_port();
      auto conf = dir / "redis.conf";
      {
        std::ofstream c(conf);
        c << "port " << port_ << "\nbind 127.0.0.1\ndir " << dir.string() << "\nsave \"\"\n"
          << "daemonize no\nlogfile " << (dir / "redis.log").string() << "\n";
        for (const auto& l : conf_lines) c << l << "\n";
      }
      pid_t pid = spawn({"redis-server", conf.string()});
      if (pid <= 0) continue;
      probe_as.host = "127.0.0.1";
      probe_as.port = port_;
      probe_as.timeout_ms = 200;
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (std::chrono::steady_clock::now() < deadline) {
        auto r = queue::Redis::connect(probe_as);
        if (r.ok() && (*r)->command({"PING"}).ok()) {
          pid_ = pid;
          break;
        }
        int st = 0;
        if (::waitpid(pid, &st, WNOHANG) == pid) break;  // exited (port taken?): retry
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (pid_ <= 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
    }
  }
  ~RedisServer() { stop(); }
  void stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  bool ok() const { return pid_ > 0; }
  int port() const { return port_; }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace h3pipe::testing
