// A ComfyUI server that answers JSON nesting 300,000 levels (issue #35 D2): the sampler's client
// once overflowed its stack printing a 400's `message` or a /history status (3 restarts, then the
// job failed).  Each answer must now fail the call with a reason that names the JSON pointer.
// The server is a real socket on 127.0.0.1 port 0 answering canned bodies per path.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <string>
#include <thread>

#include "common/runtime/comfyui_client.h"

namespace h3pipe::runtime::comfyui {
namespace {

std::string deep(std::size_t levels) {
  return std::string(levels, '[') + std::string(levels, ']');
}

// Answers every request whose path starts with a key of `answers` with that status and body
// (the longest key wins), 404 otherwise.  One connection at a time.
class CannedServer final {
 public:
  explicit CannedServer(std::map<std::string, std::pair<int, std::string>> answers)
      : answers_(std::move(answers)) {
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
  ~CannedServer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  CannedServer(const CannedServer&) = delete;
  CannedServer& operator=(const CannedServer&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  void serve() {
    while (!stop_) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      std::string req;
      char buf[65536];
      std::size_t head_end;
      while ((head_end = req.find("\r\n\r\n")) == std::string::npos) {
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        req.append(buf, static_cast<std::size_t>(n));
      }
      if (head_end == std::string::npos) {
        ::close(c);
        continue;
      }
      std::size_t length = 0;
      if (auto p = req.find("Content-Length: "); p != std::string::npos && p < head_end)
        length = std::stoul(req.substr(p + 16));
      if (req.find("Expect: 100-continue") < head_end) {
        const std::string cont = "HTTP/1.1 100 Continue\r\n\r\n";
        (void)::send(c, cont.data(), cont.size(), MSG_NOSIGNAL);
      }
      while (req.size() < head_end + 4 + length) {
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        req.append(buf, static_cast<std::size_t>(n));
      }
      const auto sp = req.find(' ');
      const std::string path = req.substr(sp + 1, req.find(' ', sp + 1) - sp - 1);
      int status = 404;
      std::string body = "{}";
      std::size_t best = 0;
      for (const auto& [prefix, answer] : answers_)
        if (path.rfind(prefix, 0) == 0 && prefix.size() >= best) {
          best = prefix.size();
          status = answer.first;
          body = answer.second;
        }
      const std::string resp =
          "HTTP/1.1 " + std::to_string(status) +
          " X\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
          "\r\nConnection: close\r\n\r\n" + body;
      (void)::send(c, resp.data(), resp.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  }

  std::map<std::string, std::pair<int, std::string>> answers_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

const nlohmann::json kGraph = {{"1", {{"class_type", "X"}, {"inputs", nlohmann::json::object()}}}};

TEST(ComfyUiDeepJson, ARejectionWhoseMessageNests300000LevelsFailsTheCallNamingThePath) {
  CannedServer s({{"/prompt",
                   {400, R"({"error": {"type": "x", "message": )" + deep(300000) +
                             R"(}, "node_errors": {}})"}}});
  Client c(s.url(), {});
  auto r = c.queue_prompt(kGraph, {"h3pipe", "", {}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, errc::runtime::kComfyuiHttp.id);
  EXPECT_NE(r.error().message.find("POST /prompt answered HTTP 400: not usable JSON (nesting "
                                   "deeper than 128 levels at /error/message/0/0/0/0/"),
            std::string::npos)
      << r.error().message.substr(0, 400);
}

TEST(ComfyUiDeepJson, AHistoryStatusThatNests300000LevelsFailsTheCall) {
  const std::string id = "p-1";
  CannedServer s({{"/history/" + id,
                   {200, R"({"p-1": {"status": {"status_str": "error", "messages": )" +
                             deep(300000) + "}}}"}}});
  Client c(s.url(), {});
  auto st = c.history(id);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, errc::runtime::kComfyuiHttp.id);
  EXPECT_NE(st.error().message.find("nesting deeper than 128 levels at /p-1/status/messages/0/"),
            std::string::npos)
      << st.error().message.substr(0, 400);
}

TEST(ComfyUiDeepJson, ADeepQueueAndADeepUploadAnswerFailTheCall) {
  CannedServer s({{"/history/", {200, "{}"}},
                  {"/queue", {200, R"({"queue_running": )" + deep(300000) + "}"}},
                  {"/upload/image", {200, R"({"name": )" + deep(300000) + "}"}}});
  Client c(s.url(), {});
  auto where = c.locate("p-2");
  ASSERT_FALSE(where.ok());
  EXPECT_NE(where.error().message.find("GET /queue answered not usable JSON (nesting deeper than "
                                       "128 levels at /queue_running/0/"),
            std::string::npos)
      << where.error().message.substr(0, 400);
  int fd = ::open("/dev/null", O_RDONLY);
  auto up = c.upload(fd, 0, "a.png", "h3");
  ::close(fd);
  ASSERT_FALSE(up.ok());
  EXPECT_NE(up.error().message.find("nesting deeper than 128 levels at /name/0/"),
            std::string::npos)
      << up.error().message.substr(0, 400);
}

TEST(ComfyUiDeepJson, ARejectionWithinTheLimitIsStillDescribed) {
  // 100 levels is within the limit: the rejection is read as before.
  CannedServer s({{"/prompt",
                   {400, R"({"error": {"type": "x", "message": "bad", "details": )" + deep(100) +
                             R"(}, "node_errors": {}})"}}});
  Client c(s.url(), {});
  auto r = c.queue_prompt(kGraph, {"h3pipe", "", {}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, errc::runtime::kPermanentComfyuiRejected.id);
  EXPECT_NE(r.error().message.find("rejected the workflow: bad: [[["), std::string::npos)
      << r.error().message.substr(0, 400);
}

}  // namespace
}  // namespace h3pipe::runtime::comfyui
