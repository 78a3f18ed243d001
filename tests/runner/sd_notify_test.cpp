// sd_notify without libsystemd (common/runner/sd_notify.h): what systemd would receive on the
// socket it names in $NOTIFY_SOCKET, read back from a real AF_UNIX datagram socket.
#include "common/runner/sd_notify.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>

#include "common/metrics/http_servers.h"
#include "tests/support/temp_dir.h"

namespace h3pipe::runner {
namespace {

namespace fs = std::filesystem;

// A datagram socket bound where systemd would listen: a path or an abstract name.
class Listener {
 public:
  explicit Listener(const std::string& where) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    socklen_t len;
    if (where.front() == '@') {
      std::memcpy(a.sun_path + 1, where.data() + 1, where.size() - 1);
      len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + where.size());
    } else {
      std::memcpy(a.sun_path, where.data(), where.size());
      len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + where.size() + 1);
    }
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), len), 0) << std::strerror(errno);
  }
  ~Listener() { ::close(fd_); }
  // The next datagram, or nullopt after `ms`.
  std::optional<std::string> next(int ms = 5000) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, ms) != 1) return std::nullopt;
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n < 0) return std::nullopt;
    return std::string(buf, static_cast<std::size_t>(n));
  }
  // Datagrams until one contains `what` (returned), or nullopt at the deadline.
  std::optional<std::string> until(const std::string& what, int ms = 10000) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < deadline) {
      auto m = next(100);
      if (m && m->find(what) != std::string::npos) return m;
    }
    return std::nullopt;
  }

 private:
  int fd_ = -1;
};

class SdNotify : public ::testing::Test {
 protected:
  void TearDown() override { ::unsetenv("NOTIFY_SOCKET"); }
  test_support::TempDir tmp_{"h3pipe_sdnotify"};
  fs::path dir_ = tmp_.path();
};

TEST_F(SdNotify, SendsTheStateToAPathSocket) {
  const std::string path = (dir_ / "notify").string();
  Listener l(path);
  ASSERT_TRUE(sd_notify(path, "READY=1\nSTATUS=sampler s0 on a: ready").ok());
  EXPECT_EQ(l.next(), "READY=1\nSTATUS=sampler s0 on a: ready");
}

TEST_F(SdNotify, SendsToTheAbstractNamespace) {
  const std::string name = "@h3pipe-sdnotify-test-" + std::to_string(::getpid());
  Listener l(name);
  ASSERT_TRUE(sd_notify(name, "READY=1").ok());
  EXPECT_EQ(l.next(), "READY=1");
}

TEST_F(SdNotify, NoSocketSendsNothingAndBadOnesSayWhy) {
  EXPECT_TRUE(sd_notify("", "READY=1").ok());  // not under systemd
  auto rel = sd_notify("run/notify", "READY=1");
  ASSERT_FALSE(rel.ok());
  EXPECT_EQ(rel.error().message,
            "NOTIFY_SOCKET=run/notify: expected an absolute path or an @abstract name");
  const std::string gone = (dir_ / "nobody-listens").string();
  auto no = sd_notify(gone, "READY=1");
  ASSERT_FALSE(no.ok());
  EXPECT_EQ(no.error().message, "NOTIFY_SOCKET=" + gone + ": sendto: No such file or directory");
  auto longer = sd_notify("/" + std::string(200, 'x'), "READY=1");
  ASSERT_FALSE(longer.ok());
  EXPECT_NE(longer.error().message.find("longer than 107 bytes"), std::string::npos);
}

// READY=1 only once /readyz answers 200; STATUS= follows what it says; STOPPING=1 at the end.
TEST_F(SdNotify, NotifierSendsReadyWhenTheProbeSaysReady) {
  const std::string path = (dir_ / "notify").string();
  Listener l(path);
  auto hs = metrics::HealthServer::start("127.0.0.1", 0);
  ASSERT_TRUE(hs.ok());
  metrics::HealthServer& health = **hs;
  ::setenv("NOTIFY_SOCKET", path.c_str(), 1);
  std::atomic<bool> stop{false};
  {
    ReadinessNotifier n("decoder dec on b", "metrics :9404", "127.0.0.1", health.port(), &stop);
    EXPECT_EQ(l.next(), "STATUS=decoder dec on b: starting");
    // It asked /readyz, heard "not ready", and said so: no READY=1 before that.
    auto m = l.next();
    ASSERT_TRUE(m);
    EXPECT_EQ(*m, "STATUS=decoder dec on b: not ready");
    EXPECT_EQ(probe_readyz("127.0.0.1", health.port()).status, 503);

    health.set_ready(true);
    auto ready = l.until("READY=1");
    ASSERT_TRUE(ready) << "no READY=1 after /readyz said ready";
    EXPECT_EQ(*ready, "READY=1\nSTATUS=decoder dec on b: ready, metrics :9404");
    EXPECT_EQ(probe_readyz("127.0.0.1", health.port()).status, 200);

    health.set_degraded("worker", "disk full at /data");
    auto degraded = l.until("degraded");
    ASSERT_TRUE(degraded);
    EXPECT_EQ(*degraded, "STATUS=decoder dec on b: degraded: disk full at /data");
  }
  EXPECT_EQ(l.until("STOPPING=1"), "STOPPING=1\nSTATUS=decoder dec on b: stopping");
}

TEST_F(SdNotify, ProbeOfNothingListeningIsZero) {
  auto hs = metrics::HealthServer::start("127.0.0.1", 0);
  ASSERT_TRUE(hs.ok());
  const int port = (*hs)->port();
  hs->reset();  // closed: nothing listens there now
  EXPECT_EQ(probe_readyz("127.0.0.1", port, 500).status, 0);
}

}  // namespace
}  // namespace h3pipe::runner
