#include "common/metrics/http_servers.h"

#include <httplib.h>
#include <prometheus/text_serializer.h>

#include <chrono>
#include <sstream>
#include <thread>

namespace h3pipe::metrics {

class HttpEndpoint {
 public:
  HttpEndpoint() {
    server_.new_task_queue = [] { return new httplib::ThreadPool(2); };
    server_.set_payload_max_length(8 * 1024);
    server_.set_read_timeout(2, 0);
    server_.set_write_timeout(2, 0);
    server_.set_keep_alive_max_count(8);
    server_.set_keep_alive_timeout(2);
    // A handler that throws answers 500 instead of ending the process.
    server_.set_exception_handler([](const httplib::Request&, httplib::Response& res,
                                     std::exception_ptr) {
      res.status = 500;
      res.set_content("internal error\n", "text/plain");
    });
    server_.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (res.body.empty()) res.set_content(res.status == 404 ? "not found\n" : "bad request\n",
                                            "text/plain");
    });
  }
  ~HttpEndpoint() {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  httplib::Server& server() { return server_; }

  // Binds bind:port (0 = a free port, read back) and serves on a thread of its own.
  Status listen(const ErrorCode& in_use, const std::string& what, const std::string& bind, int port) {
    if (port == 0) {
      port_ = server_.bind_to_any_port(bind);
    } else if (server_.bind_to_port(bind, port)) {
      port_ = port;
    }
    if (port_ <= 0)
      return make_error(in_use, "cannot serve {} on {}:{}: the address is in use or not "
                        "local", what, bind, port);
    // The socket listens from bind on; the accept loop starts on the thread.  Wait for it, so
    // that a destructor right after start() finds a running server to stop.
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!server_.is_running() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return {};
  }
  int port() const { return port_; }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = -1;
};

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(
    const std::string& bind, int port, std::shared_ptr<prometheus::Registry> registry) {
  auto s = std::unique_ptr<MetricsServer>(new MetricsServer());
  s->http_ = std::make_unique<HttpEndpoint>();
  s->http_->server().Get("/metrics", [registry](const httplib::Request&, httplib::Response& res) {
    std::ostringstream out;
    prometheus::TextSerializer().Serialize(out, registry->Collect());
    res.set_content(out.str(), "text/plain; version=0.0.4; charset=utf-8");
  });
  H3_TRY(s->http_->listen(errc::metrics::kBind, "metrics", bind, port));
  return s;
}

MetricsServer::~MetricsServer() = default;
int MetricsServer::port() const { return http_->port(); }

Result<std::unique_ptr<HealthServer>> HealthServer::start(const std::string& bind, int port) {
  auto h = std::unique_ptr<HealthServer>(new HealthServer());
  h->http_ = std::make_unique<HttpEndpoint>();
  auto& srv = h->http_->server();
  srv.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  srv.Get("/readyz", [st = h->state_](const httplib::Request&, httplib::Response& res) {
    const bool r = st->ready.load();
    std::string failed;
    {
      std::lock_guard<std::mutex> l(st->mu);
      failed = st->failed;
    }
    res.status = r ? 200 : 503;
    res.set_content(r ? "ready\n" : failed.empty() ? "not ready\n" : "failed: " + failed + "\n",
                    "text/plain");
  });
  H3_TRY(h->http_->listen(errc::health::kBind, "health", bind, port));
  return h;
}

HealthServer::~HealthServer() = default;

void HealthServer::set_failed(std::string reason) {
  std::lock_guard<std::mutex> l(state_->mu);
  state_->failed = std::move(reason);
}
int HealthServer::port() const { return http_->port(); }

}  // namespace h3pipe::metrics
