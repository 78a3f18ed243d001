#pragma once
// Starts FakeComfyUiServer (fake_comfyui_server.py, Python standard library) on a free port for
// one test and stops it afterwards.  The comfyui runtime talks to it through its production
// client code.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/runtime_exec/runtime_test_util.h"

extern char** environ;

namespace h3pipe::runtime::testing {

class FakeComfyUiServer final {
 public:
  struct Options {
    std::string mode = "ok";  // ok | fail | forget
    int exec_delay_ms = 0;
    fs::path latent;        // returned by H3SaveAVLatent
    fs::path conditioning;  // returned by H3SaveConditioning
  };

  FakeComfyUiServer(const fs::path& root, const Options& o)
      : root_(root), record_(root / "record.jsonl") {
    fs::create_directories(root_);
    std::vector<std::string> args = {
        "/usr/bin/python3", H3PIPE_SOURCE_DIR "/tests/runtime_comfyui/fake_comfyui_server.py",
        "--root",           root_.string(),
        "--mode",           o.mode,
        "--exec-delay-ms",  std::to_string(o.exec_delay_ms),
        "--record",         record_.string()};
    if (!o.latent.empty()) args.insert(args.end(), {"--latent", o.latent.string()});
    if (!o.conditioning.empty())
      args.insert(args.end(), {"--conditioning", o.conditioning.string()});
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int rc = ::posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(fds[1]);
    if (rc != 0) {
      ::close(fds[0]);
      throw std::runtime_error("cannot start the fake ComfyUI server");
    }
    // Wait (with a deadline) for "PORT <n>".
    std::string line;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      pollfd p{fds[0], POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[256];
      ssize_t n = ::read(fds[0], buf, sizeof buf);
      if (n <= 0) break;
      line.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fds[0]);
    if (line.rfind("PORT ", 0) != 0) {
      stop();
      throw std::runtime_error("the fake ComfyUI server did not report its port: " + line);
    }
    port_ = std::stoi(line.substr(5));
  }
  ~FakeComfyUiServer() { stop(); }
  FakeComfyUiServer(const FakeComfyUiServer&) = delete;
  FakeComfyUiServer& operator=(const FakeComfyUiServer&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const fs::path& root() const { return root_; }
  fs::path input_dir() const { return root_ / "input"; }

  // Request bodies the server received, by kind: prompt, queue, history, interrupt, upload.
  std::vector<nlohmann::json> recorded(const std::string& kind) const {
    std::vector<nlohmann::json> out;
    std::istringstream in(read_text(record_));
    for (std::string l; std::getline(in, l);) {
      auto j = nlohmann::json::parse(l, nullptr, false);
      if (!j.is_discarded() && j["kind"] == kind) out.push_back(j["body"]);
    }
    return out;
  }

 private:
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  fs::path root_, record_;
  pid_t pid_ = -1;
  int port_ = 0;
};

// A port nothing listens on: bound, read back and closed.
inline int closed_port() {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(s);
  return ntohs(a.sin_port);
}

}  // namespace h3pipe::runtime::testing
