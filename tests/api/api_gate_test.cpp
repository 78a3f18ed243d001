// The accept gate in front of h3pipe-api (common/api/gate.h; #35 item 5, #37): real loopback
// sockets.  A request reaches a pool thread only once whole (a body sent in pieces, a chunked
// body); one that never completes gets 408 within request_timeout; one more waiting connection
// than max_pending evicts the oldest (408); stalled sockets hold no pool thread.  Keep-alive
// through httplib (gated_http.h): the next requests on the same connection, pipelined ones too,
// an idle one closed without a reply, Connection: close and the per-connection limit honoured.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include "common/api/gate.h"
#include "common/api/gated_http.h"

namespace {
using namespace std::chrono_literals;
using h3pipe::api::Gate;
using h3pipe::api::GateLimits;

int connect_to(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}
void send_all(int fd, const std::string& s) {
  ASSERT_EQ(::send(fd, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size()));
}
// Everything the server sends until it closes, or what came within `ms`.
std::string read_all(int fd, int ms = 3000) {
  std::string out;
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, ms) <= 0) break;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// A gate whose serve() echoes the request's bytes back as the reply body.
struct Running {
  Gate gate;
  int port = 0;
  std::thread loop;
  std::mutex mu;
  std::vector<std::string> seen;
  explicit Running(GateLimits l) : gate(l) {
    auto p = gate.bind("127.0.0.1", 0);
    EXPECT_TRUE(p.ok());
    port = *p;
    loop = std::thread([this] {
      gate.run([this](int fd, const std::string& req) {
        {
          std::lock_guard lk(mu);
          seen.push_back(req);
        }
        const std::string r = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(req.size()) +
                              "\r\nConnection: close\r\n\r\n" + req;
        (void)::send(fd, r.data(), r.size(), MSG_NOSIGNAL);
      });
    });
  }
  ~Running() {
    gate.stop();
    loop.join();
  }
};

TEST(ApiGate, HandsOverOnlyWholeRequests) {
  Running g(GateLimits{});
  const std::string head = "POST /v1/videos HTTP/1.1\r\nHost: x\r\ncontent-length: 10\r\n\r\n";
  int fd = connect_to(g.port);
  send_all(fd, head + "01234");
  std::this_thread::sleep_for(200ms);  // the first half alone must not be served
  {
    std::lock_guard lk(g.mu);
    EXPECT_TRUE(g.seen.empty());
  }
  send_all(fd, "56789");
  EXPECT_NE(read_all(fd).find(head + "0123456789"), std::string::npos);
  ::close(fd);

  const std::string chunked =
      "POST /v1/videos HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n";
  fd = connect_to(g.port);
  send_all(fd, chunked);
  std::this_thread::sleep_for(200ms);
  {
    std::lock_guard lk(g.mu);
    EXPECT_EQ(g.seen.size(), 1u);
  }
  send_all(fd, "0\r\n\r\n");
  EXPECT_NE(read_all(fd).find(chunked + "0\r\n\r\n"), std::string::npos);
  ::close(fd);
}

TEST(ApiGate, ExpectContinueIsAnsweredBeforeTheBodyAndOnlyOnce) {
  Running g(GateLimits{});
  int fd = connect_to(g.port);
  send_all(fd,
           "POST /v1/videos HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
           "Content-Length: 4\r\n\r\n");
  char buf[64] = {};
  pollfd p{fd, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 2000), 1);  // curl would otherwise wait a second
  ASSERT_GT(::recv(fd, buf, sizeof buf - 1, 0), 0);
  EXPECT_STREQ(buf, "HTTP/1.1 100 Continue\r\n\r\n");
  send_all(fd, "body");
  const std::string got = read_all(fd);
  // The request served has no Expect line left, so httplib sends no second 100.
  EXPECT_NE(got.find("Host: x\r\nContent-Length: 4\r\n\r\nbody"), std::string::npos) << got;
  ::close(fd);
}

TEST(ApiGate, StalledRequestGets408WithinTheTimeout) {
  GateLimits l;
  l.request_timeout = 500ms;
  Running g(l);
  int fd = connect_to(g.port);
  send_all(fd, "GET /readyz HTTP/1.1\r\n");
  const auto t0 = std::chrono::steady_clock::now();
  const std::string got = read_all(fd, 3000);
  EXPECT_EQ(got.rfind("HTTP/1.1 408", 0), 0u) << got;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  ::close(fd);
}

TEST(ApiGate, OneMoreThanMaxPendingEvictsTheOldestAndStallersHoldNoThread) {
  GateLimits l;
  l.max_pending = 8;
  l.threads = 1;
  Running g(l);
  std::vector<int> stalled;
  for (int i = 0; i < 8; ++i) stalled.push_back(connect_to(g.port));
  std::this_thread::sleep_for(100ms);
  const int fresh = connect_to(g.port);  // the 9th: the oldest staller goes
  EXPECT_EQ(read_all(stalled[0], 2000).rfind("HTTP/1.1 408", 0), 0u);
  // With one pool thread and 7 stallers still connected, a whole request is answered at once.
  send_all(fresh, "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(read_all(fresh, 2000).find("GET /readyz"), std::string::npos);
  for (int fd : stalled) ::close(fd);
  ::close(fresh);
}

// With the process out of descriptors, a new connection makes room by evicting the oldest
// waiting one (408) and a whole request is still answered.  The gate runs in a child process
// whose RLIMIT_NOFILE leaves it about 16 descriptors to spare.
TEST(ApiGate, OutOfDescriptorsEvictsTheOldestWaiting) {
  int port_pipe[2];
  ASSERT_EQ(::pipe(port_pipe), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    GateLimits l;
    l.threads = 1;
    Gate gate(l);
    auto p = gate.bind("127.0.0.1", 0);
    if (!p.ok()) ::_exit(2);
    long open = 0;
    for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++open;
    rlimit rl{static_cast<rlim_t>(open + 16), static_cast<rlim_t>(open + 16)};
    if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) ::_exit(3);
    const int port = *p;
    (void)!::write(port_pipe[1], &port, sizeof port);
    gate.run([](int fd, const std::string&) {
      static constexpr char kOk[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
      (void)::send(fd, kOk, sizeof kOk - 1, MSG_NOSIGNAL);
    });
    ::_exit(0);
  }
  int port = 0;
  ASSERT_EQ(::read(port_pipe[0], &port, sizeof port), static_cast<ssize_t>(sizeof port));
  std::vector<int> stalled;
  for (int i = 0; i < 40; ++i) stalled.push_back(connect_to(port));
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(read_all(stalled[0], 2000).rfind("HTTP/1.1 408", 0), 0u);
  const int fresh = connect_to(port);
  send_all(fresh, "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(read_all(fresh, 2000).find("\r\n\r\nok"), std::string::npos);
  for (int fd : stalled) ::close(fd);
  ::close(fresh);
  ::kill(child, SIGTERM);
  ::waitpid(child, nullptr, 0);
}

}  // namespace

namespace {
// Reads until `want` is in what came (or 3 s passed).
std::string read_until(int fd, const std::string& want) {
  std::string out;
  char buf[4096];
  const auto until = std::chrono::steady_clock::now() + 3s;
  while (out.find(want) == std::string::npos && std::chrono::steady_clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// The gate in front of httplib's routing (gated_http.h), as h3pipe-api runs it.
struct RunningHttp {
  h3pipe::api::GatedHttp http;
  Gate gate;
  int port = 0;
  std::thread loop;
  explicit RunningHttp(GateLimits l) : gate(l) {
    http.Get("/a", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("a-reply", "text/plain");
    });
    http.Post("/b", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content("b:" + req.body, "text/plain");
    });
    auto p = gate.bind("127.0.0.1", 0);
    EXPECT_TRUE(p.ok());
    port = *p;
    loop = std::thread([this] {
      gate.run([this](int fd, const std::string& head) { http.serve(fd, head, 10s); });
    });
  }
  ~RunningHttp() {
    gate.stop();
    loop.join();
  }
};
}  // namespace

TEST(ApiGate, KeepAliveServesTheNextRequestsOnTheSameConnection) {
  GateLimits l;
  l.keep_alive_timeout = 400ms;
  RunningHttp g(l);
  int fd = connect_to(g.port);
  send_all(fd, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string r = read_until(fd, "a-reply");
  EXPECT_NE(r.find("a-reply"), std::string::npos) << r;
  EXPECT_NE(r.find("Keep-Alive: timeout=5, max=1000"), std::string::npos) << r;
  EXPECT_EQ(r.find("Connection: close"), std::string::npos) << r;
  // A body, and a second request sent with it (pipelined): both answered, in order.
  send_all(fd,
           "POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
           "GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
  r = read_until(fd, "a-reply");
  const auto b = r.find("b:hello"), a = r.find("a-reply");
  EXPECT_NE(b, std::string::npos) << r;
  EXPECT_NE(a, std::string::npos) << r;
  EXPECT_LT(b, a) << r;
  // Idle past keep_alive_timeout: closed without a reply (no 408 on a connection at rest).
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(read_all(fd, 3000), "");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  char c;
  EXPECT_EQ(::recv(fd, &c, 1, MSG_DONTWAIT), 0);  // the server closed it
  ::close(fd);
}

// A pool thread that answered a kept-alive request lingers for the connection's next one (no
// hand-over to the loop and back, #37's tail), but at most max_lingering threads at once: with
// 2 threads and 1 lingering for 10 s, a third client is still answered at once, every kept-alive
// connection serves its next request (a head sent in two parts too), and stop() waits for no
// lingering thread.
TEST(ApiGate, LingeringThreadsAreBoundedAndServeTheNextRequest) {
  GateLimits l;
  l.threads = 2;
  l.max_lingering = 1;
  l.linger = 10s;
  std::chrono::steady_clock::time_point stopped;
  {
    RunningHttp g(l);
    const int a = connect_to(g.port), b = connect_to(g.port);
    for (int fd : {a, b}) {
      send_all(fd, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
      EXPECT_NE(read_until(fd, "a-reply").find("a-reply"), std::string::npos);
    }
    const auto t0 = std::chrono::steady_clock::now();
    const int c = connect_to(g.port);
    send_all(c, "GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    EXPECT_NE(read_all(c).find("a-reply"), std::string::npos);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
    ::close(c);
    for (int fd : {a, b}) {
      send_all(fd, "GET /a HTTP/1.1\r\nHost: x\r\n");
      std::this_thread::sleep_for(50ms);
      send_all(fd, "\r\n");
      const std::string r = read_until(fd, "a-reply");
      EXPECT_NE(r.find("a-reply"), std::string::npos) << r;
      EXPECT_EQ(r.find("400"), std::string::npos) << r;
    }
    ::close(a);
    ::close(b);
    stopped = std::chrono::steady_clock::now();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - stopped, 2s);
}

TEST(ApiGate, KeepAliveEndsOnConnectionCloseAndAtTheLimit) {
  GateLimits l;
  l.max_requests_per_connection = 2;
  RunningHttp g(l);
  int fd = connect_to(g.port);
  send_all(fd, "GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  std::string r = read_all(fd);  // ends: the server closes
  EXPECT_NE(r.find("Connection: close"), std::string::npos) << r;
  EXPECT_NE(r.find("a-reply"), std::string::npos) << r;
  ::close(fd);
  fd = connect_to(g.port);
  send_all(fd, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
  r = read_until(fd, "a-reply");
  EXPECT_EQ(r.find("Connection: close"), std::string::npos) << r;
  send_all(fd, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
  r = read_all(fd);  // the second of at most 2: answered, then closed
  EXPECT_NE(r.find("Connection: close"), std::string::npos) << r;
  EXPECT_NE(r.find("a-reply"), std::string::npos) << r;
  ::close(fd);
}

TEST(ApiGate, ABodyHttplibDidNotReadClosesTheConnection) {
  RunningHttp g(GateLimits{});
  // GET with a body: httplib routes it without reading the body, which must not be taken for
  // the next request.
  int fd = connect_to(g.port);
  send_all(
      fd,
      "GET /a HTTP/1.1\r\nHost: x\r\nContent-Length: 28\r\n\r\nGET /a HTTP/1.1\r\nHost: y\r\n\r\n");
  const std::string r = read_all(fd);
  EXPECT_NE(r.find("a-reply"), std::string::npos) << r;
  EXPECT_EQ(r.find("a-reply"), r.rfind("a-reply")) << r;  // answered once, then closed
  ::close(fd);
}
