#pragma once
// A ComfyUI stand-in for preflight's comfyui.templates rows: answers GET /object_info/<class>
// from a recorded /object_info ({} for a class it lacks, as ComfyUI does) and /system_stats with
// the version it is told, on 127.0.0.1 port 0 (read back), counting the requests.  One
// connection at a time.  Used by preflight's tests (tests/preflight).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

namespace h3pipe::testing {

class ObjectInfoServer {
 public:
  explicit ObjectInfoServer(nlohmann::json classes, std::string version = "0.3.64")
      : classes_(std::move(classes)), version_(std::move(version)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~ObjectInfoServer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  ObjectInfoServer(const ObjectInfoServer&) = delete;
  ObjectInfoServer& operator=(const ObjectInfoServer&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int requests() const { return requests_; }

 private:
  void serve() {
    while (!stop_) {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      std::string req;
      char buf[4096];
      while (req.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        req.append(buf, static_cast<std::size_t>(n));
      }
      ++requests_;
      const std::string path = req.size() > 4 ? req.substr(4, req.find(' ', 4) - 4) : "";
      const std::string prefix = "/object_info/";
      std::string body = "{}";
      int status = 200;
      if (path.rfind(prefix, 0) == 0) {
        const std::string cls = path.substr(prefix.size());
        if (classes_.contains(cls)) body = nlohmann::json{{cls, classes_[cls]}}.dump();
      } else if (path == "/system_stats") {
        body = nlohmann::json{{"system", {{"comfyui_version", version_}}},
                              {"devices", nlohmann::json::array()}}
                   .dump();
      } else {
        status = 404;
      }
      const std::string resp =
          "HTTP/1.1 " + std::to_string(status) +
          " OK\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: " +
          std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
      (void)::send(c, resp.data(), resp.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  }

  nlohmann::json classes_;
  std::string version_;
  int fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::thread thread_;
};

}  // namespace h3pipe::testing
