#include "common/api/server.h"

#include <memory>

#include "common/api/context.h"
#include "common/api/events_hub.h"
#include "common/api/webhook_dispatch.h"
#include "common/api/gate.h"
#include "common/api/gated_http.h"
#include "common/api/routes.h"
#include "common/queue/server.h"

namespace h3pipe::api {

struct Server::Impl {
  Impl(config::Cluster cluster, RedisFactory redis, ServerOptions options)
      : ctx(std::move(cluster), std::move(redis), std::move(options)) {}
  Context ctx;
  GatedHttp http;
  std::unique_ptr<Gate> gate;
  std::shared_ptr<EventsHub> events;  // SSE subscribers: stopped before ctx goes
  std::unique_ptr<WebhookDispatcher> webhooks;  // delivery threads: stopped before ctx goes

  void routes() {
    const ServerOptions& o = ctx.o;
    http.set_payload_max_length(o.max_body_bytes);
    gate = std::make_unique<Gate>(
        GateLimits{.max_body_bytes = o.max_body_bytes, .threads = o.threads});
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
    register_video_routes(http, ctx);
    register_runs_routes(http, ctx);
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
  return impl_->gate->bind(impl_->ctx.o.bind, impl_->ctx.o.port);
}
void Server::listen() {
  const auto write_timeout = GateLimits{}.write_timeout;
  impl_->gate->run([this, write_timeout](int fd, const std::string& head) {
    impl_->http.serve(fd, head, write_timeout);
  });
}
void Server::stop() {
  impl_->gate->stop();
}

}  // namespace h3pipe::api
