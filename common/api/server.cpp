#include "common/api/server.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <thread>

#include "common/api/context.h"
#include "common/api/events_hub.h"
#include "common/api/gate.h"
#include "common/api/gated_http.h"
#include "common/api/peers.h"
#include "common/api/routes.h"
#include "common/api/tls_front.h"
#include "common/api/webhook_dispatch.h"
#include "common/core/error_codes.h"
#include "common/queue/server.h"

namespace h3pipe::api {
namespace {
// When the request this pool thread serves came in (h3pipe_api_request_seconds).
thread_local std::chrono::steady_clock::time_point request_start;
}  // namespace

struct Server::Impl {
  Impl(config::Cluster cluster, RedisFactory redis, ServerOptions options)
      : ctx(std::move(cluster), std::move(redis), std::move(options)) {}
  Context ctx;
  GatedHttp http;
  std::unique_ptr<Gate> gate;
  std::unique_ptr<TlsFront> tls;      // with tls_cert: owns the public port, relays to the gate
  std::shared_ptr<EventsHub> events;  // SSE subscribers: stopped before ctx goes
  std::unique_ptr<WebhookDispatcher> webhooks;  // delivery threads: stopped before ctx goes
  int port = 0;
  // The announcer (peers.h): this host's URL in Redis, now and every kAnnounceEvery.
  std::thread announcer;
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;

  void announce_loop() {
    const std::string url =
        advertised_url(ctx.c, ctx.o.host, ctx.o.bind, port, ctx.o.advertise_url, tls != nullptr);
    std::unique_lock lk(mu);
    while (!stopping) {
      lk.unlock();
      if (auto l = ctx.lease(); l.ok()) (void)announce(*l->r, ctx.o.host, url);
      lk.lock();
      cv.wait_for(lk, kAnnounceEvery, [this] { return stopping; });
    }
  }

  void routes() {
    const ServerOptions& o = ctx.o;
    // httplib reads up to the upload limit; the gate lets that much through only for a multipart
    // POST /v1/videos (whose handler streams it to disk and stops at the limit), and every other
    // request with a larger Content-Length is answered 413 before its body is read.
    // (With room for the form's text fields and its framing: the upload's own count, which
    // names input_reference in its 413, is the one that stops a streamed upload.)
    http.set_payload_max_length(
        std::max(o.max_body_bytes, o.max_upload_bytes + o.max_body_bytes + 64 * 1024));
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      const bool upload =
          req.method == "POST" && req.path == "/v1/videos" &&
          req.get_header_value("Content-Type").find("multipart/form-data") != std::string::npos;
      const std::uint64_t n =
          std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10);
      if (n <= (upload ? ctx.o.max_upload_bytes : ctx.o.max_body_bytes))
        return httplib::Server::HandlerResponse::Unhandled;
      send_error(res, {413,
                       upload ? fmt::format("input_reference: the upload is larger than {} bytes "
                                            "(h3pipe-api --max-upload-bytes)",
                                            ctx.o.max_upload_bytes)
                              : fmt::format("the request body is larger than {} bytes",
                                            ctx.o.max_body_bytes),
                       "invalid_request_error", upload ? "input_reference" : "", "body_too_large"});
      return httplib::Server::HandlerResponse::Handled;
    });
    // An upload goes to a pool thread with its head, and streams to disk from there.
    gate = std::make_unique<Gate>(GateLimits{.max_body_bytes = o.max_body_bytes,
                                             .max_upload_bytes = o.max_upload_bytes,
                                             .stream_uploads = true,
                                             .threads = o.threads});
    http.set_error_handler([this](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty()) return;
      if (res.status == 413)
        send_error(
            res,
            {413, fmt::format("the request body is larger than {} bytes", ctx.o.max_body_bytes),
             "invalid_request_error", "", "body_too_large"});
      else if (res.status == 404)
        send_error(res, {404, "no such endpoint", "invalid_request_error", "", "not_found"});
      else
        send_error(res, {res.status, "bad request", "invalid_request_error", "", ""});
    });
    // Every request httplib answered, by route (api_metrics.h).
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      ctx.metrics.request(
          req.method, req.path, res.status,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - request_start).count());
    });
    register_video_routes(http, ctx);
    register_runs_routes(http, ctx);
    register_admin_routes(http, ctx);
    register_control_routes(http, ctx);
    register_gantt_routes(http, ctx);
    register_ui_routes(http, ctx);
    events = register_events_routes(http, ctx);
    webhooks = std::make_unique<WebhookDispatcher>(ctx, WebhookOptions::from_env());
    http.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("ok\n", "text/plain");
    });
    // Ready once Redis answers the operator's PING (`h3pipe start` waits for it).
    http.Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
      auto l = ctx.lease();
      const Status p = l.ok() ? queue::ping(*l->r) : Status(l.error());
      res.status = p.ok() ? 200 : 503;
      res.set_content(p.ok() ? "ready\n" : "not ready: " + p.error().message + "\n", "text/plain");
    });
  }
};

Server::Server(config::Cluster cluster, RedisFactory redis, ServerOptions o)
    : impl_(std::make_unique<Impl>(std::move(cluster), std::move(redis), std::move(o))) {
  impl_->routes();
}
Server::~Server() {
  stop();
}

Result<int> Server::bind() {
  const ServerOptions& o = impl_->ctx.o;
  if (o.tls_cert.empty() != o.tls_key.empty())
    return make_error(errc::cli::kFlag, "--tls-cert and --tls-key go together (got only {})",
                      o.tls_cert.empty() ? "--tls-key" : "--tls-cert");
  if (o.tls_cert.empty()) {
    auto p = impl_->gate->bind(o.bind, o.port);
    if (p.ok()) impl_->port = *p;
    return p;
  }
  auto front = TlsFront::create({.cert_file = o.tls_cert, .key_file = o.tls_key});
  if (!front.ok()) return front.error();
  impl_->tls = std::move(*front);
  auto p = impl_->tls->bind(o.bind, o.port);  // makes the backend's directory
  if (!p.ok()) return p;
  if (auto g = impl_->gate->bind_unix(impl_->tls->backend_path()); !g.ok()) return g.error();
  impl_->port = *p;
  return p;
}
std::shared_ptr<prometheus::Registry> Server::registry() const {
  return impl_->ctx.metrics.registry();
}
void Server::listen() {
  const auto write_timeout = GateLimits{}.write_timeout;
  if (!impl_->ctx.o.host.empty())
    impl_->announcer = std::thread([this] { impl_->announce_loop(); });
  std::thread tls;
  if (impl_->tls) tls = std::thread([this] { impl_->tls->run(); });
  impl_->gate->run([this, write_timeout](int fd, const std::string& head) {
    request_start = std::chrono::steady_clock::now();
    impl_->http.serve(fd, head, write_timeout);
  });
  if (tls.joinable()) {
    impl_->tls->stop();
    tls.join();
  }
  {
    std::lock_guard lk(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  if (impl_->announcer.joinable()) impl_->announcer.join();
}
void Server::stop() {
  impl_->gate->stop();
  if (impl_->tls) impl_->tls->stop();
}

}  // namespace h3pipe::api
