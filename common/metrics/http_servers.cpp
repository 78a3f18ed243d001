#include "common/metrics/http_servers.h"

#include <prometheus/text_serializer.h>

#include <set>
#include <sstream>

#include "common/metrics/http_endpoint.h"

namespace h3pipe::metrics {

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(
    const std::string& bind, int port, std::shared_ptr<prometheus::Registry> registry) {
  auto s = std::unique_ptr<MetricsServer>(new MetricsServer());
  s->http_ = std::make_unique<HttpEndpoint>();
  s->http_->get("/metrics", [registry] {
    std::ostringstream out;
    prometheus::TextSerializer().Serialize(out, registry->Collect());
    return HttpReply{200, "text/plain; version=0.0.4; charset=utf-8", out.str()};
  });
  H3_TRY(s->http_->listen(errc::metrics::kBind, "metrics", bind, port));
  return s;
}

MetricsServer::~MetricsServer() = default;
int MetricsServer::port() const {
  return http_->port();
}

Result<std::unique_ptr<HealthServer>> HealthServer::start(const std::string& bind, int port) {
  auto h = std::unique_ptr<HealthServer>(new HealthServer());
  h->http_ = std::make_unique<HttpEndpoint>();
  h->http_->get("/healthz", [] { return HttpReply{200, "text/plain", "ok\n"}; });
  h->http_->get("/readyz", [st = h->state_] {
    const bool r = st->ready.load();
    std::string failed, degraded;
    {
      std::lock_guard<std::mutex> l(st->mu);
      failed = st->failed;
      std::set<std::string> said;  // two loops in the same state say it once (issue #22 item 10)
      for (const auto& [source, why] : st->degraded)
        if (said.insert(why).second) degraded += (degraded.empty() ? "" : "; ") + why;
    }
    if (r && !degraded.empty()) return HttpReply{503, "text/plain", "degraded: " + degraded + "\n"};
    return HttpReply{r ? 200 : 503, "text/plain",
                     r                ? "ready\n"
                     : failed.empty() ? "not ready\n"
                                      : "failed: " + failed + "\n"};
  });
  H3_TRY(h->http_->listen(errc::health::kBind, "health", bind, port));
  return h;
}

HealthServer::~HealthServer() = default;

void HealthServer::set_degraded(const std::string& source, std::string reason) {
  std::lock_guard<std::mutex> l(state_->mu);
  if (reason.empty())
    state_->degraded.erase(source);
  else
    state_->degraded[source] = std::move(reason);
}

void HealthServer::set_failed(std::string reason) {
  std::lock_guard<std::mutex> l(state_->mu);
  state_->failed = std::move(reason);
}
int HealthServer::port() const {
  return http_->port();
}

}  // namespace h3pipe::metrics
