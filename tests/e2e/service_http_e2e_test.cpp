// Every HTTP port of a live service answers anything with a status and never takes the service
// down; a service that cannot write its roots stays up, not ready, and says why (issues #14, #15).
// Real h3pipe-decoder processes (sim runtime) against a private redis-server (label e2e).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "common/preflight/http_get.h"
#include "tests/support/test_support.h"

namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;

// One host, a sim pool per stage (only the decoder runs), its roots where the test says.
fs::path write_config(const fs::path& dir, int redis_port, const fs::path& output_root) {
  nlohmann::json j = {{"name", "http"},
                      {"state_dir", (dir / "state").string()},
                      {"artifact_root", (dir / "artifacts").string()},
                      {"output_root", output_root.string()},
                      {"redis", {{"host", "127.0.0.1"}, {"port", redis_port}, {"embedded", false}}},
                      {"stages",
                       {{"encode", {{"runtime", {{"name", "sim"}}}}},
                        {"sample", {{"runtime", {{"name", "sim"}}}}},
                        {"decode", {{"runtime", {{"name", "sim"}}}}}}},
                      {"hosts", {{{"name", "h1"}}}},
                      {"pools", nlohmann::json::array()}};
  for (const char* stage : {"encode", "sample", "decode"})
    j["pools"].push_back({{"name", std::string(stage).substr(0, 3)},
                          {"host", "h1"},
                          {"stage", stage},
                          {"profiles", {{"default", {{"seconds", 0}}}}}});
  const fs::path f = dir / "cluster.json";
  std::ofstream(f) << j.dump(2);
  return f;
}

class Decoder {
 public:
  Decoder(const fs::path& dir, const fs::path& config) : log_(dir / "decoder.log") {
    pid_ = ts::spawn({ts::bin("h3pipe-decoder"), "--config", config.string(), "--pool", "dec"},
                     log_.string());
    run_file_ = dir / "state" / "run" / "decoder-dec.json";
  }
  ~Decoder() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  bool alive() const { return ::kill(pid_, 0) == 0 && ::waitpid(pid_, nullptr, WNOHANG) == 0; }
  // Ports from the run file, once the service wrote it.
  bool read_ports() {
    std::ifstream in(run_file_);
    if (!in) return false;
    auto j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded()) return false;
    metrics_port_ = j.value("metrics_port", 0);
    health_port_ = j.value("health_port", 0);
    return metrics_port_ > 0 && health_port_ > 0;
  }
  int status(int port, const std::string& path) const {
    auto r = h3pipe::preflight::http_get(fmt::format("http://127.0.0.1:{}{}", port, path), 2000ms);
    return r.ok() ? r->status : -1;
  }
  std::string log() const {
    std::ifstream in(log_);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  int metrics_port_ = 0, health_port_ = 0;
  fs::path run_file_;

 private:
  fs::path log_;
  pid_t pid_ = -1;
};

// Sends raw bytes on a fresh connection, then reads the reply until the server closes (or 1 s),
// or closes at once.
void raw_exchange(int port, const std::string& bytes, bool read_reply) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  timeval tv{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    ::shutdown(fd, SHUT_WR);  // end of request: the server answers what it got and closes
    if (read_reply) {
      char buf[4096];
      while (::recv(fd, buf, sizeof buf, 0) > 0) {
      }
    }
  }
  ::close(fd);
}

// Requests a browser, a scanner or a confused client would send.
std::vector<std::string> hostile_requests(std::mt19937& rng) {
  std::vector<std::string> v = {
      "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET /foo HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET /metrics/../../etc/passwd HTTP/1.1\r\n\r\n",
      "POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
      "PUT /readyz HTTP/1.1\r\nContent-Length: 100000000\r\n\r\nxx",
      "DELETE /healthz HTTP/1.0\r\n\r\n",
      "BREW /coffee HTCPCP/1.0\r\n\r\n",
      "GET /readyz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n",
      "GET " + std::string(20000, 'a') + " HTTP/1.1\r\n\r\n",
      "GET / HTTP/1.1\r\n" + std::string(40000, 'H') + ": v\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: x\r\nRange: bytes=-1,-2,-3\r\n\r\n",
      "\r\n\r\n\r\n",
      "GET",
      std::string("GET /\0metrics HTTP/1.1\r\n\r\n", 27),
      "GET /%00%ff%fe HTTP/1.1\r\n\r\n",
      "OPTIONS * HTTP/1.1\r\n\r\n",
      "GET /metrics HTTP/9.9\r\n\r\n",
  };
  std::string junk(512, '\0');
  for (auto& c : junk) c = static_cast<char>(rng());
  v.push_back(junk);
  return v;
}

TEST(ServiceHttp, ThousandsOfHostileRequestsNeverStopAService) {
  ts::TempDir dir;
  ts::RedisServer redis;
  Decoder d(dir.path(), write_config(dir.path(), redis.port(), dir.path() / "outputs"));
  ASSERT_TRUE(ts::wait_for([&] { return d.read_ports(); }, 20)) << d.log();
  ASSERT_TRUE(ts::wait_for([&] { return d.status(d.health_port_, "/readyz") == 200; }, 20))
      << d.log();
  std::mt19937 rng(12345);
  int sent = 0;
  for (int round = 0; round < 60; ++round) {
    for (const auto& req : hostile_requests(rng)) {
      for (int port : {d.metrics_port_, d.health_port_}) {
        raw_exchange(port, req, round % 3 == 0);
        ++sent;
      }
    }
    ASSERT_TRUE(d.alive()) << "after " << sent << " requests\n" << d.log();
  }
  EXPECT_GE(sent, 2000);
  EXPECT_EQ(d.status(d.metrics_port_, "/"), 404);
  EXPECT_EQ(d.status(d.metrics_port_, "/foo"), 404);
  EXPECT_EQ(d.status(d.health_port_, "/nope"), 404);
  EXPECT_EQ(d.status(d.health_port_, "/healthz"), 200);
  auto m = h3pipe::preflight::http_get(fmt::format("http://127.0.0.1:{}/metrics", d.metrics_port_),
                                       2000ms);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->status, 200);
  EXPECT_NE(m->body.find("h3pipe_service_up"), std::string::npos);
  EXPECT_TRUE(d.alive());
}

TEST(ServiceHttp, AServiceThatCannotWriteItsRootsIsUpNotReadyAndSaysWhy) {
  ts::TempDir dir;
  ts::RedisServer redis;
  // The output root lies beneath a regular file: it cannot be created (as root too).
  const fs::path blocker = dir.path() / "data";
  std::ofstream(blocker) << "not a folder\n";
  Decoder d(dir.path(), write_config(dir.path(), redis.port(), blocker / "outputs"));
  ASSERT_TRUE(ts::wait_for([&] { return d.read_ports(); }, 20)) << d.log();
  ASSERT_TRUE(ts::wait_for([&] { return d.log().find("not ready") != std::string::npos; }, 20))
      << d.log();
  EXPECT_NE(d.log().find((blocker / "outputs").string()), std::string::npos) << d.log();
  EXPECT_EQ(d.status(d.health_port_, "/readyz"), 503);
  EXPECT_EQ(d.status(d.health_port_, "/healthz"), 200);
  EXPECT_TRUE(d.alive());
  // The operator fixes the mount: the service becomes ready without a restart.
  fs::remove(blocker);
  EXPECT_TRUE(ts::wait_for([&] { return d.status(d.health_port_, "/readyz") == 200; }, 20))
      << d.log();
  EXPECT_TRUE(d.alive());
}

}  // namespace
